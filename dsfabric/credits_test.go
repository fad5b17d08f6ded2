package dsfabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

// TestSection3_2_SendCredits (paper §3.2, send-based calls; docs/design.md,
// "dsfabric"): with one receive buffer per sender (RecvBuffers = procs),
// every thread floods every thread of the job, its own included, from two
// goroutines per rank. Each call must arrive once and in order per pair of
// threads, and no send may fail: a sender that overran its credits would
// find no receive buffer posted, and its queue pair would fail.
func TestSection3_2_SendCredits(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) { sendCredits(t, tr) })
	}
}

func sendCredits(t *testing.T, transport string) {
	const procs, threads, perPair = 4, 2, 300
	type cell struct {
		next atomic.Int64
		bad  atomic.Int64
	}
	var seen [threads][procs * threads]cell // [our thread][source thread]
	var hSeq HandlerID
	reg := func(h *Handlers) {
		hSeq, _ = h.Register("seq", func(c *Call, a []byte) ([]byte, error) {
			src, n := binary.LittleEndian.Uint32(a), int64(binary.LittleEndian.Uint32(a[4:]))
			cl := &seen[c.Fabric.Names().ThreadRank(c.Dst)][src]
			if ThreadID(src) != c.Src || cl.next.Load() != n {
				cl.bad.Add(1)
			}
			cl.next.Store(n + 1)
			return nil, nil
		})
	}
	jobWith(t, Config{Procs: procs, ThreadsPerProcess: threads, Transport: transport, RecvBuffers: procs}, reg, func(t *testing.T, f *Fabric) {
		if got := f.credits(); got != 1 {
			t.Errorf("credits %d with %d receive buffers and %d ranks, want 1", got, procs, procs)
		}
		var wg sync.WaitGroup
		errs := make(chan error, threads)
		for th := 0; th < threads; th++ {
			me, _ := f.Names().Thread(f.Rank(), th)
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := make([]byte, 8)
				for i := 0; i < perPair; i++ {
					for dst := ThreadID(0); dst < procs*threads; dst++ {
						binary.LittleEndian.PutUint32(a, uint32(me))
						binary.LittleEndian.PutUint32(a[4:], uint32(i))
						if err := f.Call(me, dst, hSeq, a, nil); err != nil {
							errs <- fmt.Errorf("call %d from %d to %d: %w", i, me, dst, err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for th := 0; th < threads; th++ {
			for src := range seen[th] {
				cl := &seen[th][src]
				for cl.next.Load() != perPair && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if n, bad := cl.next.Load(), cl.bad.Load(); n != perPair || bad != 0 {
					t.Errorf("rank %d thread %d from thread %d: %d calls ran, %d out of order, want %d in order", f.Rank(), th, src, n, bad, perPair)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := f.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSection3_2_CallsInHandlers: handlers that call the other rank from
// inside the handler, many chains at once, one receive buffer per sender.
// A worker blocked in a send for want of credits must not stop its own
// process from consuming (its service thread routes while it does not
// poll), or both ranks would wait for each other's credits forever.
func TestSection3_2_CallsInHandlers(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			const chains, hops = 64, 200
			var done atomic.Int64
			var hopErr atomic.Pointer[error] // a hop's Call failed: its chain ended there
			var hPing HandlerID
			reg := func(h *Handlers) {
				hPing, _ = h.Register("ping", func(c *Call, a []byte) ([]byte, error) {
					left := binary.LittleEndian.Uint32(a)
					if left == 0 {
						done.Add(1)
						return nil, nil
					}
					binary.LittleEndian.PutUint32(a, left-1)
					other, _ := c.Fabric.Names().Thread(1-c.Fabric.Rank(), 0)
					err := c.Fabric.Call(c.Dst, other, hPing, a, nil)
					if err != nil {
						hopErr.CompareAndSwap(nil, &err)
					}
					return nil, err
				})
			}
			jobWith(t, Config{Procs: 2, ThreadsPerProcess: 1, Transport: tr, RecvBuffers: 2}, reg, func(t *testing.T, f *Fabric) {
				me, _ := f.Names().Thread(f.Rank(), 0)
				other, _ := f.Names().Thread(1-f.Rank(), 0)
				a := make([]byte, 4)
				for i := 0; i < chains; i++ {
					binary.LittleEndian.PutUint32(a, hops)
					if err := f.Call(me, other, hPing, a, nil); err != nil {
						t.Fatal(err)
					}
				}
				// A chain of an even number of hops ends at the other rank,
				// which started as many. The deadline only guards against a
				// hang: credit-starved chains are slow by design (12-15 s over
				// ofi under -race on an idle 2-core machine), and CI runs
				// other packages' tests beside this one (there it once ran
				// out of 30 s with 4 of 64 chains ended).
				// A failed hop or a dead peer ends the wait at once: the
				// chains cannot all end then.
				deadline := time.Now().Add(2 * time.Minute)
				for done.Load() != chains && time.Now().Before(deadline) && hopErr.Load() == nil && f.DeadErr() == nil {
					time.Sleep(time.Millisecond)
				}
				if n := done.Load(); n != chains {
					var err error
					if e := hopErr.Load(); e != nil {
						err = *e
					}
					t.Fatalf("rank %d: %d of %d call chains ended (a hop: %v; peers: %v)", f.Rank(), n, chains, err, f.DeadErr())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if err := f.Barrier(ctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestCreditHello: a credit hello is taken only when it names an aligned
// word of its sender's memory; anything else is dropped (and credits for
// that sender are never written anywhere else).
func TestCreditHello(t *testing.T) {
	f := &Fabric{log: quiet, peers: []*peer{{rank: 0}, {rank: 1}}}
	good := alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 3}, Offset: 16, Length: 8, Key: 9}
	for _, c := range []struct {
		name string
		loc  alloc.Locator
		src  int
		raw  []byte
	}{
		{name: "another process", loc: alloc.Locator{RegionRef: alloc.RegionRef{Process: 0, Region: 3}, Offset: 16, Length: 8}, src: 1},
		{name: "not a word", loc: alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 3}, Offset: 16, Length: 16}, src: 1},
		{name: "unaligned", loc: alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 3}, Offset: 12, Length: 8}, src: 1},
		{name: "unknown rank", loc: good, src: 7},
		{name: "short", raw: []byte{1, 2, 3}, src: 1},
	} {
		b := c.raw
		if b == nil {
			b, _ = c.loc.MarshalBinary()
		}
		f.setCreditAt(b, c.src)
		if f.peers[1].creditAt != (alloc.Locator{}) {
			t.Fatalf("%s: taken as %v", c.name, f.peers[1].creditAt)
		}
	}
	b, _ := good.MarshalBinary()
	f.setCreditAt(b, 1)
	if f.peers[1].creditAt != good {
		t.Fatalf("a good hello gave %v, want %v", f.peers[1].creditAt, good)
	}
}

// TestCloseWhileAwaitingReplies: callers awaiting replies route and sleep
// on the process's receive queue themselves; Close must wait for them to
// leave it before unmapping it. Goroutines keep calling across Close and
// must end with errors, not faults.
func TestCloseWhileAwaitingReplies(t *testing.T) {
	var hEcho HandlerID
	reg := func(h *Handlers) {
		hEcho, _ = h.Register("echo", func(c *Call, a []byte) ([]byte, error) { return a, nil })
	}
	job(t, 2, 1, "shm", reg, func(t *testing.T, f *Fabric) {
		me, _ := f.Names().Thread(f.Rank(), 0)
		other, _ := f.Names().Thread(1-f.Rank(), 0)
		var wg sync.WaitGroup
		var calls atomic.Int64
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if _, err := f.CallReturn(context.Background(), me, other, hEcho, []byte{1}); err != nil {
						return
					}
					calls.Add(1)
				}
			}()
		}
		for calls.Load() < 100 {
			time.Sleep(time.Millisecond)
		}
		if err := f.Close(); err != nil {
			t.Errorf("rank %d: close: %v", f.Rank(), err)
		}
		wg.Wait()
	})
}

// TestCloseFencesSenders: a call being posted when Close starts (past its
// closed check, holding its peer's lock) finishes before Close unmaps the
// send buffers it writes; without the fence the sender, released once
// Close has cancelled, writes into unmapped memory and the process faults.
func TestCloseFencesSenders(t *testing.T) {
	var hEcho HandlerID
	reg := func(h *Handlers) {
		hEcho, _ = h.Register("echo", func(c *Call, a []byte) ([]byte, error) { return nil, nil })
	}
	job(t, 2, 1, "shm", reg, func(t *testing.T, f *Fabric) {
		if f.Rank() != 0 {
			return
		}
		me, _ := f.Names().Thread(0, 0)
		other, _ := f.Names().Thread(1, 0)
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		hook := func() {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		f.sendHook.Store(&hook)
		sent := make(chan error, 1)
		go func() { sent <- f.Call(me, other, hEcho, make([]byte, 64), nil) }()
		<-entered
		closed := make(chan error, 1)
		go func() { closed <- f.Close() }()
		select {
		case <-f.Done(): // teardown has begun
		case <-time.After(40 * time.Second):
			t.Fatal("Close did not begin its teardown")
		}
		time.Sleep(200 * time.Millisecond) // time to unmap, were nothing waiting
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while a call was being posted", err)
		default:
		}
		close(release)
		if err := <-sent; err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrRankDead) {
			t.Errorf("the call being posted: %v", err)
		}
		if err := <-closed; err != nil {
			t.Errorf("close: %v", err)
		}
	})
}

// TestSection3_2_RoutingRoundBounded: credits go back while a round of
// routing runs, so a sender that refills its window as fast as the router
// routes must not keep one round going: the inboxes would take every call
// (thousands, whatever the receive buffers) while the routing thread ran
// none of its own. Here the sender refills synchronously at each credit
// return, inside the round; the round must stop after about one receive
// buffer per rank, and every call must still run once, in order.
func TestSection3_2_RoutingRoundBounded(t *testing.T) {
	const recvBuffers, total = 16, 4000
	var ran, bad atomic.Int64
	var hSeq HandlerID
	reg := func(h *Handlers) {
		hSeq, _ = h.Register("seq", func(c *Call, a []byte) ([]byte, error) {
			if int64(binary.LittleEndian.Uint32(a)) != ran.Load() {
				bad.Add(1)
			}
			ran.Add(1)
			return nil, nil
		})
	}
	jobWith(t, Config{Procs: 1, ThreadsPerProcess: 2, RecvBuffers: recvBuffers}, reg, func(t *testing.T, f *Fabric) {
		sent := 0
		send := func() {
			a := binary.LittleEndian.AppendUint32(nil, uint32(sent))
			if err := f.Call(1, 0, hSeq, a, nil); err != nil {
				t.Errorf("call %d: %v", sent, err)
			}
			sent++
		}
		self := f.peers[f.rank]
		room := func() bool { // the window has room for one more message
			self.mu.Lock()
			defer self.mu.Unlock()
			return self.sent-self.credit() < f.credits()
		}
		f.rx.Lock() // no one else routes while the window fills
		for room() {
			send()
		}
		waiting := sent
		f.afterCredit = func() {
			// The credits just returned: use them at once, as a sender
			// that keeps up with the router would.
			for sent < total && room() {
				send()
			}
		}
		n := f.routeLocked()
		f.afterCredit = nil
		f.rx.Unlock()
		if limit := f.recvCount() + len(f.rxCS); n > limit {
			t.Errorf("one routing round took %d calls (%d sent); want at most %d", n, sent, limit)
		}
		if n < waiting {
			t.Errorf("the round routed %d of the %d calls waiting", n, waiting)
		}
		deadline := time.Now().Add(30 * time.Second)
		for ran.Load() < int64(sent) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := ran.Load(); got != int64(sent) || bad.Load() != 0 {
			t.Errorf("%d of %d calls ran, %d out of order", got, sent, bad.Load())
		}
	})
}

// TestPollInHandler: a handler that polls its own worker (waiting for
// something, say) routes what arrives but runs none of it, and the calls
// queued behind it run after it returns, in order. Running them inside
// would reorder them, and reuse the queue the outer Poll is running.
func TestPollInHandler(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			const n = 200
			var next, bad, nestedRan atomic.Int64
			var routed, started atomic.Bool
			var hSeq, hStarted HandlerID
			reg := func(h *Handlers) {
				hStarted, _ = h.Register("started", func(*Call, []byte) ([]byte, error) {
					started.Store(true)
					return nil, nil
				})
				hSeq, _ = h.Register("seq", func(c *Call, a []byte) ([]byte, error) {
					i := int64(binary.LittleEndian.Uint32(a))
					if next.Load() != i {
						bad.Add(1)
					}
					next.Store(i + 1)
					if i == 0 {
						// Only now may the caller send the others: sent
						// at once, they could all arrive before the
						// worker's first Poll and be taken with call 0.
						if err := c.Fabric.Call(c.Dst, c.Src, hStarted, nil, nil); err != nil {
							bad.Add(1)
						}
						w := c.Fabric.Worker(c.Fabric.Names().ThreadRank(c.Dst))
						for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && !w.in.pending(); {
							nestedRan.Add(int64(w.Poll()))
							time.Sleep(100 * time.Microsecond)
						}
						routed.Store(w.in.pending())
					}
					return nil, nil
				})
			}
			job(t, 2, 1, tr, reg, func(t *testing.T, f *Fabric) {
				if f.Rank() == 1 {
					me, _ := f.Names().Thread(1, 0)
					dst, _ := f.Names().Thread(0, 0)
					a := make([]byte, 4)
					for i := 0; i < n; i++ {
						binary.LittleEndian.PutUint32(a, uint32(i))
						if err := f.Call(me, dst, hSeq, a, nil); err != nil {
							t.Fatal(err)
						}
						if i > 0 {
							continue
						}
						for end := time.Now().Add(10 * time.Second); !started.Load(); time.Sleep(100 * time.Microsecond) {
							if time.Now().After(end) {
								t.Fatal("call 0's handler never said it started")
							}
						}
					}
				} else {
					for end := time.Now().Add(30 * time.Second); next.Load() != n && time.Now().Before(end); {
						time.Sleep(time.Millisecond)
					}
					if got, b, r := next.Load(), bad.Load(), nestedRan.Load(); got != n || b != 0 || r != 0 {
						t.Errorf("%d of %d calls ran, %d out of order, %d ran inside the handler's Poll; want all, in order, none inside", got, n, b, r)
					}
					if !routed.Load() {
						t.Error("the handler's Poll routed none of the calls sent behind it")
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := f.Barrier(ctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
