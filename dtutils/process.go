package dtutils

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
)

// ProcessConfig configures a Process. DefaultProcessConfig fills every field.
type ProcessConfig struct {
	// Rank is this process's rank in the job; it is Locator.Process for its
	// memory and the Src of receives it sends.
	Rank uint32
	// ReceiveSlots is the capacity of the shared receive queue (receives
	// posted and not yet filled). Default 1024; must be a power of two, at
	// least 2. Each slot takes 368 bytes of shared memory (a descriptor
	// cell and a completion cell, which carries small sends inline).
	ReceiveSlots int
	// MaxUnsignaled bounds the unsignaled operations outstanding on each
	// queue pair (the device limit of verbs). Default 16384: none of our
	// transports has a device queue to overflow, and over tcp a
	// Transmitter's window (MaxUnsignaled/4 operations per signaled one,
	// whose poster waits a round trip) is what bounds small writes: with
	// 1024, raw 8-byte writes ran at half the rate (docs/benchmarks.md,
	// "Over tcp: a window of 4096 small writes"). A Transmitter bounds the
	// bytes in flight separately (TransmitterConfig.SignalBytes).
	MaxUnsignaled int
	// MaxTransfer bounds the bytes of one operation. Default 1 GiB.
	MaxTransfer int
	// CallSlots bounds the calls (OpCall) queued or running at this process:
	// the queue of incoming operations, one per transport kind (shm peers
	// queue in shared memory, tcp/ofi/loop calls run on their connection's
	// engine); a call beyond it is refused with StatusBusy. Zero means the
	// default, 64; it must be a power of two in [2, 2^16].
	CallSlots int
	// CallBytes bounds a call's request and its reply, each. Zero means the
	// default, 4096; at most 1 MiB. Initiator and target check their own.
	CallBytes int
}

const maxCallBytes = 1 << 20

// DefaultProcessConfig returns the defaults for a process of the given rank.
func DefaultProcessConfig(rank uint32) ProcessConfig {
	return ProcessConfig{Rank: rank, ReceiveSlots: 1024, MaxUnsignaled: 16384, MaxTransfer: 1 << 30, CallSlots: 64, CallBytes: 4096}
}

func (c ProcessConfig) withDefaults() ProcessConfig {
	if c.CallSlots == 0 {
		c.CallSlots = 64
	}
	if c.CallBytes == 0 {
		c.CallBytes = 4096
	}
	return c
}

// VerifyConfig checks c (zero call fields meaning their defaults).
func (c ProcessConfig) VerifyConfig() error {
	c = c.withDefaults()
	switch {
	case c.CallSlots < 2 || c.CallSlots&(c.CallSlots-1) != 0 || c.CallSlots > 1<<16:
		return fmt.Errorf("%w: CallSlots %d must be a power of two in [2, 2^16]", ErrBadConfig, c.CallSlots)
	case c.CallBytes < 0 || c.CallBytes > maxCallBytes:
		return fmt.Errorf("%w: CallBytes %d must be in [1, %d]", ErrBadConfig, c.CallBytes, maxCallBytes)
	case c.ReceiveSlots < 2 || c.ReceiveSlots&(c.ReceiveSlots-1) != 0 || c.ReceiveSlots > 1<<20:
		return fmt.Errorf("%w: ReceiveSlots %d must be a power of two in [2, 2^20]", ErrBadConfig, c.ReceiveSlots)
	case c.MaxUnsignaled <= 0:
		return fmt.Errorf("%w: MaxUnsignaled %d must be positive", ErrBadConfig, c.MaxUnsignaled)
	case c.MaxTransfer <= 0 || c.MaxTransfer > 1<<31:
		return fmt.Errorf("%w: MaxTransfer %d must be in [1, 2^31]", ErrBadConfig, c.MaxTransfer)
	}
	return nil
}

