package dtutils

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

// TransmitterConfig configures a Transmitter.
type TransmitterConfig struct {
	// SignalEvery is k: in steady state one operation in k is signaled.
	// Default MaxUnsignaled/4 of the queue pair's process, at least 1; it
	// must leave room for stragglers: SignalEvery + 2 × concurrent
	// goroutines ≤ MaxUnsignaled.
	SignalEvery int
	// MaxGoroutines is the number of goroutines that can wait for a
	// signaled operation at once (it sizes the table where completions are
	// handed over); more wait their turn for a free entry. Default 1024,
	// at most 65535.
	MaxGoroutines int
	// SignalBytes bounds, roughly, the local bytes one flush group's
	// operations read: an operation of n bytes counts as 1 + n/u of the k
	// operations of its group (at most k), where u = SignalBytes/k. Memory
	// an operation read is reusable only after the flush number passes it
	// (see the protocol below), so without this bound a wide window of
	// large writes (k of them, each a 4 KiB batch) keeps megabytes in
	// flight and out of the cache, while a wide window is what small
	// writes over a network need. Default 1 MiB (k if larger); it must be
	// at least k.
	SignalBytes int
}

// DefaultTransmitterConfig returns the defaults for a queue pair whose
// process allows maxUnsignaled unsignaled operations.
func DefaultTransmitterConfig(maxUnsignaled int) TransmitterConfig {
	return TransmitterConfig{}.withDefaults(maxUnsignaled)
}

func (c TransmitterConfig) withDefaults(maxUnsignaled int) TransmitterConfig {
	if c.SignalEvery == 0 {
		c.SignalEvery = max(1, maxUnsignaled/4)
	}
	if c.MaxGoroutines == 0 {
		c.MaxGoroutines = 1024
	}
	if c.SignalBytes == 0 {
		c.SignalBytes = max(1<<20, c.SignalEvery)
	}
	return c
}

// VerifyConfig checks c (after defaults) for a queue pair whose process
// allows maxUnsignaled unsignaled operations.
func (c TransmitterConfig) VerifyConfig(maxUnsignaled int) error {
	return c.withDefaults(maxUnsignaled).verify(maxUnsignaled)
}

func (c TransmitterConfig) verify(maxUnsignaled int) error {
	if c.SignalEvery < 1 || c.SignalEvery > maxUnsignaled {
		return fmt.Errorf("%w: SignalEvery %d must be in [1, MaxUnsignaled %d]", ErrBadConfig, c.SignalEvery, maxUnsignaled)
	}
	if c.MaxGoroutines < 1 || c.MaxGoroutines >= noSlot {
		return fmt.Errorf("%w: MaxGoroutines %d must be in [1, 65535]", ErrBadConfig, c.MaxGoroutines)
	}
	if c.SignalBytes < c.SignalEvery {
		return fmt.Errorf("%w: SignalBytes %d must be at least SignalEvery %d", ErrBadConfig, c.SignalBytes, c.SignalEvery)
	}
	return nil
}

// Transmitter is the paper's IBTransmitter (§4.1): it posts operations on a
// queue pair from any number of goroutines, making only some of them
// signaled, never overflowing the queue pair's MaxUnsignaled, and tagging
// the memory each operation read so that alloc's circular allocators recycle
// it once complete.
//
// Protocol (wait-free: no goroutine ever waits for another). Each operation
// takes a ticket t (and, when it reads many bytes, the next few tickets
// too: its weight, between 1 and k, see SignalBytes); its flush group is
// t/k, so a group still holds at most k operations. F is the flush
// number. If the group is ahead of F, the operation is posted signaled,
// its goroutine polls the completion queue until it sees its own
// completion (completions of others that it polls are handed over through
// a slot table), and then advances F by one with a single CAS from the
// value it read before posting;
// if the CAS fails another goroutine advanced F, which is as good. Otherwise
// the operation is unsignaled. Operations whose caller needs the result
// (Read, atomics) are signaled too but advance F only by the same rule, so F
// never passes the newest ticket's group; Flush takes a ticket one group
// ahead to advance it.
//
// Recycling: memory is tagged with F read just after its operation was
// posted. Once F has advanced twice past that value, the second advance came
// from a goroutine that read F after the first advance, hence posted its
// signaled operation after ours, and its completion implies ours (queue
// pairs complete in order). So Completed() is F−1, and memory tagged f is
// reusable when Completed() > f.
type Transmitter struct {
	qp      QueuePair
	k       uint64
	unit    uint64 // bytes per ticket past an operation's first (SignalBytes / k)
	tickets atomic.Uint64
	flushed atomic.Uint64
	// A goroutine awaiting a signaled operation owns one entry of slots
	// (busy) and puts its index in the low 16 bits of the WRID; whoever
	// polls the completion stores (ticket+1)<<8 | status there.
	slots  []atomic.Uint64
	busy   []atomic.Uint32
	failed atomic.Pointer[error]
	idle   func()  // the queue pair's engine takes over when a waiter sleeps
	sync   *syncQP // a synchronous queue pair's core (shm, loop), see Write
}

var _ alloc.Tracker = (*Transmitter)(nil)

