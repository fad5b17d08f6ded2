package dsfabric

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// The receive side of send-based calls (docs/design.md, "dsfabric"):
//
//   - Messages land in the buffers this process posts to its shared receive
//     queue. Whoever routes takes their completions, copies each message into
//     the inbox of the thread it is for (a worker's, or the service
//     threads'), reposts the buffer at once and counts it for its sender.
//   - Routing is done by workers when they poll (Worker.Poll tries it
//     first), so that a busy job needs no service thread and no wake-up per
//     message; the service thread routes only while no worker polls, and
//     otherwise just runs service calls. A worker routing takes its own
//     inbox at the first call it routes to itself, and queues that call
//     and the later ones without the inbox's lock (routeFor): the common case of one worker polling pays
//     no lock per message.
//   - Receive credits replace per-message acknowledgement: every sender may
//     have credits() messages unconsumed here; routing writes the count it
//     consumed from a sender into that sender's credit word (a one-sided
//     write, batched), and the sender waits only when it has used them all.
//   - Routing never sends and never blocks (it holds f.rx): replies that a
//     refusal needs, broadcast forwarding and buffer reads run from the
//     inboxes, outside the lock.

// inbox is a thread's queue of routed calls. Arguments and buffers are
// copied into an arena that the consumer swaps out whole, so routing
// allocates nothing once the arenas have grown.
type inbox struct {
	mu    sync.Mutex
	q     []queued
	arena []byte
}

// queued is a routed message: its header, its arguments and buffer part
// (slices of an inbox arena) and the rank it came from.
type queued struct {
	h       callHdr
	args    []byte
	tail    []byte
	src     int
	forward bool // a broadcast's service copy: forward it along the tree
}

// put appends a copy of a message.
func (in *inbox) put(h callHdr, args, tail []byte, src int, forward bool) {
	in.mu.Lock()
	in.add(h, args, tail, src, forward)
	in.mu.Unlock()
}

// add is put without the lock, for a queue only its caller can reach.
func (in *inbox) add(h callHdr, args, tail []byte, src int, forward bool) {
	a := len(in.arena)
	in.arena = append(in.arena, args...)
	in.arena = append(in.arena, tail...)
	q := queued{h: h, src: src, forward: forward}
	if len(args) > 0 {
		q.args = in.arena[a : a+len(args) : a+len(args)]
	}
	if len(tail) > 0 {
		q.tail = in.arena[a+len(args) : len(in.arena) : len(in.arena)]
	}
	in.q = append(in.q, q)
}

// pending reports whether calls are queued.
func (in *inbox) pending() bool {
	in.mu.Lock()
	n := len(in.q)
	in.mu.Unlock()
	return n > 0
}

// spare is the consumer's half of an inbox: the slices it swaps in for
// the full ones, so that neither side allocates once both have grown.
type spare struct {
	q []queued
	a []byte
}

// take swaps the queued calls out for sp's empty slices and returns them.
func (in *inbox) take(sp *spare) ([]queued, []byte) {
	in.mu.Lock()
	q, a := in.q, in.arena
	in.q, in.arena = sp.q[:0], sp.a[:0]
	in.mu.Unlock()
	sp.q, sp.a = nil, nil // in's now: never handed out twice
	return q, a
}

// runAll runs every queued call on the current thread (self, with c as its
// Call) and returns how many ran. One goroutine consumes an inbox.
func (in *inbox) runAll(f *Fabric, self ThreadID, c *Call, sp *spare) int {
	q, a := in.take(sp)
	return runQueued(f, q, a, self, c, sp)
}

// runQueued runs calls taken from an inbox and keeps their slices in sp
// for the next swap.
func runQueued(f *Fabric, q []queued, a []byte, self ThreadID, c *Call, sp *spare) int {
	for i := range q {
		f.exec(q[i], self, c)
		q[i] = queued{} // the arena is reused: drop the slices
	}
	sp.q, sp.a = q, a
	return len(q)
}

// credits is how many messages each sender may have unconsumed at this
// process: the posted receive buffers split evenly among the ranks.
func (f *Fabric) credits() uint64 { return uint64(f.recvCount() / f.names.Size) }

// recvCount is the number of receive buffers posted: RecvBuffers, raised to
// one per rank so that every sender has a credit.
func (f *Fabric) recvCount() int { return max(f.cfg.RecvBuffers, f.names.Size) }

// creditBatch is how many consumed messages routing lets a sender's count
// fall behind before it writes it: a quarter of the credits, so that a
// sender that has used them all always gets some back.
func (f *Fabric) creditBatch() uint64 { return max(1, f.credits()/4) }