// Process is the per-process state that every provider of the process
// shares: the registry of registered memory, and the shared receive queue
// (SRQ) with its receive completion queue. Both queues live in one memfd
// region so that shm peers deliver into them directly.
type Process struct {
	cfg    ProcessConfig
	reg    *alloc.Registry
	region *alloc.Region // SRQ ring followed by the receive completion ring
	srq    *ring
	rcq    *ring
	// posted and polled count receives, so that posted-but-unpolled ones
	// never exceed the completion ring's capacity.
	posted, polled atomic.Uint64
	cnt            recvCounters  // shared with senders: see docs/wire.md
	seen           atomic.Uint64 // cnt.ready as last read by this process's sends to itself
	strays         atomic.Uint64 // inline sends that came without a claimed receive
	// recvRegion is the region the last inline delivery wrote into
	// (receive buffers mostly share one), so that neither it nor PostRecv
	// looks the region up each time; the registry's release hook clears
	// it before the region is unmapped.
	recvRegion atomic.Pointer[alloc.Region]
	recvCQ     *ringCQ
	progress   progressList // engines Progress drives (tcp connections)

	// Calls (OpCall): the operator, the call area shm peers queue in, the
	// calls running from other transports, and the call engine's life.
	op       atomic.Pointer[Operator]
	calls    *callArea
	running  atomic.Int64
	closing  atomic.Bool
	callDone chan struct{}

	// Holds (Hold): the users whose memory must stay mapped past Close,
	// and what Close left for the last of them to run.
	holdMu   sync.Mutex
	holds    int
	deferred []func()
}

// NewProcess creates the process state and its registry.
func NewProcess(cfg ProcessConfig) (*Process, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	reg := alloc.NewRegistry(cfg.Rank)
	n := cfg.ReceiveSlots
	l := queueLayout(n)
	region, err := reg.NewRegion(l.call+callAreaBytes(cfg.CallSlots, cfg.CallBytes), alloc.RegionConfig{Name: "srq", Ladder: []alloc.Rung{alloc.Small}})
	if err != nil {
		reg.Close()
		return nil, fmt.Errorf("dtutils: receive queues: %w", err)
	}
	mem := region.Bytes()
	p := &Process{cfg: cfg, reg: reg, region: region}
	if p.srq, err = initRing(mem[:l.rcq], n, recvDescSize); err == nil {
		p.rcq, err = initRing(mem[l.rcq:l.cnt], n, recvComplSize)
	}
	if err == nil {
		p.cnt = openCounters(mem[l.cnt:l.call])
		p.calls, err = initCallArea(mem[l.call:], cfg.CallSlots, cfg.CallBytes)
	}
	if err != nil {
		reg.Close()
		return nil, err
	}
	p.recvCQ = &ringCQ{r: p.rcq, polled: &p.polled, proc: p}
	reg.OnRelease(func(id uint32) {
		if r := p.recvRegion.Load(); r != nil && r.ID() == id {
			p.recvRegion.CompareAndSwap(r, nil)
		}
	})
	return p, nil
}

// Rank returns the process's rank.
func (p *Process) Rank() uint32 { return p.cfg.Rank }

// Config returns the process's configuration.
func (p *Process) Config() ProcessConfig { return p.cfg }

// Registry returns the registry of the process's registered memory.
func (p *Process) Registry() *alloc.Registry { return p.reg }

// PostRecv posts a receive buffer, registered in this process, to the shared
// receive queue: the next Send (or WriteImm) from any peer consumes it.
func (p *Process) PostRecv(mem alloc.Memory, wrid uint64) error {
	if mem.Region() == nil || mem.Len() == 0 {
		return fmt.Errorf("%w: receive buffer is empty", ErrBadRequest)
	}
	if r := mem.Region(); r != p.recvRegion.Load() {
		if got, ok := p.reg.Lookup(r.ID()); !ok || got != r {
			return fmt.Errorf("%w: receive buffer is not registered in process %d", ErrBadRequest, p.cfg.Rank)
		}
	}
	loc := mem.Locator()
	var e [recvDescSize]byte
	recvDesc{region: loc.Region, key: loc.Key, off: loc.Offset, n: loc.Length, wrid: wrid}.put(e[:])
	// Before the descriptor is counted ready: a sender that sees the count
	// sees a minimum that covers this receive.
	for {
		m := p.cnt.minLen.Load()
		if m != 0 && m <= loc.Length || p.cnt.minLen.CompareAndSwap(m, loc.Length) {
			break
		}
	}
	for {
		n := p.posted.Load()
		if n-p.polled.Load() >= uint64(p.cfg.ReceiveSlots) {
			return fmt.Errorf("%w: %d receives posted or completed and not polled (ReceiveSlots)", ErrQueueFull, p.cfg.ReceiveSlots)
		}
		if p.posted.CompareAndSwap(n, n+1) {
			break
		}
	}
	// The count above leaves a slot, but a poster in another process may
	// still be vacating it (it claimed the entry and has not released the
	// slot yet): retry for a while. Only a poster that died in those few
	// instructions leaves the slot stuck.
	if p.srq.enqueue(e[:]) {
		p.cnt.ready.Add(1)
		return nil
	}
	b := Backoff{Idle: p.Idle}
	for start := time.Now(); !p.srq.enqueue(e[:]); {
		if time.Since(start) > time.Second {
			p.posted.Add(^uint64(0))
			return fmt.Errorf("%w: receive queue slot still held after 1 s (a peer died while taking it?)", ErrQueueFull)
		}
		if b.Sleepy() {
			runtime.Gosched()
		} else {
			b.Wait()
		}
	}
	p.cnt.ready.Add(1)
	return nil
}