// NewTransmitter wraps a connected queue pair. The Transmitter must be the
// only poster and poller of qp's completion queue.
func NewTransmitter(qp QueuePair, maxUnsignaled int, cfg TransmitterConfig) (*Transmitter, error) {
	cfg = cfg.withDefaults(maxUnsignaled)
	if err := cfg.verify(maxUnsignaled); err != nil {
		return nil, err
	}
	t := &Transmitter{qp: qp, k: uint64(cfg.SignalEvery), unit: uint64(cfg.SignalBytes / cfg.SignalEvery), slots: make([]atomic.Uint64, cfg.MaxGoroutines), busy: make([]atomic.Uint32, cfg.MaxGoroutines)}
	if i, ok := qp.(interface{ idle() }); ok {
		t.idle = i.idle
	}
	switch q := qp.(type) {
	case *shmQP:
		t.sync = q.syncQP
	case *loopQP:
		t.sync = q.syncQP
	}
	return t, nil
}

// WRIDs: ticket<<16 | slot, with noSlot for unsignaled operations.
const (
	slotBits = 16
	noSlot   = 1<<slotBits - 1
)

// claim takes a free slot, probing from a ticket-derived start.
func (t *Transmitter) claim(ticket uint64) int {
	n := len(t.busy)
	start := int(ticket % uint64(n))
	var b Backoff
	for probe := 0; ; probe++ {
		i := (start + probe) % n
		if t.busy[i].CompareAndSwap(0, 1) {
			t.slots[i].Store(0)
			return i
		}
		if probe%n == n-1 {
			b.Wait() // every slot taken: more waiters than MaxGoroutines
		}
	}
}

// QueuePair returns the wrapped queue pair.
func (t *Transmitter) QueuePair() QueuePair { return t.qp }

// Completed implements alloc.Tracker: every operation whose memory was
// tagged with a value below it has completed.
func (t *Transmitter) Completed() uint64 {
	if f := t.flushed.Load(); f > 0 {
		return f - 1
	}
	return 0
}

// FlushNumber returns F, the number of flushes completed so far.
func (t *Transmitter) FlushNumber() uint64 { return t.flushed.Load() }

