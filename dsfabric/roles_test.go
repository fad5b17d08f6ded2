package dsfabric

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// roleEnv makes the test binary run a scenario as a plain rank process (for
// launcher, failure and mpirun tests) instead of the tests.
const roleEnv = "SERIEMA_TEST_ROLE"

func runRole(role string) int {
	timeout, _ := time.ParseDuration(os.Getenv("SERIEMA_TEST_TIMEOUT"))
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	h := NewHandlers()
	echo, _ := h.Register("echo", func(c *Call, a []byte) ([]byte, error) { return a, nil })
	cfg := Config{Handlers: h, BootstrapTimeout: timeout,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	switch role {
	case "kill":
		cfg.Procs = 3
	case "orphan":
		cfg.Procs = 2
	}
	ctx := context.Background()
	f, err := Start(ctx, cfg)
	if err != nil {
		fmt.Println("ERROR:", err)
		return 1
	}
	fmt.Printf("FORMED rank %d size %d launcher %s pid %d\n", f.Rank(), f.Size(), f.Launcher(), os.Getpid())
	me, _ := f.Names().Thread(f.Rank(), 0)
	switch role {
	case "form":
		for r := 0; r < f.Size(); r++ {
			dst, _ := f.Names().Thread(r, 0)
			out, err := f.CallReturn(ctx, me, dst, echo, []byte(fmt.Sprint(f.Rank())))
			if err != nil || string(out) != fmt.Sprint(f.Rank()) {
				fmt.Println("ERROR: call to rank", r, err)
				return 1
			}
		}
		fmt.Println("CALLS OK")
	case "kill":
		f.Barrier(ctx)
		if f.Rank() == 2 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		t0 := time.Now()
		for f.DeadRanks()[2] == "" && time.Since(t0) < 5*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Printf("NOTICED %v after %dms\n", f.DeadRanks()[2] != "", time.Since(t0).Milliseconds())
		dst, _ := f.Names().Thread(2, 0)
		_, err := f.CallReturn(ctx, me, dst, echo, nil)
		fmt.Printf("CALL ERROR %v: %v\n", errors.Is(err, ErrRankDead) && strings.Contains(err.Error(), "rank 2"), err)
	case "orphan":
		time.Sleep(time.Minute) // until the test kills rank 0
	}
	if err := f.Close(); err != nil {
		fmt.Println("CLOSE:", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	return 0
}

// rankProc starts the test binary in a role, as one rank of a job whose
// launcher is the test itself (SERIEMA_RANK and friends).
func rankProc(t *testing.T, role string, env ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &out, &errb
}

func waitProc(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		cmd.Process.Kill()
		t.Fatalf("process %d did not finish within %v", cmd.Process.Pid, d)
	}
	return nil
}

// dialCoordSock connects to rank 0's coordinator socket once it listens (for
// up to 5 s); the connection closes with the test.
func dialCoordSock(t *testing.T, sock string) net.Conn {
	t.Helper()
	for i := 0; i < 500; i++ {
		if c, err := net.Dial("unix", sock); err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("rank 0 never listened")
	return nil
}

// TestWrongSecretRejected (docs/design.md §5): a hello with a wrong job token is
// refused with a clear log line, and the job still forms.
func TestWrongSecretRejected(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "coord.sock")
	env := []string{EnvSize + "=2", EnvCoord + "=unix:" + sock, EnvToken + "=the-right-secret"}
	r0, out0, err0 := rankProc(t, "form", append(env, EnvRank+"=0")...)
	c := dialCoordSock(t, sock)
	writeFrame(c, hello{rank: 1, size: 2, token: []byte("a-wrong-secret"), machine: "intruder"}.encode())
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := readFrame(c)
	if err != nil || b[0] != msgRefused || !strings.Contains(string(b), "bad job token") {
		t.Fatalf("intruder got %q, %v; want a refusal", b, err)
	}
	c.Close()
	r1, out1, _ := rankProc(t, "form", append(env, EnvRank+"=1")...)
	for i, p := range []*exec.Cmd{r0, r1} {
		if err := waitProc(t, p, 30*time.Second); err != nil {
			t.Fatalf("rank %d: %v\n%s%s", i, err, []*bytes.Buffer{out0, out1}[i], err0)
		}
	}
	for _, o := range []*bytes.Buffer{out0, out1} {
		if !strings.Contains(o.String(), "CALLS OK") {
			t.Fatalf("job did not form: %s", o)
		}
	}
	if !strings.Contains(err0.String(), "rejected hello") || !strings.Contains(err0.String(), "bad job token") {
		t.Fatalf("no clear log line for the refused hello: %s", err0)
	}
}

// TestMissingRankTimesOut: a rank that never arrives makes bootstrap fail
// after the configured timeout, naming it.
func TestMissingRankTimesOut(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "coord.sock")
	r0, out, _ := rankProc(t, "form", EnvRank+"=0", EnvSize+"=3", EnvCoord+"=unix:"+sock, EnvToken+"=s", "SERIEMA_TEST_TIMEOUT=1s")
	r1, _, _ := rankProc(t, "form", EnvRank+"=1", EnvSize+"=3", EnvCoord+"=unix:"+sock, EnvToken+"=s", "SERIEMA_TEST_TIMEOUT=1s")
	err := waitProc(t, r0, 20*time.Second)
	waitProc(t, r1, 20*time.Second)
	if err == nil || !strings.Contains(out.String(), "rank 2 never arrived") {
		t.Fatalf("exit %v, output %q; want a failure naming rank 2", err, out)
	}
}

// TestKilledRankNoticed (docs/design.md §5 failure): SIGKILL of rank 2 is noticed by
// the others within 2 s, calls to it fail naming it, the self-launcher
// exits non-zero naming it, and no process is left behind.
func TestKilledRankNoticed(t *testing.T) {
	root, out, errb := rankProc(t, "kill")
	err := waitProc(t, root, 60*time.Second)
	o := out.String()
	if err == nil {
		t.Fatalf("self-launcher exited 0 although rank 2 died:\n%s", o)
	}
	if !strings.Contains(o, "CLOSE:") || !strings.Contains(o, "rank 2") {
		t.Fatalf("the launcher's error does not name rank 2:\n%s\n%s", o, errb)
	}
	noticed := 0
	sc := bufio.NewScanner(strings.NewReader(o))
	var pids []int
	for sc.Scan() {
		l := sc.Text()
		var ms int
		if _, err := fmt.Sscanf(l, "NOTICED true after %dms", &ms); err == nil {
			noticed++
			if ms > 2000 {
				t.Errorf("death noticed after %d ms", ms)
			}
		}
		if strings.HasPrefix(l, "CALL ERROR") && !strings.HasPrefix(l, "CALL ERROR true") {
			t.Errorf("call to the dead rank: %s", l)
		}
		if i := strings.Index(l, " pid "); strings.HasPrefix(l, "FORMED") && i > 0 {
			p, _ := strconv.Atoi(l[i+5:])
			pids = append(pids, p)
		}
	}
	if noticed != 2 {
		t.Fatalf("%d ranks noticed the death, want 2:\n%s", noticed, o)
	}
	time.Sleep(100 * time.Millisecond)
	for _, p := range pids {
		if alive(p) {
			t.Errorf("process %d of the job is still running", p)
		}
	}
}

// TestMpirun runs 3 ranks under Open MPI's mpirun: they agree on names and
// call each other.
func TestMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun is not installed (Debian package openmpi-bin; .ci/run installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3",
		"-x", roleEnv+"=form", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "OMPI_MCA_plm_rsh_agent=") // no ssh: every rank is local
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	formed := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "FORMED") {
			if !strings.Contains(l, "size 3 launcher mpirun") {
				t.Errorf("unexpected: %s", l)
			}
			formed[strings.Fields(l)[2]] = true
		}
	}
	if len(formed) != 3 || strings.Count(string(out), "CALLS OK") != 3 {
		t.Fatalf("want ranks 0,1,2 formed and calling:\n%s", out)
	}
}