// RecvCQ returns the completion queue of the shared receive queue.
func (p *Process) RecvCQ() CompletionQueue { return p.recvCQ }

// PollRecv takes receive completions like RecvCQ().Poll, without driving
// the progress engines when there are none: for a thread that routes
// arrivals beside a loop that already calls Progress (a read syscall per
// tcp connection each time).
func (p *Process) PollRecv(dst []Completion) int { return p.recvCQ.poll(dst) }

// InlineMax is the longest send that travels inside its completion
// (docs/wire.md, "Rings"): the longest message PollRecvInPlace may deliver
// in place.
const InlineMax = recvInlineMax

// PollRecvInPlace is PollRecv for a consumer that takes small messages
// where they are: a send that travelled inside its completion (at most
// InlineMax bytes, and no longer than any receive posted) is copied into
// buf instead of into a posted receive. Its completion has InPlace set and
// its message at buf[i*InlineMax:][:Bytes] for the i-th completion, and the
// receive it would have taken stays posted: no buffer to find and repost.
// Other completions are PollRecv's. It takes at most len(buf)/InlineMax
// completions; the messages in buf are the caller's until its next call.
//
// Why: a receive taken and reposted for a message already read out of its
// completion costs two rings' worth of atomics per message (measured: a
// fifth of dsfabric's receiving thread at 8-byte calls).
func (p *Process) PollRecvInPlace(dst []Completion, buf []byte) int {
	if len(buf) < InlineMax {
		return 0 // room for none (and buf may be nil, which pollInto reads as "not in place")
	}
	return p.recvCQ.pollInto(dst[:min(len(dst), len(buf)/InlineMax)], buf)
}

// AwaitRecv returns once the receive completion queue holds a completion,
// done (if not nil) reports true, WakeRecv is called, ctx ends or d passes
// (early returns are allowed), taking nothing: it lets threads watch for
// receives that any of them may take (dsfabric's sleeping workers, service
// thread and callers awaiting replies). done is checked after the sleep is
// announced, so that a producer that makes it true and then calls WakeRecv
// is never missed. It polls for hot (spinning 2 µs, then yielding), then
// sleeps on the ring's doorbell.
func (p *Process) AwaitRecv(ctx context.Context, hot, d time.Duration, done func() bool) {
	ready := func() bool { return !p.rcq.empty() || done != nil && done() }
	w := HotWait{Spin: min(2*time.Microsecond, hot), Yield: hot}
	for w.Hot() {
		if ready() || p.Progress() > 0 && ready() || ctx.Err() != nil {
			return
		}
		w.Wait()
	}
	if ctx.Err() != nil {
		return
	}
	p.Idle()
	p.rcq.sleep(d, ready)
}

// WakeRecv wakes the threads sleeping in AwaitRecv or in a Wait of the
// receive completion queue (they re-poll and find what they find).
func (p *Process) WakeRecv() { p.rcq.wake() }

// Close releases the process's registered memory, the receive queues
// included. While a Hold is outstanding the memory stays mapped, and the
// last release unmaps it: endpoints that still hold slices of it (package
// shuffle's) then fail with an error instead of faulting. Close returns
// the registry's error when it unmapped the memory itself, nil when it
// left that to a release. A second Close does nothing.
func (p *Process) Close() error {
	if p.closing.Swap(true) {
		// The call engine's bell is in memory the first Close unmapped:
		// ringing it again faulted.
		return nil
	}
	p.stopCallEngine() // no Hold succeeds after closing is set
	if p.deferWhileHeld(func() { p.reg.Close() }) {
		return nil // the last release unmaps (its error has no caller)
	}
	return p.reg.Close()
}

// Closed reports whether Close has been called: the process's memory is
// no longer the process's to use (it is still mapped while held).
func (p *Process) Closed() bool { return p.closing.Load() }