// Err returns the first failure seen on the queue pair, or nil. After a
// failure every post returns it, as a verbs queue pair in error state does.
func (t *Transmitter) Err() error {
	if e := t.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// Write writes local into remote, asynchronously; local is tagged and must
// not change until alloc says its unit is reusable.
func (t *Transmitter) Write(local alloc.Memory, remote alloc.Locator) error {
	// Over shm and loop the write is a copy that has completed when it returns:
	// local is reusable at once (Done, not Tag), and the protocol below,
	// whose purpose is to learn when operations complete, has nothing to do.
	if t.sync != nil && t.failed.Load() == nil && t.sync.writeNow(local.Bytes(), remote) {
		local.Done()
		return nil
	}
	return t.post(context.Background(), WorkRequest{Op: OpWrite, Local: local, Remote: remote}, false)
}

// weight is how many tickets an operation reading n local bytes takes: 1
// + n/unit, at most k. At most k means consecutive tickets differ by at
// most k, so no group is skipped and one operation per group is still
// signaled in steady state; each operation still takes at least one
// ticket, so a group still holds at most k operations, which is what
// bounds the unsignaled ones.
func (t *Transmitter) weight(n int) uint64 {
	return min(t.k, 1+uint64(n)/t.unit)
}

// advances reports whether ticket's group is past F: ticket/k > f, with a
// multiplication where the division would cost tens of cycles.
func (t *Transmitter) advances(ticket, f uint64) bool { return ticket >= (f+1)*t.k }

// WriteImm is Write that also completes a receive at the target with imm.
func (t *Transmitter) WriteImm(local alloc.Memory, remote alloc.Locator, imm uint32) error {
	return t.post(context.Background(), WorkRequest{Op: OpWriteImm, Local: local, Remote: remote, Imm: imm}, false)
}

// Send delivers local into a receive posted at the peer, asynchronously.
// Over shm and loop the send has completed when it returns, local is
// reusable at once, and a send that found no receive posted (or one too
// small) returns its error without failing the queue pair.
func (t *Transmitter) Send(local alloc.Memory, imm uint32) error {
	if t.sync != nil && t.failed.Load() == nil {
		b := local.Bytes()
		if st, ok := t.sync.sendNow(b, imm); ok {
			local.Done()
			if st != StatusSuccess {
				return fmt.Errorf("%w: %d-byte send", st.Err(), len(b))
			}
			return nil
		}
	}
	return t.post(context.Background(), WorkRequest{Op: OpSend, Local: local, Imm: imm}, false)
}

// Read copies remote into local and returns when the bytes are there.
func (t *Transmitter) Read(ctx context.Context, local alloc.Memory, remote alloc.Locator) error {
	return t.post(ctx, WorkRequest{Op: OpRead, Local: local, Remote: remote}, true)
}

// FetchAdd adds add to the remote word and returns its old value; scratch
// is 8 bytes of registered memory that receives it.
func (t *Transmitter) FetchAdd(ctx context.Context, scratch alloc.Memory, remote alloc.Locator, add uint64) (uint64, error) {
	err := t.post(ctx, WorkRequest{Op: OpFetchAdd, Local: scratch, Remote: remote, Add: add}, true)
	return word(scratch), err
}

// CompareSwap stores swap at remote if it holds compare, and returns the
// old value; scratch is as for FetchAdd.
func (t *Transmitter) CompareSwap(ctx context.Context, scratch alloc.Memory, remote alloc.Locator, compare, swap uint64) (uint64, error) {
	err := t.post(ctx, WorkRequest{Op: OpCompareSwap, Local: scratch, Remote: remote, Compare: compare, Swap: swap}, true)
	return word(scratch), err
}

func word(m alloc.Memory) uint64 {
	if m.Len() != 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(m.Bytes())
}

// Flush returns once every operation posted before it has completed, and
// memory tagged before it is reusable.
func (t *Transmitter) Flush(ctx context.Context) error {
	target := t.flushed.Load() + 2
	for t.flushed.Load() < target {
		if err := t.post(ctx, WorkRequest{Op: OpNop}, true); err != nil {
			return err
		}
	}
	return nil
}

func (t *Transmitter) post(ctx context.Context, wr WorkRequest, wait bool) error {
	if e := t.failed.Load(); e != nil {
		return *e
	}
	var ticket uint64
	if wr.Op == OpNop {
		// A flush skips the rest of the current group so that its ticket
		// lies in a group past F and may advance it.
		ticket = t.tickets.Add(t.k)
	} else {
		w := t.weight(wr.Local.Len())
		ticket = t.tickets.Add(w) - w
	}
	f := t.flushed.Load()
	// Only an operation whose group is past F advances F. This keeps F at
	// or below the newest ticket's group, which is what bounds the
	// unsignaled operations (at most k in F's group, plus stragglers).
	advance := t.advances(ticket, f)
	signaled := wait || advance
	slot := noSlot
	if signaled {
		slot = t.claim(ticket)
		defer t.busy[slot].Store(0)
	}
	wr.WRID = ticket<<slotBits | uint64(slot)
	wr.Signaled = signaled
	if err := t.qp.Post(wr); err != nil {
		return err
	}
	if signaled {
		if ctx == nil { // a caller's nil Context (Read, FetchAdd): no deadline
			ctx = context.Background()
		}
		if err := t.awaitOwn(ctx, ticket, slot); err != nil {
			return err
		}
		if advance {
			t.flushed.CompareAndSwap(f, f+1)
		}
	}
	switch {
	case wr.Op == OpNop:
	case t.sync != nil:
		// A synchronous queue pair has completed the operation: nothing
		// will read local again.
		wr.Local.Done()
	default:
		wr.Local.Tag(t, t.flushed.Load())
	}
	return nil
}

// awaitOwn polls the completion queue until the completion of ticket shows
// up, handing over the others it sees.
func (t *Transmitter) awaitOwn(ctx context.Context, ticket uint64, i int) error {
	slot := &t.slots[i]
	b := Backoff{Idle: t.idle}
	for {
		if v := slot.Load(); v>>8 == ticket+1 {
			if st := Status(v & 0xff); st != StatusSuccess {
				return fmt.Errorf("dtutils: operation %d: %w", ticket, st.Err())
			}
			return nil
		}
		if t.drain() > 0 {
			b.Reset()
			continue
		}
		if e := t.failed.Load(); e != nil {
			return *e
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !b.Sleepy() {
			b.Wait()
			continue
		}
		// Long wait (a network round trip): sleep on the completion
		// queue's doorbell rather than on a timer. The bound lets us see a
		// completion another goroutine polled and handed over.
		wctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		var buf [16]Completion
		n, _ := t.qp.CQ().Wait(wctx, buf[:])
		cancel()
		t.handOver(buf[:n])
	}
}

// drain polls completions and hands them over.
func (t *Transmitter) drain() int {
	// The built-in transports' queues are *memCQ: calling it directly keeps
	// buf on the stack (through the interface it would escape).
	if q, ok := t.qp.CQ().(*memCQ); ok {
		var buf [16]Completion
		n := q.Poll(buf[:])
		t.handOver(buf[:n])
		return n
	}
	buf := make([]Completion, 16)
	n := t.qp.CQ().Poll(buf)
	t.handOver(buf[:n])
	return n
}

// handOver records failures and gives each signaled completion to its waiter.
func (t *Transmitter) handOver(cs []Completion) {
	for _, c := range cs {
		ticket := c.WRID >> slotBits
		if c.Status != StatusSuccess {
			err := fmt.Errorf("dtutils: %v operation %d failed: %w", c.Op, ticket, c.Status.Err())
			t.failed.CompareAndSwap(nil, &err)
		}
		if i := int(c.WRID & noSlot); i != noSlot {
			t.slots[i].Store((ticket+1)<<8 | uint64(c.Status))
		}
	}
}

// Poll processes completions without posting (for a sender that has stopped
// posting but wants failures noticed); it returns how many it saw.
func (t *Transmitter) Poll() int { return t.drain() }
