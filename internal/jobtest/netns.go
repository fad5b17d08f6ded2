package jobtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Hosts are two test hosts on one machine: two network namespaces joined by
// a veth pair, each with its own address, made by TwoHosts and removed when
// the test ends.
type Hosts struct {
	IP   string // the ip command
	NS   [2]string
	Addr [2]string // each host's address on the link
}

// TwoHosts makes two hosts, or skips the test when it cannot (not root, no
// ip command, no permission to create namespaces).
func TwoHosts(t testing.TB) Hosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("needs the ip command (Debian package iproute2; .ci/run installs it)")
	}
	id := os.Getpid() % 10000
	h := Hosts{IP: ipPath, NS: [2]string{fmt.Sprintf("seriema-a-%d", id), fmt.Sprintf("seriema-b-%d", id)}}
	vethA, vethB := fmt.Sprintf("sva%d", id), fmt.Sprintf("svb%d", id)
	subnet := fmt.Sprintf("10.203.%d", id%250)
	h.Addr = [2]string{subnet + ".1", subnet + ".2"}
	run := func(args ...string) error {
		out, err := exec.Command(ipPath, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		run("netns", "del", h.NS[0])
		run("netns", "del", h.NS[1])
	})
	for _, step := range [][]string{
		{"netns", "add", h.NS[0]},
		{"netns", "add", h.NS[1]},
		{"link", "add", vethA, "type", "veth", "peer", "name", vethB},
		{"link", "set", vethA, "netns", h.NS[0]},
		{"link", "set", vethB, "netns", h.NS[1]},
		{"-n", h.NS[0], "addr", "add", h.Addr[0] + "/24", "dev", vethA},
		{"-n", h.NS[1], "addr", "add", h.Addr[1] + "/24", "dev", vethB},
		{"-n", h.NS[0], "link", "set", vethA, "up"},
		{"-n", h.NS[1], "link", "set", vethB, "up"},
		{"-n", h.NS[0], "link", "set", "lo", "up"},
		{"-n", h.NS[1], "link", "set", "lo", "up"},
	} {
		if err := run(step...); err != nil {
			t.Skipf("cannot build the two-host network here: %v", err)
		}
	}
	return h
}

// Command returns a command that runs argv on host i. With privateTmp the
// host also gets a file system of its own for temporary files: a tmpfs
// mounted, in the host's own mount namespace, on a fresh directory that
// TMPDIR names — so, as on two real machines, neither host can reach the
// other's unix sockets.
func (h Hosts) Command(t testing.TB, i int, privateTmp bool, argv ...string) *exec.Cmd {
	t.Helper()
	args := []string{"netns", "exec", h.NS[i]}
	var env []string
	if privateTmp {
		dir := t.TempDir()
		private := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", `mount -t tmpfs tmpfs "$TMPDIR" && exec "$@"`, "sh"}
		check := exec.Command(h.IP, append(append(args[:len(args):len(args)], private...), "true")...)
		check.Env = append(os.Environ(), "TMPDIR="+dir)
		if out, err := check.CombinedOutput(); err != nil {
			t.Skipf("cannot give a test host a file system of its own here (unshare, mount): %v: %s", err, out)
		}
		args = append(args, private...)
		env = append(env, "TMPDIR="+dir)
	}
	cmd := exec.Command(h.IP, append(args, argv...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}