// tryRoute routes what has arrived if no other thread is routing; it
// returns how many messages it routed.
func (f *Fabric) tryRoute() int {
	if !f.rx.TryLock() {
		return 0
	}
	n := f.routeLocked()
	f.rx.Unlock()
	return n
}

// routeFor is tryRoute by worker w, which then runs its calls: at the
// first call it routes to itself, w takes its inbox, and that call and
// the later ones join the queue taken without the inbox's lock (no other
// thread can reach it: others route only after rx is released, into the
// inbox). Calls stay in arrival order: those routed before are ahead in
// the queue taken, those routed after are in the inbox for the next Poll.
// It reports false when it routed nothing to w (or another thread
// routes): a Poll that finds nothing pays no more than tryRoute.
func (f *Fabric) routeFor(w *Worker) ([]queued, []byte, bool) {
	if !f.rx.TryLock() {
		return nil, nil, false
	}
	f.self = w
	f.routeLocked()
	f.self = nil
	q, a, ok := w.own.q, w.own.arena, w.owning
	w.own.q, w.own.arena, w.owning = nil, nil, false
	f.rx.Unlock()
	return q, a, ok
}

// routeLocked takes the receive completions there are (f.rx held), at
// most about one receive buffer's worth per rank: credits go back while it
// routes, so senders as fast as the router kept one round going without
// end, their calls piling up in the inboxes (14 608 at once in micro -mode
// send, with 128 receive buffers) while the routing thread ran none of its
// own. What is left stays in the receive queue, its credits unreturned,
// for the next round.
func (f *Fabric) routeLocked() int {
	if f.proc.Closed() {
		return 0 // the receive queue is unmapped: a Poll after Close finds nothing
	}
	total, batch, limit := 0, f.creditBatch(), f.recvCount()
	for total < limit {
		// No progress driving here: Worker.Poll runs beside loops that
		// call Progress already; idle waiters and Serve drive it.
		// Small messages are routed from where they arrived, and their
		// receive buffers stay posted (PollRecvInPlace).
		n := f.proc.PollRecvInPlace(f.rxCS[:], f.rxInl[:])
		if n == 0 {
			break
		}
		for i, c := range f.rxCS[:n] {
			var m alloc.Memory
			var msg []byte
			if c.InPlace {
				msg = f.rxInl[i*dtutils.InlineMax:][:c.Bytes]
			} else {
				m = f.recvBuf(int(c.WRID))
				msg = m.Bytes()[:c.Bytes]
			}
			src := int(c.Src)
			if c.Status == dtutils.StatusSuccess {
				f.route(msg, src)
			} else {
				f.log.Warn("dsfabric: failed receive", "from", c.Src, "status", c.Status)
			}
			if !c.InPlace {
				if err := f.proc.PostRecv(m, c.WRID); err != nil && !f.closing.Load() {
					f.log.Error("dsfabric: reposting a receive buffer", "err", err)
				}
			}
			if src >= 0 && src < len(f.peers) {
				// Credits go back as soon as a batch is consumed, not once
				// everything is: a sender that has used its window would
				// otherwise wait for the whole backlog, and the two sides
				// take turns idling (measured: a credit wait per 64
				// messages, half the sender's time at 8 B).
				p := f.peers[src]
				if p.consumed++; p.consumed-p.returned >= batch {
					f.returnCredit(p)
				}
			}
		}
		total += n
	}
	return total
}

// returnCredit writes p's consumed count into its credit word; f.rx held.
func (f *Fabric) returnCredit(p *peer) {
	if p.creditAt.Length == 0 {
		return // its hello has not arrived: it has sent nothing else either
	}
	binary.LittleEndian.PutUint64(p.creditSrc.Bytes(), p.consumed)
	if err := p.tx.Write(p.creditSrc, p.creditAt); err != nil {
		if !f.closing.Load() && !f.isDead(p.rank) {
			f.log.Warn("dsfabric: returning receive credits", "to", p.rank, "err", err)
		}
		return
	}
	p.returned = p.consumed
	if f.afterCredit != nil {
		f.afterCredit()
	}
}

