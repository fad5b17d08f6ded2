package dtutils

import (
	"testing"

	"github.com/seriema-go/seriema/internal/jobtest"
)

// TestTwoHostsOverNetns runs the two peers in two network namespaces joined
// by a veth pair, so that tcp crosses a real (virtual) link between two
// hosts: writes, reads and atomics both ways. The namespaces and addresses
// are made by the test and removed after it.
func TestTwoHostsOverNetns(t *testing.T) {
	h := jobtest.TwoHosts(t)
	a := startPeer(t, "atomics,tcp,0,"+h.Addr[0]+":0", h.IP, "netns", "exec", h.NS[0])
	b := startPeer(t, "atomics,tcp,1,"+h.Addr[1]+":0", h.IP, "netns", "exec", h.NS[1])
	runPeers(t, a, b)
}
