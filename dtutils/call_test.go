package dtutils

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// extraPair connects one more pair of queue pairs between a's and b's providers.
func extraPair(t *testing.T, a, b side) (QueuePair, QueuePair) {
	t.Helper()
	qa, qb, err := ConnectPair(a.prov, b.prov)
	if err != nil {
		t.Fatal(err)
	}
	return qa, qb
}

// TestCall checks OpCall (the transport under package rdmo) over every
// transport: no operator, a reply shorter than its buffer, oversize
// requests, many calls in flight in order, and the bounded queue of
// incoming calls refusing one call too many.
func TestCall(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { runCallSuite(t, tr.make) })
	}
}

func runCallSuite(t *testing.T, mk func(testing.TB, *Process, *Process) (Provider, Provider)) {
	t.Run("NoOperator", func(t *testing.T) {
		a, _ := connectPair(t, mk, nil)
		c := post(t, a.qp, WorkRequest{Op: OpCall, Local: a.mem(t, 0, 8), Result: a.mem(t, 64, 8)})
		if c.Status != StatusNoOperator || !errors.Is(c.Err(), ErrNoOperator) {
			t.Fatalf("call without operator: %+v", c)
		}
	})
	t.Run("ReplyAndOrder", func(t *testing.T) {
		a, b := connectPair(t, mk, nil)
		// The operator answers the request reversed, then the caller's rank.
		b.proc.SetOperator(func(src uint32, req, reply []byte) int {
			n := 0
			for i := len(req) - 1; i >= 0 && n < len(reply); i-- {
				reply[n] = req[i]
				n++
			}
			if n < len(reply) {
				reply[n] = byte(src + 100)
				n++
			}
			return n
		})
		for i, n := range []int{0, 1, 7, 100, 4000} {
			req := a.mem(t, 0, n)
			fill(req.Bytes(), i)
			res := a.mem(t, 8192, 4096)
			c := post(t, a.qp, WorkRequest{Op: OpCall, WRID: uint64(i), Local: req, Result: res})
			if c.Status != StatusSuccess || c.Op != OpCall || c.WRID != uint64(i) || c.Bytes != n+1 {
				t.Fatalf("call of %d bytes: %+v", n, c)
			}
			got := res.Bytes()[:c.Bytes]
			for j := 0; j < n; j++ {
				if got[j] != req.Bytes()[n-1-j] {
					t.Fatalf("call of %d bytes: reply byte %d = %d", n, j, got[j])
				}
			}
			if got[n] != 100 {
				t.Fatalf("operator saw source rank %d, want 0", got[n]-100)
			}
		}
		// A reply buffer smaller than what the operator would write: clamped.
		res := a.mem(t, 8192, 3)
		c := post(t, a.qp, WorkRequest{Op: OpCall, Local: a.mem(t, 0, 10), Result: res})
		if c.Status != StatusSuccess || c.Bytes != 3 {
			t.Fatalf("short reply buffer: %+v", c)
		}
		// Calls among writes complete in posting order.
		for i := 0; i < 50; i++ {
			wr := WorkRequest{Op: OpWrite, WRID: uint64(2 * i), Signaled: true, Local: a.mem(t, 0, 8), Remote: b.loc(t, 0, 8)}
			if i%2 == 1 {
				wr = WorkRequest{Op: OpCall, WRID: uint64(2 * i), Signaled: true, Local: a.mem(t, 0, 4), Result: a.mem(t, 4096+64*i, 8)}
			}
			if err := a.qp.Post(wr); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 50; i++ {
			if c := wait(t, a.qp.CQ()); c.WRID != uint64(2*i) || c.Status != StatusSuccess {
				t.Fatalf("completion %d out of order: %+v", i, c)
			}
		}
	})
	t.Run("Oversize", func(t *testing.T) {
		a, b := connectPair(t, mk, func(c *ProcessConfig) { c.CallBytes = 256 })
		b.proc.SetOperator(func(uint32, []byte, []byte) int { return 0 })
		err := a.qp.Post(WorkRequest{Op: OpCall, Local: a.mem(t, 0, 257), Result: a.mem(t, 4096, 8)})
		if !errors.Is(err, ErrBadRequest) {
			t.Fatalf("257-byte request with CallBytes 256: %v", err)
		}
		err = a.qp.Post(WorkRequest{Op: OpCall, Local: a.mem(t, 0, 8), Result: a.mem(t, 4096, 257)})
		if !errors.Is(err, ErrBadRequest) {
			t.Fatalf("257-byte reply with CallBytes 256: %v", err)
		}
	})
	t.Run("TargetChecksItsOwnBound", func(t *testing.T) {
		// The initiator allows 4096 bytes, the target only 256: the target
		// refuses with StatusLength rather than trusting the caller.
		a, b := connectPair(t, mk, func(c *ProcessConfig) {
			if c.Rank == 1 {
				c.CallBytes = 256
			}
		})
		b.proc.SetOperator(func(uint32, []byte, []byte) int { return 0 })
		c := post(t, a.qp, WorkRequest{Op: OpCall, Local: a.mem(t, 0, 1000), Result: a.mem(t, 4096, 8)})
		if c.Status != StatusLength {
			t.Fatalf("1000-byte request to a 256-byte target: %+v", c)
		}
	})
	t.Run("Busy", func(t *testing.T) {
		a, b := connectPair(t, mk, func(c *ProcessConfig) { c.CallSlots = 2 })
		if b.prov.Transport() == "ofi" {
			// One endpoint, one engine per provider: calls run one at a
			// time, and this test's blocked operator would block them all.
			t.Skip("ofi runs its endpoint's calls one at a time: never more than one running")
		}
		release := make(chan struct{})
		entered := make(chan struct{}, 8)
		b.proc.SetOperator(func(_ uint32, req, reply []byte) int {
			if len(req) > 0 && req[0] == 1 {
				entered <- struct{}{}
				<-release
			}
			return copy(reply, req)
		})
		var qps [3]QueuePair
		qps[0] = a.qp
		qps[1], _ = extraPair(t, a, b)
		qps[2], _ = extraPair(t, a, b)
		call := func(qp QueuePair, off int, hold bool) Completion {
			req := a.mem(t, off, 8)
			req.Bytes()[0] = 0
			if hold {
				req.Bytes()[0] = 1
			}
			if err := qp.Post(WorkRequest{Op: OpCall, Signaled: true, Local: req, Result: a.mem(t, off+64, 8)}); err != nil {
				t.Error(err)
			}
			return wait(t, qp.CQ())
		}
		var wg sync.WaitGroup
		held := make([]Completion, 2)
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); held[i] = call(qps[i], 4096*(i+1), true) }()
			if i == 0 {
				<-entered
			}
		}
		// Both held calls occupy the target: running (tcp, loop) or queued
		// behind the first (shm).
		deadline := time.Now().Add(10 * time.Second)
		for b.proc.running.Load() < 2 && b.proc.calls.posted.empty() {
			if time.Now().After(deadline) {
				t.Fatal("second call never reached the target")
			}
			time.Sleep(time.Millisecond)
		}
		if c := call(qps[2], 3*4096+2048, false); c.Status != StatusBusy || !errors.Is(c.Err(), ErrBusy) {
			t.Fatalf("third call with CallSlots 2: %+v", c)
		}
		close(release)
		wg.Wait()
		for i, c := range held {
			if c.Status != StatusSuccess || c.Bytes != 8 {
				t.Fatalf("held call %d: %+v", i, c)
			}
		}
		// Room again.
		if c := call(qps[2], 3*4096+2048, false); c.Status != StatusSuccess {
			t.Fatalf("call after the queue drained: %+v", c)
		}
	})
}

