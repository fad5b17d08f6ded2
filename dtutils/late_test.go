package dtutils

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

// The late transport (tests only): a loop variant whose operations take
// effect — and read their source memory — only when a completion that
// covers them is polled, the latest moment verbs allow a NIC to read a
// posted buffer. On loop, shm and tcp a write copies its source at Post (or
// soon after), so memory reused one flush too early goes unnoticed there;
// here it corrupts what arrives.

func lateMake(t testing.TB, pa, pb *Process) (Provider, Provider) {
	f := NewLoopFabric()
	return &lateProvider{f.NewProvider(pa)}, &lateProvider{f.NewProvider(pb)}
}

type lateProvider struct{ Provider }

func (p *lateProvider) NewQueuePair() (QueuePair, error) {
	q, err := p.Provider.NewQueuePair()
	if err != nil {
		return nil, err
	}
	return &lateQP{inner: q, max: p.Process().cfg.MaxUnsignaled}, nil
}

type lateQP struct {
	inner      QueuePair
	max        int
	mu         sync.Mutex
	queue      []WorkRequest // posted, not yet in effect
	unsignaled int           // unsignaled operations in queue
	err        error         // the first failure of a forwarded operation
	// Test scripts: postGate runs first in Post and completeGate first in
	// complete; either may block to force an interleaving.
	postGate     func(WorkRequest)
	completeGate func()
}

func (q *lateQP) Endpoint() []byte            { return q.inner.Endpoint() }
func (q *lateQP) Connect(remote []byte) error { return q.inner.Connect(remote) }
func (q *lateQP) PeerRank() uint32            { return q.inner.PeerRank() }
func (q *lateQP) Close() error                { return q.inner.Close() }
func (q *lateQP) CQ() CompletionQueue         { return lateCQ{q} }

func (q *lateQP) Outstanding() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inner.Outstanding() + q.unsignaled
}