// route copies one message into the inbox it is for; f.rx held. It never
// sends: whatever needs an answer is queued for a thread that may.
func (f *Fabric) route(msg []byte, src int) {
	h, args, tail, err := parseCall(msg)
	if err != nil {
		f.log.Warn("dsfabric: dropping a malformed message", "from", src, "err", err)
		return
	}
	switch h.kind {
	case kindReply:
		if pc, ok := f.pending.LoadAndDelete(h.callID); ok {
			if h.flags&flagError != 0 {
				pc.ch <- callResult{err: fmt.Errorf("%w: rank %d: %s", ErrRemote, src, args)}
			} else {
				pc.ch <- callResult{data: append([]byte(nil), args...)}
			}
			f.proc.WakeRecv() // its caller may sleep in AwaitRecv
		}
	case kindNotify:
		if s, ok := f.syncs.Load(h.callID); ok {
			s.Done()
		}
	case kindCredit:
		f.setCreditAt(args, src)
	case kindBroadcast:
		f.toService(h, args, tail, src, true)
		for _, w := range f.workers {
			w.deliver(h, args, tail, src)
		}
	case kindCall:
		if h.flags&flagService != 0 {
			f.toService(h, args, tail, src, false)
			return
		}
		t, ok := f.localThread(ThreadID(h.dst))
		if !ok {
			f.toService(h, args, tail, src, false) // refused there: a refusal sends
			return
		}
		f.workers[t].deliver(h, args, tail, src)
	}
}

// localThread returns which of this process's workers dst is, if it is
// one: with a multiplication, not the two divisions of Names.Rank and
// ThreadRank, since routing asks it for every message.
func (f *Fabric) localThread(dst ThreadID) (int, bool) {
	t := int(dst) - f.rank*f.names.ThreadsPerProcess
	return t, t >= 0 && t < f.names.ThreadsPerProcess
}

// setCreditAt records where rank src wants its credits written; f.rx held.
func (f *Fabric) setCreditAt(b []byte, src int) {
	var at alloc.Locator
	err := at.UnmarshalBinary(b)
	switch {
	case err != nil:
	case src < 0 || src >= len(f.peers):
		err = fmt.Errorf("rank %d of %d", src, len(f.peers))
	case at.Process != uint32(src) || at.Length != 8 || at.Offset%8 != 0:
		err = fmt.Errorf("credit word %v is not 8 aligned bytes at rank %d", at, src)
	}
	if err != nil {
		f.log.Warn("dsfabric: dropping a malformed credit hello", "from", src, "err", err)
		return
	}
	f.peers[src].creditAt = at
}

// toService queues a message for the service threads and wakes one.
func (f *Fabric) toService(h callHdr, args, tail []byte, src int, forward bool) {
	f.svc.put(h, args, tail, src, forward)
	f.wakeService()
}

// wakeFromOutside is WakeRecv for goroutines that are not the fabric's own
// threads and hold no part of life (the coordinator's, context.AfterFunc's):
// they may run after Close has unmapped the receive queue.
func (f *Fabric) wakeFromOutside() {
	f.life.RLock()
	if f.proc != nil && !f.procGone {
		f.proc.WakeRecv()
	}
	f.life.RUnlock()
}

// wakeService wakes the service threads, standing by or sleeping in
// AwaitRecv.
func (f *Fabric) wakeService() {
	f.ringService()
	f.proc.WakeRecv()
}

// ringService wakes a service thread that stands by (a token waits in
// svcBell if none does).
func (f *Fabric) ringService() {
	select {
	case f.svcBell <- struct{}{}:
	default:
	}
}

// exec runs a routed message on the current thread: a worker's calls and
// broadcasts, or (self naming the process's first thread) service calls,
// broadcast forwarding and refusals. c is the thread's Call, reused.
func (f *Fabric) exec(m queued, self ThreadID, c *Call) {
	h, src := m.h, m.src
	if m.forward {
		for _, c := range treeChildren(f.rank, int(h.dst), f.names.Size) {
			if err := f.send(c, h, m.args, m.tail, nil); err != nil {
				f.log.Warn("dsfabric: forwarding a broadcast", "to", c, "err", err)
			}
		}
		return
	}
	if h.kind == kindBroadcast {
		f.run(h, m.args, m.tail, self, c)
		return
	}
	if h.flags&flagService == 0 {
		if _, ok := f.localThread(ThreadID(h.dst)); !ok {
			f.refuse(h, src, fmt.Sprintf("thread %d is not in rank %d", h.dst, f.rank))
			return
		}
		self = ThreadID(h.dst)
	}
	buf := m.tail
	switch {
	case h.flags&flagDestBuf != 0:
		var dest alloc.Locator
		err := dest.UnmarshalBinary(m.tail)
		if err == nil {
			buf, err = f.proc.Registry().Resolve(dest)
		}
		if err != nil {
			f.refuse(h, src, fmt.Sprintf("destination buffer: %v", err))
			return
		}
	case h.flags&flagReadBuf != 0:
		var orig, dest alloc.Locator
		err := orig.UnmarshalBinary(m.tail[:locSize])
		if err == nil {
			err = dest.UnmarshalBinary(m.tail[locSize:])
		}
		if err == nil {
			buf, err = f.readBuffer(src, orig, dest)
		}
		if err != nil {
			f.refuse(h, src, fmt.Sprintf("reading the buffer: %v", err))
			return
		}
	}
	f.run(h, m.args, buf, self, c)
}

