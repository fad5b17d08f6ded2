package dtutils

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTwoHostsOverNetns runs the two peers in two network namespaces joined
// by a veth pair, so that tcp crosses a real (virtual) link between two
// hosts: writes, reads and atomics both ways. The namespaces and addresses
// are made by the test and removed after it.
func TestTwoHostsOverNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("needs the ip command (Debian package iproute2)")
	}
	id := os.Getpid() % 10000
	nsA, nsB := fmt.Sprintf("seriema-a-%d", id), fmt.Sprintf("seriema-b-%d", id)
	vethA, vethB := fmt.Sprintf("sva%d", id), fmt.Sprintf("svb%d", id)
	subnet := fmt.Sprintf("10.203.%d", id%250)
	run := func(args ...string) error {
		out, err := exec.Command(ipPath, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		run("netns", "del", nsA)
		run("netns", "del", nsB)
	})
	for _, step := range [][]string{
		{"netns", "add", nsA},
		{"netns", "add", nsB},
		{"link", "add", vethA, "type", "veth", "peer", "name", vethB},
		{"link", "set", vethA, "netns", nsA},
		{"link", "set", vethB, "netns", nsB},
		{"-n", nsA, "addr", "add", subnet + ".1/24", "dev", vethA},
		{"-n", nsB, "addr", "add", subnet + ".2/24", "dev", vethB},
		{"-n", nsA, "link", "set", vethA, "up"},
		{"-n", nsB, "link", "set", vethB, "up"},
		{"-n", nsA, "link", "set", "lo", "up"},
		{"-n", nsB, "link", "set", "lo", "up"},
	} {
		if err := run(step...); err != nil {
			t.Skipf("cannot build the two-host network here: %v", err)
		}
	}
	a := startPeer(t, "atomics,tcp,0,"+subnet+".1:0", ipPath, "netns", "exec", nsA)
	b := startPeer(t, "atomics,tcp,1,"+subnet+".2:0", ipPath, "netns", "exec", nsB)
	runPeers(t, a, b)
}