func (q *lateQP) Post(wr WorkRequest) error {
	// Widen the window between a Transmitter's ticket and its post, where
	// another goroutine's signaled operation can overtake this one.
	runtime.Gosched()
	if q.postGate != nil {
		q.postGate(wr)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	if !wr.Signaled {
		if n := q.inner.Outstanding() + q.unsignaled; n >= q.max {
			return fmt.Errorf("%w: %d outstanding, MaxUnsignaled %d", ErrUnsignaledOverflow, n, q.max)
		}
		q.unsignaled++
	}
	q.queue = append(q.queue, wr) // only the Memory: its bytes are read later
	return nil
}

// complete puts into effect every queued operation up to the first signaled
// one, reading their sources now.
func (q *lateQP) complete() {
	if q.completeGate != nil {
		q.completeGate()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, wr := range q.queue {
		if !wr.Signaled {
			continue
		}
		for _, w := range q.queue[:i+1] {
			if err := q.inner.Post(w); err != nil && q.err == nil {
				q.err = err
			}
			if !w.Signaled {
				q.unsignaled--
			}
		}
		q.queue = append(q.queue[:0], q.queue[i+1:]...)
		return
	}
}

type lateCQ struct{ q *lateQP }

func (c lateCQ) Poll(dst []Completion) int {
	if n := c.q.inner.CQ().Poll(dst); n > 0 {
		return n
	}
	c.q.complete()
	return c.q.inner.CQ().Poll(dst)
}

func (c lateCQ) Wait(ctx context.Context, dst []Completion) (int, error) {
	var b Backoff
	for {
		if n := c.Poll(dst); n > 0 {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		b.Wait()
	}
}

// TestLateTransportReadsSourceAtCompletion: the premise of the late
// transport, checked: an unsignaled write changes nothing until a signaled
// operation after it completes, and what arrives is the source's content
// at that moment.
func TestLateTransportReadsSourceAtCompletion(t *testing.T) {
	a, b := connectPair(t, lateMake, nil)
	src, dst := a.mem(t, 0, 8), b.loc(t, 0, 8)
	copy(src.Bytes(), "before..")
	if err := a.qp.Post(WorkRequest{Op: OpWrite, Local: src, Remote: dst}); err != nil {
		t.Fatal(err)
	}
	if string(b.buf.Bytes()[:8]) == "before.." {
		t.Fatal("the late transport applied an unsignaled write at Post")
	}
	copy(src.Bytes(), "after...")
	post(t, a.qp, WorkRequest{Op: OpNop})
	if got := string(b.buf.Bytes()[:8]); got != "after..." {
		t.Fatalf("target holds %q, want the source as it was at completion", got)
	}
}

// TestTransmitterRecyclingRule (paper §4.1, §4.2): memory tagged by the
// Transmitter is reusable only after the flush that covers it — Completed
// is F−1 — and after Flush every unit used before it is free. On the late
// transport, a unit recycled one flush early is rewritten before its write
// reads it, and the target shows it; over tcp, where the write is copied
// at Post, Flush must still free every unit. One goroutine, then four.
func TestTransmitterRecyclingRule(t *testing.T) {
	for _, tr := range []struct {
		name string
		make func(testing.TB, *Process, *Process) (Provider, Provider)
	}{{"late", lateMake}, {"tcp", transports[1].make}} {
		for _, goroutines := range []int{1, 8} {
			t.Run(fmt.Sprintf("%s/%d", tr.name, goroutines), func(t *testing.T) {
				recyclingRule(t, tr.make, goroutines)
			})
		}
	}
}

func recyclingRule(t *testing.T, mk func(testing.TB, *Process, *Process) (Provider, Provider), goroutines int) {
	const units, ops = 8, 3000
	a, b := connectPair(t, mk, func(c *ProcessConfig) { c.MaxUnsignaled = 64 })
	tx, err := NewTransmitter(a.qp, 64, TransmitterConfig{SignalEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	zone, err := alloc.NewZoneAllocator(a.proc.Registry(), alloc.ZoneConfig{SuperchunkSize: 8 << 20, ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			// A ring that cannot grow: recycling is the only way on.
			ring, err := alloc.NewCircular(zone, alloc.CircularConfig{UnitSize: 64, InitialUnits: units, MaxUnits: units, Align: 8})
			if err != nil {
				errs <- err
				return
			}
			for i := 0; i < ops; i++ {
				if i%200 == 199 {
					// After Flush every unit used before it is free.
					if err := tx.Flush(ctx); err != nil {
						errs <- err
						return
					}
					for k := 0; k < units; k++ {
						m, err := ring.Next()
						if err == nil {
							m.Done() // unused: free again at once
						} else {
							errs <- fmt.Errorf("goroutine %d op %d: unit %d of %d still busy right after Flush (Flush must advance F twice, so that Completed = F−1 passes every tag taken before it): %w", g, i, k, units, err)
							return
						}
					}
				}
				u, err := ring.Next()
				if errors.Is(err, alloc.ErrBusy) {
					if err := tx.Flush(ctx); err != nil {
						errs <- err
						return
					}
					if u, err = ring.Next(); err != nil {
						errs <- fmt.Errorf("goroutine %d op %d: a unit is still busy after Flush (Flush must complete every operation posted before it, and Completed must reach their tags): %w", g, i, err)
						return
					}
				}
				if err != nil {
					errs <- err
					return
				}
				m, _ := u.Slice(0, 8)
				v := uint64(g)<<32 | uint64(i+1)
				for k := range 8 {
					m.Bytes()[k] = byte(v >> (8 * k))
				}
				slot := g*ops + i
				loc, _ := b.buf.Locator(8*slot, 8)
				if err := tx.Write(m, loc); err != nil {
					errs <- err
					return
				}
			}
			errs <- tx.Flush(ctx)
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	remote := b.buf.Bytes()
	for g := 0; g < goroutines; g++ {
		for i := 0; i < ops; i++ {
			slot := g*ops + i
			var got uint64
			for k := range 8 {
				got |= uint64(remote[8*slot+k]) << (8 * k)
			}
			if want := uint64(g)<<32 | uint64(i+1); got != want {
				t.Fatalf("goroutine %d write %d delivered %#x, want %#x: its unit was reused before the write read it (Completed must be F−1: memory tagged f is free only once F ≥ f+2)", g, i, got, want)
			}
		}
	}
}

// TestTransmitterCompletedIsFMinusOne (paper §4.1) scripts the race that
// makes Completed F−1 rather than F. With k = 2: write X takes ticket 1
// (group 0, unsignaled) and is held before it reaches the queue pair;
// write S takes ticket 2 (group 1, signaled) and is queued first; X is
// queued and tagged with F = 0 while S's completion is held; then S
// completes and F becomes 1. S was queued before X, so X has not taken
// effect — its memory must still be busy, which only Completed = F−1
// guarantees.
func TestTransmitterCompletedIsFMinusOne(t *testing.T) {
	a, b := connectPair(t, lateMake, nil)
	q := a.qp.(*lateQP)
	tx, err := NewTransmitter(q, 64, TransmitterConfig{SignalEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	zone, err := alloc.NewZoneAllocator(a.proc.Registry(), alloc.ZoneConfig{SuperchunkSize: 8 << 20, ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ring := func() *alloc.Circular {
		r, err := alloc.NewCircular(zone, alloc.CircularConfig{UnitSize: 64, InitialUnits: 1, MaxUnits: 1, Align: 8})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ringA, ringX, ringS := ring(), ring(), ring()
	next := func(r *alloc.Circular) alloc.Memory {
		m, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	memA, memX, memS := next(ringA), next(ringX), next(ringS)
	dst := func(i int) alloc.Locator { return b.loc(t, 64*i, 64) }
	xHeld, xRelease := make(chan struct{}), make(chan struct{})
	sHeld, sRelease := make(chan struct{}), make(chan struct{})
	var once sync.Once
	q.postGate = func(wr WorkRequest) {
		if wr.WRID>>slotBits == 1 { // X
			close(xHeld)
			<-xRelease
		}
	}
	q.completeGate = func() {
		once.Do(func() { close(sHeld); <-sRelease }) // the first completion: S's
	}
	timeout := time.After(10 * time.Second)
	step := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("script stuck: %s", what)
		}
	}
	if err := tx.Write(memA, dst(0)); err != nil { // ticket 0
		t.Fatal(err)
	}
	xDone, sDone := make(chan error, 1), make(chan error, 1)
	go func() { xDone <- tx.Write(memX, dst(1)) }() // ticket 1, held
	step(xHeld, "X never reached the queue pair")
	go func() { sDone <- tx.Write(memS, dst(2)) }() // ticket 2, signaled
	step(sHeld, "S never waited for its completion")
	close(xRelease) // X is queued after S and tagged while F = 0
	select {
	case err := <-xDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-timeout:
		t.Fatal("script stuck: X's write did not return")
	}
	close(sRelease) // S completes: F = 1; X is still queued
	select {
	case err := <-sDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-timeout:
		t.Fatal("script stuck: S's write did not return")
	}
	if f := tx.FlushNumber(); f != 1 {
		t.Fatalf("script: flush number %d after S, want 1", f)
	}
	if _, err := ringX.Next(); !errors.Is(err, alloc.ErrBusy) {
		t.Fatalf("X's memory is reusable (Completed %d) while its write is still queued behind S: memory tagged f is free only once F ≥ f+2 (Completed = F−1)", tx.Completed())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tx.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ringX.Next(); err != nil {
		t.Fatalf("after Flush X's memory is still busy: %v", err)
	}
}
