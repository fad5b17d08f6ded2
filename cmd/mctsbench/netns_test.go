package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/seriema-go/seriema/internal/jobtest"
)

// The README's "Running across machines" commands, on two test hosts (two
// network namespaces joined by a veth pair): rank 0 on host A, rank 1 on
// host B, started with PMI_RANK/PMI_SIZE, SERIEMA_COORD (host A's address)
// and SERIEMA_JOB_TOKEN. The test binary stands in for bin/mctsbench: it
// runs the same command line (TestMain dispatches childArgsEnv to run).

// hostRank starts rank r of a two-rank demo job on host r.
func hostRank(t *testing.T, h jobtest.Hosts, r int, privateTmp bool, port int, args string) *exec.Cmd {
	t.Helper()
	cmd := h.Command(t, r, privateTmp, os.Args[0], "-test.run=^$")
	cmd.Env = append(cmd.Env,
		fmt.Sprintf("PMI_RANK=%d", r), "PMI_SIZE=2",
		fmt.Sprintf("SERIEMA_COORD=%s:%d", h.Addr[0], port),
		"SERIEMA_JOB_TOKEN=netns-test-secret",
		childArgsEnv+"="+args)
	return cmd
}

// hostCases are TestDemoAcrossTwoHosts's jobs; builds with -tags ofi add
// one over ofi (libfabric's tcp provider).
var hostCases = []struct {
	name, flag string
	privateTmp bool
	want       string
}{
	{"forced-tcp", "-transport tcp", false, "tcp"},
	{"auto-separate-hosts", "", true, "tcp"},
	{"auto-shared-tmp", "", false, "shm"},
}

// TestDemoAcrossTwoHosts: the demo (7×7, two moves) across two hosts, with
// the transport forced to tcp and chosen automatically. Automatic means
// tcp when each host has its own file system for temporary files (the
// hosts share a host name and boot ID, so only the shm probe can tell them
// apart), and shm when the two namespaces share one (the probe proves the
// memory reachable, and it is).
func TestDemoAcrossTwoHosts(t *testing.T) {
	h := jobtest.TwoHosts(t)
	for i, c := range hostCases {
		t.Run(c.name, func(t *testing.T) {
			args := strings.TrimSpace("demo -board 7 -moves 2 -visits 2000 -json " + c.flag)
			out := runHostJob(t, h, c.privateTmp, 7100+i, args)
			var sum DemoSummary
			if err := json.Unmarshal(out, &sum); err != nil {
				t.Fatalf("rank 0 printed no summary: %v\n%s", err, out)
			}
			if sum.Transport != c.want {
				t.Errorf("rank 0 reports transport %q, want %q", sum.Transport, c.want)
			}
			if len(sum.Moves) != 2 || sum.Board != "7x7" {
				t.Errorf("the game did not run to its two moves: %+v", sum)
			}
		})
	}
}

// runHostJob runs a two-rank job of args, rank r on host r, and returns
// rank 0's standard output; either rank failing, or the job outlasting
// 90 s, fails the test.
func runHostJob(t *testing.T, h jobtest.Hosts, privateTmp bool, port int, args string) []byte {
	t.Helper()
	var out, errs [2]bytes.Buffer
	cmds := [2]*exec.Cmd{}
	for r := 0; r < 2; r++ {
		cmds[r] = hostRank(t, h, r, privateTmp, port, args)
		cmds[r].Stdout, cmds[r].Stderr = &out[r], &errs[r]
		if err := cmds[r].Start(); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 2)
	for r := 0; r < 2; r++ {
		go func(r int) { done <- cmds[r].Wait() }(r)
	}
	timeout := time.After(90 * time.Second)
	for k := 0; k < 2; k++ {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("a rank failed: %v", err)
			}
		case <-timeout:
			cmds[0].Process.Kill()
			cmds[1].Process.Kill()
			t.Fatalf("the job did not finish within 90 s\nrank 0:\n%s\nrank 1:\n%s", errs[0].String(), errs[1].String())
		}
	}
	if t.Failed() {
		t.Fatalf("rank 0:\n%s%s\nrank 1:\n%s", out[0].String(), errs[0].String(), errs[1].String())
	}
	return out[0].Bytes()
}

// TestMicroAcrossTwoHosts: the fabric modes of mctsbench micro as a job
// across two hosts, over tcp and, in builds with it, ofi.
func TestMicroAcrossTwoHosts(t *testing.T) {
	h := jobtest.TwoHosts(t)
	for i, tr := range testTransports {
		if tr == "shm" {
			continue // the hosts do not share memory
		}
		t.Run(tr, func(t *testing.T) {
			out := runHostJob(t, h, true, 7300+i, "micro -mode write,trad -sizes 64 -n 2000 -reps 1 -json -transport "+tr)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 2 {
				t.Fatalf("want 2 results, got %q", out)
			}
			for _, l := range lines {
				var r Result
				if err := json.Unmarshal([]byte(l), &r); err != nil || r.Transport != resultTransport(tr) || r.CallsPerS <= 0 {
					t.Fatalf("bad result %q: %v", l, err)
				}
			}
		})
	}
}

// TestDemoAcrossTwoHostsRankKilled: rank 1 is killed with SIGKILL in the
// middle of a search; rank 0 exits non-zero naming it within 2 s.
func TestDemoAcrossTwoHostsRankKilled(t *testing.T) {
	h := jobtest.TwoHosts(t)
	// Moves long enough to be killed in, short enough under -race.
	args := "demo -board 7 -moves 40 -visits 20000"
	r0 := hostRank(t, h, 0, true, 7200, args)
	r1 := hostRank(t, h, 1, true, 7200, args)
	var errs0, errs1 bytes.Buffer
	r0.Stderr, r1.Stderr = &errs0, &errs1
	out0, err := r0.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r0.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r1.Start(); err != nil {
		r0.Process.Kill()
		t.Fatal(err)
	}
	defer r0.Process.Kill()
	defer r1.Process.Kill()
	// Wait for the first move: the job is formed and searching.
	moved := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out0)
		found := false
		for sc.Scan() {
			if !found && strings.HasPrefix(strings.TrimSpace(sc.Text()), "move") {
				found = true
				moved <- true
			}
		}
		if !found {
			moved <- false
		}
		io.Copy(io.Discard, out0)
	}()
	select {
	case ok := <-moved:
		if !ok {
			t.Fatalf("rank 0 ended before its first move:\n%s\nrank 1:\n%s", errs0.String(), errs1.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no first move within 60 s:\n%s", errs0.String())
	}
	time.Sleep(50 * time.Millisecond) // in the middle of the next search
	killed := time.Now()
	r1.Process.Kill()
	r1.Wait()
	exited := make(chan error, 1)
	go func() { exited <- r0.Wait() }()
	select {
	case err := <-exited:
		took := time.Since(killed)
		t.Logf("rank 0 exited %v after rank 1 was killed: %v", took.Round(time.Millisecond), err)
		if err == nil {
			t.Errorf("rank 0 exited 0 although rank 1 died")
		}
		if took > 2*time.Second {
			t.Errorf("rank 0 took %v to exit, want at most 2 s", took)
		}
		if !strings.Contains(errs0.String(), "rank 1") {
			t.Errorf("rank 0's error does not name rank 1:\n%s", errs0.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("rank 0 still runs 10 s after rank 1 was killed:\n%s", errs0.String())
	}
}