// workersPolling reports whether any worker has polled since the last call
// (and clears the marks): while they do, they route, and the service
// thread only stands by.
func (f *Fabric) workersPolling() bool {
	any := false
	for _, w := range f.workers {
		if w.polled.Load() != 0 {
			w.polled.Store(0)
			any = true
		}
	}
	return any
}

// serveRecv is a service thread. While workers route — they poll, or
// sleep in Serve, where an arrival wakes them — it stands by: it runs
// service calls when woken for them, and checks every standBy that the
// workers still route. Otherwise (no worker polls: they are stuck in
// handlers, or their bodies stopped polling) it routes, sleeping on the
// receive queue's doorbell when there is nothing.
func (f *Fabric) serveRecv() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var sp spare
	var c Call
	self := ThreadID(f.rank * f.names.ThreadsPerProcess)
	active := false
	slept := 0 // checks in a row that found every worker asleep
	standBy := func(woken bool) {
		d := f.standBy(&slept)
		if f.cfg.standingBy != nil {
			f.cfg.standingBy(d, woken)
		}
		timer.Reset(d)
	}
	for f.ctx.Err() == nil {
		if f.svc.runAll(f, self, &c, &sp) > 0 {
			continue
		}
		if active {
			select {
			case <-f.svcBell:
				// A service call, or a worker that woke during a long
				// interval: look again soon.
				if f.svcLong.Load() && !f.workersAsleep() {
					slept = 0
					standBy(true)
				}
			case <-timer.C:
				active = f.workersRoute()
				standBy(false)
			case <-f.ctx.Done():
			}
			continue
		}
		f.rx.Lock()
		n := f.routeLocked()
		f.rx.Unlock()
		if n > 0 {
			continue
		}
		if f.workersRoute() {
			active = true
			slept = 0
			standBy(false)
			continue
		}
		f.proc.AwaitRecv(f.ctx, hotService, 50*time.Millisecond, f.svc.pending)
	}
}

// hotService is how long an idle service thread that routes polls before
// it sleeps.
const hotService = 50 * time.Microsecond

// Intervals of a standing-by service thread while every worker sleeps in
// Serve: svcCheck at first, doubled at each check that finds them all
// asleep still, up to svcCheckMax. A fixed 20 ms was half of an idle
// process's CPU time (`mctsbench idle`: 2.0 → 1.0 % of a core with
// 160 ms); past svcCheck a worker that wakes rings the service thread.
const (
	svcCheck    = 20 * time.Millisecond
	svcCheckMax = time.Second
)

// standBy is how long a standing-by service thread waits before it checks
// again that the workers still route: soon while they poll (one may get
// stuck in a handler), rarely while they all sleep in Serve (slept counts
// the checks in a row that found them so).
func (f *Fabric) standBy(slept *int) time.Duration {
	// svcLong before the look, as a worker clears asleep before it reads
	// svcLong: either the worker rings, or the look sees it awake.
	f.svcLong.Store(*slept > 0)
	if !f.workersAsleep() {
		f.svcLong.Store(false)
		*slept = 0
		return time.Millisecond
	}
	d := svcCheck << min(*slept, 10)
	*slept++
	return min(d, svcCheckMax)
}

// workersRoute reports whether the workers route arrivals: one has polled
// since the last call (the marks are cleared), or all sleep in Serve.
func (f *Fabric) workersRoute() bool {
	return f.workersPolling() || f.workersAsleep()
}

// workersAsleep reports whether every worker sleeps in Serve.
func (f *Fabric) workersAsleep() bool {
	for _, w := range f.workers {
		if w.asleep.Load() == 0 {
			return false
		}
	}
	return true
}

// pollMark is set by a worker's Poll and cleared by the service thread.
type pollMark struct {
	atomic.Uint32
	_ [60]byte // a line of its own: every Poll stores to it
}