// TestBootstrapRefusesClaims (docs/design.md §5): rank 0 refuses a hello
// that claims rank 0, and a second hello for a rank that has joined, with
// the right token: each names its reason, and neither takes a place in
// the job (the table goes out only when every rank is there).
func TestBootstrapRefusesClaims(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "coord.sock")
	env := []string{EnvSize + "=3", EnvCoord + "=unix:" + sock, EnvToken + "=s", EnvRank + "=0", "SERIEMA_TEST_TIMEOUT=20s"}
	rankProc(t, "form", env...)
	first := dialCoordSock(t, sock)
	if err := writeFrame(first, hello{rank: 1, size: 3, token: []byte("s"), machine: "m"}.encode()); err != nil {
		t.Fatal(err)
	}
	// The first hello for rank 1 is taken: no answer until rank 2 comes.
	first.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := readFrame(first); err == nil {
		t.Fatalf("rank 1's hello was answered before the job formed: %q", b)
	}
	for _, c := range []struct {
		rank   uint32
		reason string
	}{{1, "rank already joined"}, {0, "rank 0 out of range"}} {
		conn := dialCoordSock(t, sock)
		if err := writeFrame(conn, hello{rank: c.rank, size: 3, token: []byte("s"), machine: "m"}.encode()); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := readFrame(conn)
		if err != nil || len(b) == 0 || b[0] != msgRefused || !strings.Contains(string(b), c.reason) {
			t.Fatalf("a hello claiming rank %d got %q, %v; want a refusal (%s)", c.rank, b, err, c.reason)
		}
	}
}

// TestPlanNeedsBothProbes (docs/design.md §5): the coordinator plans shm
// for a pair only when the probes of both sides passed, so that the two
// always agree on the transport between them.
func TestPlanNeedsBothProbes(t *testing.T) {
	c := newCoordinator(nil, nil, 3)
	// Rank 0 reaches 1 and 2; rank 1 reaches 0 and 2; rank 2 reaches only 0.
	reach := map[int][]int{1: {0, 2}, 2: {0}}
	type plan struct {
		rank  int
		ranks []int
		err   error
	}
	plans := make(chan plan, 2)
	for r := 1; r < 3; r++ {
		ours, theirs := net.Pipe()
		t.Cleanup(func() { ours.Close(); theirs.Close() })
		c.conns[r] = ours
		go func() {
			p := plan{rank: r}
			defer func() { plans <- p }()
			if p.err = writeFrame(theirs, encodeRanks(msgReach, reach[r])); p.err != nil {
				return
			}
			var b []byte
			if b, p.err = readFrame(theirs); p.err == nil {
				p.ranks, p.err = decodeRanks(b, msgPlan, 3)
			}
		}()
	}
	own, err := c.plan([]int{1, 2}, time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{0: "[1 2]", 1: "[0]", 2: "[0]"}
	if fmt.Sprint(own) != want[0] {
		t.Errorf("rank 0's plan %v, want %s", own, want[0])
	}
	for i := 0; i < 2; i++ {
		p := <-plans
		if p.err != nil {
			t.Fatalf("rank %d: %v", p.rank, p.err)
		}
		if fmt.Sprint(p.ranks) != want[p.rank] {
			t.Errorf("rank %d's plan %v, want %s (shm only where both probes passed)", p.rank, p.ranks, want[p.rank])
		}
	}
}