// TestCallConcurrent hammers one target's operator from many goroutines
// over several queue pairs: every reply matches its own request.
func TestCallConcurrent(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			a, b := connectPair(t, tr.make, nil)
			b.proc.SetOperator(func(_ uint32, req, reply []byte) int { return copy(reply, req) })
			const workers, calls = 4, 300
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				qp, _ := extraPair(t, a, b)
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, res := a.mem(t, w*8192, 64), a.mem(t, w*8192+4096, 64)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					var c [1]Completion
					for i := 0; i < calls; i++ {
						fill(req.Bytes(), w*calls+i)
						if err := qp.Post(WorkRequest{Op: OpCall, Signaled: true, Local: req, Result: res}); err != nil {
							t.Error(err)
							return
						}
						if _, err := qp.CQ().Wait(ctx, c[:]); err != nil || c[0].Status != StatusSuccess || !bytes.Equal(res.Bytes(), req.Bytes()) {
							t.Errorf("worker %d call %d: %+v %v", w, i, c[0], err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// FuzzCallArea attaches to arbitrary bytes as a peer's call area: refused
// or attached, never a panic, and what attaches stays within the bytes.
func FuzzCallArea(f *testing.F) {
	good := make([]byte, callAreaBytes(2, 64))
	if _, err := initCallArea(good, 2, 64); err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := make([]byte, len(b)+8) // 8-aligned copy: the atomics need it
		mem = mem[:len(b)]
		copy(mem, b)
		c, err := openCallArea(mem)
		if err != nil {
			return
		}
		if end := c.slotsAt + c.slots*c.size; end > len(mem) {
			t.Fatalf("call area of %d slots ends at %d past %d bytes", c.slots, end, len(mem))
		}
	})
}

// TestCallReclaimsDeadCallers: calls posted over shm by a process that
// exited before collecting the answers hold call slots; the target's
// engine takes them back when idle, so dead callers cannot leave the queue
// of incoming calls full (every later call refused with StatusBusy).
func TestCallReclaimsDeadCallers(t *testing.T) {
	a, b := connectPair(t, transportByName(t, "shm").make, func(c *ProcessConfig) { c.CallSlots = 4 })
	if err := b.proc.SetOperator(func(src uint32, req, reply []byte) int { return copy(reply, req) }); err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	area := a.qp.(*shmQP).shm.Load().calls
	// Four callers of the dead process post a call each and never return.
	var e [callEntry]byte
	for i := 0; i < 4; i++ {
		if !area.free.dequeue(e[:]) {
			t.Fatalf("call slot %d: free ring empty", i)
		}
		s := area.slot(binary.LittleEndian.Uint32(e[:]))
		binary.LittleEndian.PutUint32(s.hdr[8:], 0)
		binary.LittleEndian.PutUint32(s.hdr[12:], 8)
		binary.LittleEndian.PutUint32(s.hdr[16:], 8)
		s.pid().Store(uint32(dead.Process.Pid))
		s.state().Store(slotPosted)
		area.posted.enqueue(e[:])
	}
	req, reply := a.mem(t, 0, 8), a.mem(t, 64, 8)
	c := post(t, a.qp, WorkRequest{Op: OpCall, Signaled: true, Local: req, Result: reply})
	if c.Status != StatusBusy {
		t.Fatalf("a call with every slot held by dead callers: %v, want StatusBusy", c.Status)
	}
	end := time.Now().Add(10 * time.Second)
	for {
		c = post(t, a.qp, WorkRequest{Op: OpCall, Signaled: true, Local: req, Result: reply})
		if c.Status == StatusSuccess {
			break
		}
		if c.Status != StatusBusy || time.Now().After(end) {
			t.Fatalf("a call after the callers died: %v (the engine never took their slots back)", c.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// All four came back.
	for i := 0; i < 4; i++ {
		if !area.free.dequeue(e[:]) {
			t.Fatalf("only %d of 4 slots back in the free ring", i)
		}
		defer area.free.enqueue(append([]byte(nil), e[:]...))
	}
}

// TestRingEnqueueWaitsForVacatingCell: a cell that a dequeue one lap
// behind has claimed but not yet released (its consumer descheduled in
// between) does not make the ring full: enqueue waits for it, where it
// used to report full and its caller dropped the entry (a call slot lost
// for good each time; TestCallConcurrent/shm saw StatusBusy). A truly full
// ring still refuses at once.
func TestRingEnqueueWaitsForVacatingCell(t *testing.T) {
	mem := make([]byte, ringBytes(2, 8))
	r, err := initRing(mem, 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := byte(1); i <= 2; i++ {
		if !r.enqueue([]byte{i, 0, 0, 0, 0, 0, 0, 0}) {
			t.Fatalf("enqueue %d into an empty ring", i)
		}
	}
	start := time.Now()
	if r.enqueue([]byte{9, 0, 0, 0, 0, 0, 0, 0}) || time.Since(start) > claimedCellWait/2 {
		t.Fatalf("a full ring: took an entry, or waited %v", time.Since(start))
	}
	// A consumer claims cell 0 and stalls before releasing it.
	if !r.deqPos().CompareAndSwap(0, 1) {
		t.Fatal("claiming cell 0")
	}
	go func() {
		time.Sleep(2 * time.Millisecond)
		r.seq(0).Store(0 + r.capacity)
	}()
	if !r.enqueue([]byte{3, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatal("enqueue behind a consumer vacating its cell reported the ring full")
	}
	var e [8]byte
	for _, want := range []byte{2, 3} {
		if !r.dequeue(e[:]) || e[0] != want {
			t.Fatalf("dequeued %v, want %d", e, want)
		}
	}
}

// TestRingDequeueSoon: a ring whose next cell an enqueue has claimed but
// not yet filled (its producer descheduled in between) is not empty:
// dequeueSoon waits for the entry, where dequeue reports nothing. Callers
// of the shm call area saw StatusBusy with most slots free before
// (mctsbench rdmo, 4 initiators).
func TestRingDequeueSoon(t *testing.T) {
	mem := make([]byte, ringBytes(4, 8))
	r, err := initRing(mem, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	var e [8]byte
	if r.dequeueSoon(e[:], time.Second) {
		t.Fatal("an empty ring gave an entry")
	}
	// A producer claims cell 0 and stalls.
	if !r.enqPos().CompareAndSwap(0, 1) {
		t.Fatal("claiming cell 0")
	}
	r.enqueue([]byte{2, 0, 0, 0, 0, 0, 0, 0}) // a second producer fills cell 1
	if r.dequeue(e[:]) {
		t.Fatal("dequeue took an entry behind an unfilled cell")
	}
	go func() {
		time.Sleep(2 * time.Millisecond)
		off := r.cellAt(0) + 8
		copy(r.mem[off:off+8], []byte{1, 0, 0, 0, 0, 0, 0, 0})
		r.seq(0).Store(1)
	}()
	if !r.dequeueSoon(e[:], 5*time.Second) || e[0] != 1 {
		t.Fatalf("dequeueSoon: %v, want the stalled producer's entry 1", e)
	}
	if !r.dequeueSoon(e[:], time.Second) || e[0] != 2 {
		t.Fatalf("then %v, want entry 2", e)
	}
}

// TestRingClaimSomeHammer: producers fill a small ring while consumers
// drain it, some one entry at a time (dequeue) and some in runs
// (claimSome, as the receive completion queue polls). Every entry must be
// taken exactly once; with one consumer taking runs, each producer's
// entries must come out in the order they went in.
func TestRingClaimSomeHammer(t *testing.T) {
	const producers, perProducer = 4, 20000
	for _, c := range []struct {
		name         string
		single, runs int // consumers taking one entry, taking runs
	}{{"mixed", 1, 2}, {"one-consumer-fifo", 0, 1}} {
		t.Run(c.name, func(t *testing.T) {
			mem := make([]byte, ringBytes(8, 8))
			r, err := initRing(mem, 8, 8)
			if err != nil {
				t.Fatal(err)
			}
			var seen [producers * perProducer]atomic.Int32
			var taken atomic.Int64
			var outOfOrder atomic.Int64
			// A broken claim corrupts the ring and leaves both sides
			// waiting: the deadline turns that into a failure.
			deadline := time.Now().Add(30 * time.Second)
			late := func() bool { return time.Now().After(deadline) }
			var wg sync.WaitGroup
			for p := 0; p < producers; p++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var e [8]byte
					for i := 0; i < perProducer; i++ {
						binary.LittleEndian.PutUint64(e[:], uint64(p*perProducer+i))
						for !r.enqueue(e[:]) {
							if late() {
								return
							}
							runtime.Gosched() // full
						}
					}
				}()
			}
			take := func(v uint64, last []int64) {
				if v >= producers*perProducer {
					outOfOrder.Add(1 << 32) // garbage
					return
				}
				seen[v].Add(1)
				if last != nil {
					p, i := int(v)/perProducer, int64(v)%perProducer
					if i <= last[p] {
						outOfOrder.Add(1)
					}
					last[p] = i
				}
				taken.Add(1)
			}
			var cg sync.WaitGroup
			for k := 0; k < c.single+c.runs; k++ {
				cg.Add(1)
				go func() {
					defer cg.Done()
					var last []int64
					if c.single == 0 {
						last = make([]int64, producers)
						for i := range last {
							last[i] = -1
						}
					}
					var e [8]byte
					for taken.Load() < producers*perProducer && !late() {
						if k < c.single {
							if r.dequeue(e[:]) {
								take(binary.LittleEndian.Uint64(e[:]), last)
							} else {
								runtime.Gosched()
							}
							continue
						}
						pos, n := r.claimSome(1 + k%5)
						for j := range uint64(n) {
							v := binary.LittleEndian.Uint64(r.cellData(pos + j))
							r.releaseCell(pos + j)
							take(v, last)
						}
						if n == 0 {
							runtime.Gosched()
						}
					}
				}()
			}
			wg.Wait()
			cg.Wait()
			if late() {
				t.Fatalf("%d of %d entries taken in 30 s", taken.Load(), producers*perProducer)
			}
			for v := range seen {
				if n := seen[v].Load(); n != 1 {
					t.Fatalf("entry %d taken %d times", v, n)
				}
			}
			if n := outOfOrder.Load(); n != 0 {
				t.Fatalf("%d entries out of their producer's order (or garbage)", n)
			}
		})
	}
}

// TestRingCorruptCellNoSpin: a cell whose sequence a peer sharing the ring
// set a lap ahead (no producer or consumer of ours did: the positions have
// not moved) makes the ring look full and empty there, rather than
// keeping enqueue, dequeue and claimSome looking again for ever.
func TestRingCorruptCellNoSpin(t *testing.T) {
	mem := make([]byte, ringBytes(4, 8))
	r, err := initRing(mem, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	r.seq(0).Store(2 * r.capacity) // neither "free" (0) nor "full" (1)
	done := make(chan string, 1)
	go func() {
		var e [8]byte
		switch {
		case r.dequeue(e[:]):
			done <- "dequeue took an entry"
		case func() bool { _, n := r.claimSome(4); return n != 0 }():
			done <- "claimSome took an entry"
		case r.enqueue(e[:]):
			done <- "enqueue took an entry"
		default:
			done <- ""
		}
	}()
	select {
	case msg := <-done:
		if msg != "" {
			t.Fatal(msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the ring spun on a corrupt cell")
	}
}

// TestDoorbellNoLostWakeup: a consumer that finds the ring empty sleeps
// on its doorbell (ring.sleep, as AwaitRecv does), and a producer that
// enqueues while it goes to sleep must wake it. One producer and one
// consumer on their own OS threads hand entries over one at a time, so
// that every hand-off races the consumer's way to sleep; a sleep that
// lasted its whole timeout while an entry waited and nobody rang the bell
// is a lost wake-up. Before
// ring.wake fenced its load of the sleeper count behind the entry's store,
// a few in every 300 000 hand-offs were lost (each one a 50 ms stall of a
// worker in a real job). Under -race the store is a locked exchange and
// the race cannot occur; the test still checks the hand-offs.
func TestDoorbellNoLostWakeup(t *testing.T) {
	mem := make([]byte, ringBytes(64, 8))
	r, err := initRing(mem, 64, 8)
	if err != nil {
		t.Fatal(err)
	}
	n := 300000
	if raceEnabled || testing.Short() {
		n = 20000
	}
	// Long enough that a consumer thread woken in time is never this late.
	const timeout = 200 * time.Millisecond
	var taken, late atomic.Int64
	lost := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		k := 0
		var e [8]byte
		for c := 0; c < n; {
			if r.dequeue(e[:]) {
				c++
				taken.Store(int64(c))
				continue
			}
			t0, rung := time.Now(), r.bell().Load()
			r.sleep(timeout, func() bool { return !r.empty() })
			if time.Since(t0) >= timeout && !r.empty() {
				// Lost only if nobody rang: a bell rung during the sleep
				// is a wake-up the OS delivered late (a loaded machine can
				// leave a woken thread waiting for a core this long; CI
				// once counted two while benchmarks ran beside it).
				if r.bell().Load() == rung {
					k++
				} else {
					late.Add(1)
				}
			}
		}
		lost <- k
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var e [8]byte
	for i := 0; i < n; i++ {
		for !r.enqueue(e[:]) {
			runtime.Gosched()
		}
		// Wait for the hand-off, then a little more or less each time, so
		// that the next enqueue meets the consumer at every point of its
		// way into sleep.
		for taken.Load() != int64(i+1) {
		}
		for k := 0; k < i%41*8; k++ {
			_ = k
		}
	}
	if k := <-lost; k > 0 {
		t.Fatalf("%d of %d hand-offs left the consumer asleep for its whole %v timeout with an entry waiting and the bell not rung (lost wake-ups)", k, n, timeout)
	}
	if n := late.Load(); n > 0 {
		t.Logf("%d wake-ups rung in time reached the consumer only after its %v timeout (scheduling, not the protocol)", n, timeout)
	}
}