// Hold keeps the process's registered memory mapped until release is
// called, even past Close (which then leaves the unmapping to the last
// release). It is for endpoints that keep slices of registered memory
// across calls: they check Closed on entry, and a call that raced with
// Close still reads mapped memory. release may be called more than once;
// only the first counts. Hold fails with ErrClosed once Close has been
// called.
func (p *Process) Hold() (release func(), err error) {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	// closing is set before Close's deferWhileHeld takes holdMu: a hold taken
	// here either fails or is counted there.
	if p.closing.Load() {
		return nil, fmt.Errorf("%w: process %d", ErrClosed, p.cfg.Rank)
	}
	p.holds++
	var once sync.Once
	return func() { once.Do(p.release) }, nil
}

// HoldFor is Hold for an owner that keeps slices of the process's memory
// across calls (an endpoint, a client): besides release, which its Close
// calls, the hold goes when owner is collected, so that an owner dropped
// without Close does not keep a closed process's memory (its memfds
// included) mapped for good.
func HoldFor[T any](p *Process, owner *T) (release func(), err error) {
	if release, err = p.Hold(); err != nil {
		return nil, err
	}
	runtime.AddCleanup(owner, func(release func()) { release() }, release)
	return release, nil
}

func (p *Process) release() {
	p.holdMu.Lock()
	p.holds--
	var run []func()
	if p.holds == 0 {
		run, p.deferred = p.deferred, nil
	}
	p.holdMu.Unlock()
	for _, fn := range run {
		fn()
	}
}

// deferWhileHeld leaves fn to the last release and reports true while
// the process is held; it reports false, and does not run fn, when nothing
// holds it (the caller runs it, and keeps its result).
func (p *Process) deferWhileHeld(fn func()) bool {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	if p.holds == 0 {
		return false
	}
	p.deferred = append(p.deferred, fn)
	return true
}

// receiveSide is the shared receive queue of a target process, seen from
// whoever delivers into it (the process itself, or an shm peer): its two
// rings, its receive counters, and the deliverer's cached copy of the
// ready count (seen, in the deliverer's own memory).
type receiveSide struct {
	srq, rcq *ring
	cnt      recvCounters
	seen     *atomic.Uint64
}

// claim takes one of the target's posted receives for a send or a
// write-with-immediate, or reports that none is left: claimed never passes
// ready. The ready count lives on a line the target writes at every post,
// so it is read again only once the claims have caught up with the value
// last seen (it only grows; a stale seen costs one more read).
func (rs receiveSide) claim() bool {
	for {
		c := rs.cnt.claimed.Load()
		if c >= rs.seen.Load() {
			r := rs.cnt.ready.Load()
			rs.seen.Store(r)
			if c >= r {
				return false
			}
		}
		if rs.cnt.claimed.CompareAndSwap(c, c+1) {
			return true
		}
	}
}

// unclaim gives back a claim whose receive was not taken.
func (rs receiveSide) unclaim() { rs.cnt.claimed.Add(^uint64(0)) }

// recvCounters points at a process's receive counters (docs/wire.md).
type recvCounters struct {
	ready, claimed, minLen *atomic.Uint64
}

func openCounters(mem []byte) recvCounters {
	_ = mem[recvCountersBytes-1]
	at := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[off])) }
	return recvCounters{ready: at(cntReadyAt), claimed: at(cntClaimedAt), minLen: at(cntMinLenAt)}
}

// layout is where the parts of a process's receive-queue region start:
// descriptor ring at 0, then the completion ring (on a cache-line
// boundary, so that each of its 320-byte cells covers five whole lines),
// the receive counters and the call area.
type layout struct{ rcq, cnt, call int }

func queueLayout(slots int) layout {
	var l layout
	l.rcq = (ringBytes(slots, recvDescSize) + 63) &^ 63
	l.cnt = l.rcq + ringBytes(slots, recvComplSize)
	l.call = l.cnt + recvCountersBytes
	return l
}

// deliverInline completes an inline send (its header c, its message msg):
// it takes a posted receive, the one the sender claimed or another as good,
// and copies the message there. It reports false for an inline send that
// found no receive, which only a peer that skipped its claim can cause:
// the message is dropped and counted in strays.
func (p *Process) deliverInline(c *Completion, msg []byte) bool {
	var e [recvDescSize]byte
	if !p.srq.dequeueSoon(e[:], claimedCellWait) {
		p.strays.Add(1)
		return false
	}
	d := getRecvDesc(e[:])
	c.WRID = d.wrid
	if c.Bytes > recvInlineMax || uint64(c.Bytes) > d.n {
		c.Status, c.Bytes = StatusLength, 0
		return true
	}
	buf, ok := p.recvBuffer(d)
	if !ok {
		c.Status, c.Bytes = StatusRemoteAccess, 0
		return true
	}
	copy(buf, msg[:c.Bytes])
	return true
}

