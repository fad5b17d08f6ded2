package dtutils

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// engines returns how many progress engines p has.
func engines(p *Process) int {
	if l := p.progress.list.Load(); l != nil {
		return len(*l)
	}
	return 0
}

// TestProgressEngines: a tcp queue pair is a progress engine of its
// process while it is open; Progress counts only the engines that did
// something (callers back off on 0); a write completes while both sides
// poll; and a closed connection's engine leaves the list. (Whether
// Progress or an engine's own goroutine applies the write is a race: an
// engine watches its socket whenever polls pause for a millisecond, so
// the test does not ask which.)
func TestProgressEngines(t *testing.T) {
	a, b := tcpPair(t)
	if engines(a.proc) != 1 || engines(b.proc) != 1 {
		t.Fatalf("engines: %d and %d, want one per queue pair", engines(a.proc), engines(b.proc))
	}
	// Idle connections: nothing to do, and Progress says so.
	time.Sleep(10 * time.Millisecond) // the hellos' echoes, if any, settle
	for i := 0; i < 3; i++ {
		a.proc.Progress()
		b.proc.Progress()
	}
	if n := a.proc.Progress(); n != 0 {
		t.Fatalf("Progress on an idle connection = %d, want 0", n)
	}
	// A signaled write: b's Progress applies it and answers; a's Progress
	// reads the answer, and the completion is there.
	src := a.mem(t, 0, 64)
	fill(src.Bytes(), 3)
	if err := a.qp.Post(WorkRequest{Op: OpWrite, WRID: 9, Signaled: true, Local: src, Remote: b.loc(t, 0, 64)}); err != nil {
		t.Fatal(err)
	}
	var c [1]Completion
	deadline := time.Now().Add(10 * time.Second)
	for a.qp.CQ().Poll(c[:]) == 0 {
		b.proc.Progress()
		a.proc.Progress()
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
	}
	if c[0].Status != StatusSuccess || c[0].WRID != 9 {
		t.Fatalf("completion %+v", c[0])
	}
	if err := b.qp.Close(); err != nil {
		t.Fatal(err)
	}
	if n := engines(b.proc); n != 0 {
		t.Fatalf("after Close: %d engines, want 0", n)
	}
	if n := b.proc.Progress(); n != 0 {
		t.Fatalf("Progress with no engines = %d", n)
	}
}

// TestProgressIdleHandsOver: while a thread calls Progress at a polling
// rate, a tcp connection's engine goroutine stands by; after Process.Idle
// (a poller about to sleep on a doorbell) it watches the socket, even
// though the polls go on. Without the hint the engine also starts watching
// whenever the poller misses a stand-by interval, which a 2-core VM does
// every second or so: this test checks the hand-over happens, not how
// soon (scripts/mutate leaves the hint's removal out for that reason).
func TestProgressIdleHandsOver(t *testing.T) {
	a, _ := tcpPair(t)
	q := a.qp.(*tcpQP)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var polls atomic.Int64
	wg.Add(1)
	go func() { // a poller
		defer wg.Done()
		for ctx.Err() == nil {
			a.proc.Progress()
			polls.Add(1)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	// Let the engine see the polls and stand by.
	for start := time.Now(); q.watching.Load() || polls.Load() < 100_000; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the engine kept watching the socket while a thread polled")
		}
	}
	a.proc.Idle()
	// Sleep between looks, leaving the cores to the poller: a watch lasts
	// at least one 20 ms poll(2) on an idle socket.
	deadline := time.Now().Add(5 * time.Second)
	for !q.watching.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the engine did not take the socket over after Idle")
		}
		time.Sleep(200 * time.Microsecond)
	}
}
