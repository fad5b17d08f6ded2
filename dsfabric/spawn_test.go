package dsfabric

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dtutils"
)

// TestRanksDieWithLauncher: a self-launched rank does not outlive the
// launcher (rank 0), even when the launcher is killed and cannot clean up.
func TestRanksDieWithLauncher(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=orphan")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := map[int]int{}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(30 * time.Second)
	for len(pids) < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the job ended before forming; ranks seen: %v", pids)
			}
			var rank, size, pid int
			var launcher string
			if _, err := fmt.Sscanf(l, "FORMED rank %d size %d launcher %s pid %d", &rank, &size, &launcher, &pid); err == nil {
				pids[rank] = pid
			}
		case <-timeout:
			t.Fatalf("no job formed within 30 s; ranks seen: %v", pids)
		}
	}
	go func() {
		for range lines {
		}
	}()
	cmd.Process.Kill()
	cmd.Wait()
	for start := time.Now(); alive(pids[1]); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("rank 1 (pid %d) still runs 10 s after its launcher was killed", pids[1])
		}
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// overlapWriter records how many Writes ever ran at once.
type overlapWriter struct {
	in, most, waits atomic.Int32
	lines           atomic.Int64
}

func (w *overlapWriter) Write(p []byte) (int, error) {
	n := w.in.Add(1)
	defer w.in.Add(-1)
	for m := w.most.Load(); n > m && !w.most.CompareAndSwap(m, n); m = w.most.Load() {
	}
	w.lines.Add(int64(bytes.Count(p, []byte("\n"))))
	// Widen the window another writer could enter: the first writes
	// wait up to 20 ms for one, so that an unserialised copy overlaps
	// even on a loaded machine, where a sleep of 100 µs alone let it
	// through (make mutate, dsfabric-locked-writer, once in many runs).
	if w.waits.Add(1) <= 20 {
		for end := time.Now().Add(20 * time.Millisecond); w.in.Load() < 2 && time.Now().Before(end); {
			time.Sleep(100 * time.Microsecond)
		}
	}
	time.Sleep(100 * time.Microsecond)
	return len(p), nil
}

// TestChildOutputSerialised: the output of self-launched ranks, copied
// into one writer that is not a file (Config.Stdout and Stderr alike),
// reaches it one Write at a time, and all of it.
func TestChildOutputSerialised(t *testing.T) {
	const lines = 300
	w := &overlapWriter{}
	rank := -1
	jobWith(t, Config{Procs: 3, ThreadsPerProcess: 1, Stdout: w, Stderr: w}, func(*Handlers) {}, func(t *testing.T, f *Fabric) {
		rank = f.Rank()
		if rank == 0 {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < lines; i++ {
				fmt.Fprintf(os.Stderr, "rank %d stderr line %d\n", rank, i)
			}
		}()
		for i := 0; i < lines; i++ {
			fmt.Fprintf(os.Stdout, "rank %d stdout line %d\n", rank, i)
		}
		<-done
	})
	if rank != 0 {
		return
	}
	if m := w.most.Load(); m != 1 {
		t.Errorf("%d writes into the shared writer at once, want 1", m)
	}
	if n := w.lines.Load(); n < 4*lines {
		t.Errorf("%d lines of the ranks' output arrived, want at least %d", n, 4*lines)
	}
}

// TestConnectPeersRefusesExtraEndpoints: a rank's endpoints join this
// rank's two queue pairs to it; a third from one rank, or one that names
// this rank, is a bootstrap error, not a queue pair connected twice.
func TestConnectPeersRefusesExtraEndpoints(t *testing.T) {
	proc, err := dtutils.NewProcess(dtutils.DefaultProcessConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close()
	lp := dtutils.NewLoopFabric().NewProvider(proc)
	defer lp.Close()
	qp := func() dtutils.QueuePair {
		q, err := lp.NewQueuePair()
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	ep := qp().Endpoint()
	for _, ranks := range [][]uint32{{1, 1, 1, 2}, {0, 1, 2, 2}, {1, 2, 1, 1}} {
		f := &Fabric{rank: 0, names: Names{Size: 3, ThreadsPerProcess: 1}, proc: proc, log: quiet}
		f.peers = []*peer{{rank: 0, qp: qp(), data: qp()}, {rank: 1, qp: qp(), data: qp()}, {rank: 2, qp: qp(), data: qp()}}
		var es []epEntry
		for _, r := range ranks {
			es = append(es, epEntry{peer: r, ep: ep})
		}
		err := f.connectPeers(es)
		if !errors.Is(err, ErrBootstrap) || !strings.Contains(err.Error(), "unexpected endpoint") {
			t.Errorf("endpoints from ranks %v: %v, want an unexpected-endpoint error", ranks, err)
		}
	}
}