// recvBuffer resolves a posted receive's buffer in this process through
// the recvRegion cache, with the checks of Registry.Resolve (Region.Span).
func (p *Process) recvBuffer(d recvDesc) ([]byte, bool) {
	r := p.recvRegion.Load()
	if r == nil || r.ID() != d.region {
		var ok bool
		if r, ok = p.reg.Lookup(d.region); !ok {
			return nil, false
		}
		p.recvRegion.Store(r)
		// Released between the lookup and the store, its hook may have
		// run already: only a region still registered may stay cached.
		if cur, ok := p.reg.Lookup(d.region); !ok || cur != r {
			p.recvRegion.CompareAndSwap(r, nil)
			return nil, false
		}
	}
	return r.Span(d.key, d.off, d.n)
}

// ringCQ reads receive completions from a completion ring.
type ringCQ struct {
	r      *ring
	polled *atomic.Uint64
	proc   *Process
}

// Poll drives the process's progress engines when the ring is empty: a
// receive arriving over tcp then lands on the polling thread.
func (q *ringCQ) Poll(dst []Completion) int {
	n := q.poll(dst)
	if n == 0 && len(dst) > 0 && q.proc.Progress() > 0 {
		n = q.poll(dst)
	}
	return n
}

func (q *ringCQ) poll(dst []Completion) int { return q.pollInto(dst, nil) }

// pollInto takes completions; an inline message goes into the posted
// receive it claimed when buf is nil, else in place into buf (the i-th
// completion's at i*recvInlineMax, len(buf) ≥ len(dst)*recvInlineMax).
func (q *ringCQ) pollInto(dst []Completion, buf []byte) int {
	var e [recvComplSize]byte
	n, kept := 0, uint64(0)
	// The completions there are, claimed with one compare-and-swap; each
	// cell goes back as soon as it is read. An inline message to deliver
	// into a posted buffer is copied out of its cell first and delivered
	// after: delivering from the cell itself would hold the cell, and stall
	// the producer a lap later, while a descriptor is taken and resolved.
	for n < len(dst) {
		pos, k := q.r.claimSome(len(dst) - n)
		if k == 0 {
			break
		}
		for j := range uint64(k) {
			cell := q.r.cellData(pos + j)
			c, inline := getRecvCompl(cell)
			if inline && buf == nil {
				m := min(recvComplHdr+complTail(cell), len(cell))
				copy(e[:], cell[:m])
				q.r.releaseCell(pos + j)
				c, _ = getRecvCompl(e[:]) // the copy is what is delivered
				if !q.proc.deliverInline(&c, e[recvComplHdr:m]) {
					continue
				}
			} else {
				if inline {
					// In place: from the cell straight into buf. c.Bytes
					// was read once (the peer may write the cell at will).
					c.InPlace = true
					kept++
					if c.Bytes > recvInlineMax || recvComplHdr+c.Bytes > len(cell) {
						c.Status, c.Bytes = StatusLength, 0 // a corrupt entry
					} else {
						copy(buf[n*recvInlineMax:], cell[recvComplHdr:recvComplHdr+c.Bytes])
					}
				}
				q.r.releaseCell(pos + j)
			}
			dst[n] = c
			n++
		}
	}
	q.polled.Add(uint64(n))
	if kept > 0 {
		// The receives the claims of those sends reserved were never
		// taken: count them posted again, as PostRecv would have after
		// taking and reposting them. Every claim still consumes exactly one
		// receive (docs/wire.md, "Rings").
		q.proc.posted.Add(kept)
		q.proc.cnt.ready.Add(kept)
	}
	return n
}

func (q *ringCQ) Wait(ctx context.Context, dst []Completion) (int, error) {
	return waitOn(ctx, q, dst)
}

// sleep blocks on the ring's futex doorbell, at most 50 ms so that ctx is
// rechecked.
func (q *ringCQ) sleep(ctx context.Context, dst []Completion) int {
	q.proc.Idle()
	q.r.sleep(50*time.Millisecond, func() bool { return !q.r.empty() })
	return 0
}
