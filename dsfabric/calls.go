package dsfabric

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// creditTimeout bounds how long a send waits for receive credits from a
// destination that consumes nothing (its threads are stuck).
const creditTimeout = 10 * time.Second

// creditHot is how long a send waiting for credits polls without sleeping.
const creditHot = 2 * time.Millisecond

// send builds a message in a send buffer for rank and transmits it once
// rank has a receive buffer for it (a credit); pre is a one-sided write
// posted first on the same queue pair (CallBufferWrite), which completes
// before the message is seen. It does not wait for the message to arrive.
func (f *Fabric) send(rank int, h callHdr, args, tail []byte, pre *dtutils.WorkRequest) error {
	if rank < 0 || rank >= f.names.Size {
		return fmt.Errorf("%w: rank %d of %d", ErrBadThread, rank, f.names.Size)
	}
	if err := f.deadErr(rank); err != nil {
		return err
	}
	n := callHeader + len(args) + len(tail)
	if n > f.cfg.MaxMessage {
		return fmt.Errorf("%w: %d bytes (header %d + arguments %d + buffer %d) > MaxMessage %d", ErrTooLarge, n, callHeader, len(args), len(tail), f.cfg.MaxMessage)
	}
	h.args, h.buf = uint32(len(args)), uint32(len(tail))
	p := f.peers[rank]
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.ctx.Err() != nil {
		// Checked under the lock: teardown cancels, then waits for
		// senders holding it (fenceSenders), then unmaps the buffers.
		return ErrClosed
	}
	if h := f.sendHook.Load(); h != nil {
		(*h)()
	}
	if err := f.awaitCredit(p); err != nil {
		return err
	}
	msg, err := f.sendBuffer(p, n)
	if err != nil {
		return err
	}
	b := msg.Bytes()
	h.put(b)
	copy(b[callHeader:], args)
	copy(b[callHeader+len(args):], tail)
	if pre != nil {
		if err := p.calls.Write(pre.Local, pre.Remote); err != nil {
			msg.Done()
			return f.lost(rank, err)
		}
	}
	if err := p.calls.Send(msg, 0); err != nil {
		if errors.Is(err, dtutils.ErrReceiverNotReady) {
			// Credits make this impossible; if it happens anyway, the
			// call fails and the connection stays usable.
			return fmt.Errorf("dsfabric: rank %d had no receive buffer: %w", rank, err)
		}
		return f.lost(rank, err)
	}
	p.sent++
	if pre != nil {
		// orig is the caller's again when CallBufferWrite returns.
		if err := p.calls.Flush(f.ctx); err != nil {
			return f.lost(rank, err)
		}
	}
	return nil
}

// credit returns how many of this process's messages p has consumed.
func (p *peer) credit() uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&p.creditWord.Bytes()[0])).Load()
}

// awaitCredit returns once p has a receive buffer for one more message
// (p.mu held), driving the progress engines that bring credits in.
func (f *Fabric) awaitCredit(p *peer) error {
	limit := f.credits()
	if p.sent-p.credit() < limit {
		return nil
	}
	b := dtutils.HotWait{Spin: 2 * time.Microsecond, Yield: creditHot, Idle: f.proc.Idle}
	seen, since := p.credit(), time.Now()
	for {
		c := p.credit()
		if p.sent-c < limit {
			return nil
		}
		if c != seen {
			seen, since = c, time.Now()
		}
		if err := f.deadErr(p.rank); err != nil {
			return err
		}
		if f.ctx.Err() != nil {
			return ErrClosed
		}
		if err := p.calls.Err(); err != nil {
			return f.lost(p.rank, err)
		}
		if time.Since(since) > creditTimeout {
			return fmt.Errorf("dsfabric: rank %d consumed none of %d messages for %v: %w", p.rank, limit, creditTimeout, dtutils.ErrReceiverNotReady)
		}
		// Routing here would queue the destination's calls faster than it
		// runs them when it is in this process; the peer's own threads
		// route (its service thread when its workers are stuck).
		if f.proc.Progress() > 0 {
			b.Reset()
			continue
		}
		p.calls.Poll()
		b.Wait()
	}
}

// sendBuffer returns n bytes of send buffer for p (p.mu held), flushing
// p's queue pair when every buffer is still in flight.
func (f *Fabric) sendBuffer(p *peer, n int) (alloc.Memory, error) {
	m, err := p.ring.Alloc(n)
	if errors.Is(err, alloc.ErrBusy) {
		if err := p.calls.Flush(f.ctx); err != nil {
			return alloc.Memory{}, f.lost(p.rank, err)
		}
		m, err = p.ring.Alloc(n)
	}
	if err != nil {
		return alloc.Memory{}, fmt.Errorf("dsfabric: send buffer for rank %d: %w", p.rank, err)
	}
	return m, nil
}

func (f *Fabric) lost(rank int, err error) error {
	if rank != f.rank {
		f.markDead(rank, "connection lost: "+err.Error())
		return f.deadErr(rank)
	}
	return err
}

func (f *Fabric) thread(dst ThreadID) (int, error) {
	if !f.names.Valid(dst) {
		return 0, fmt.Errorf("%w: thread %d of %d", ErrBadThread, dst, f.names.Threads())
	}
	return f.names.Rank(dst), nil
}

// syncFlags prepares a call's notification. A synchronizer already at
// zero is refused: its notifications would drive it below zero, and an
// Executed one would stay registered for good.
func (f *Fabric) syncFlags(s *Synchronizer, h *callHdr) error {
	if s == nil {
		return nil
	}
	if s.finished() {
		return fmt.Errorf("%w: a done synchronizer counts no more calls (Add before its count reaches zero, or make a new one)", ErrSyncDone)
	}
	if s.mode == Executed {
		h.flags |= flagNotify
		h.callID = f.register(s)
	}
	return nil
}

// transmitted counts a Transmitted synchronizer down after a send.
func transmitted(s *Synchronizer, err error) error {
	if s != nil && s.mode == Transmitted && err == nil {
		s.Done()
	}
	return err
}

// Call runs handler h with args on worker thread dst (fire and forget). A
// non-nil s is counted down when the call is transmitted or executed,
// per its mode.
func (f *Fabric) Call(src, dst ThreadID, h HandlerID, args []byte, s *Synchronizer) error {
	rank, err := f.thread(dst)
	if err != nil {
		return err
	}
	hd := callHdr{kind: kindCall, handler: h, src: uint32(src), dst: uint32(dst)}
	if err := f.syncFlags(s, &hd); err != nil {
		return err
	}
	return transmitted(s, f.send(rank, hd, args, nil, nil))
}

// CallService runs h with args on a service thread of process rank.
func (f *Fabric) CallService(src ThreadID, rank int, h HandlerID, args []byte, s *Synchronizer) error {
	hd := callHdr{kind: kindCall, flags: flagService, handler: h, src: uint32(src), dst: uint32(rank * f.names.ThreadsPerProcess)}
	if err := f.syncFlags(s, &hd); err != nil {
		return err
	}
	return transmitted(s, f.send(rank, hd, args, nil, nil))
}

// CallBuffer runs h on dst with buf travelling inside the call (the
// handler sees it as Call.Buffer).
func (f *Fabric) CallBuffer(src, dst ThreadID, h HandlerID, args, buf []byte, s *Synchronizer) error {
	rank, err := f.thread(dst)
	if err != nil {
		return err
	}
	hd := callHdr{kind: kindCall, handler: h, src: uint32(src), dst: uint32(dst)}
	if err := f.syncFlags(s, &hd); err != nil {
		return err
	}
	return transmitted(s, f.send(rank, hd, args, buf, nil))
}

// CallBufferWrite first writes orig (registered memory here) into dest
// (registered memory at dst's process) with a one-sided write, then runs h
// on dst, whose Call.Buffer is dest. The write is complete when h runs.
func (f *Fabric) CallBufferWrite(src, dst ThreadID, h HandlerID, args []byte, orig alloc.Memory, dest alloc.Locator, s *Synchronizer) error {
	rank, err := f.bufferDest(dst, orig, dest)
	if err != nil {
		return err
	}
	lb, _ := dest.MarshalBinary()
	hd := callHdr{kind: kindCall, flags: flagDestBuf, handler: h, src: uint32(src), dst: uint32(dst)}
	if err := f.syncFlags(s, &hd); err != nil {
		return err
	}
	pre := &dtutils.WorkRequest{Op: dtutils.OpWrite, Local: orig, Remote: dest}
	return transmitted(s, f.send(rank, hd, args, lb, pre))
}

// CallBufferRead runs h on dst after dst's process has read orig (registered
// memory here) into dest (registered memory there) with a one-sided read;
// Call.Buffer is dest. orig must stay unchanged until h has run: use an
// Executed synchronizer to know when.
func (f *Fabric) CallBufferRead(src, dst ThreadID, h HandlerID, args []byte, orig alloc.Memory, dest alloc.Locator, s *Synchronizer) error {
	rank, err := f.bufferDest(dst, orig, dest)
	if err != nil {
		return err
	}
	lb, _ := orig.Locator().AppendBinary(make([]byte, 0, 2*locSize))
	lb, _ = dest.AppendBinary(lb)
	hd := callHdr{kind: kindCall, flags: flagReadBuf, handler: h, src: uint32(src), dst: uint32(dst)}
	if err := f.syncFlags(s, &hd); err != nil {
		return err
	}
	return transmitted(s, f.send(rank, hd, args, lb, nil))
}

// bufferDest checks that dest is a buffer of orig's size at dst's process
// and returns that rank.
func (f *Fabric) bufferDest(dst ThreadID, orig alloc.Memory, dest alloc.Locator) (int, error) {
	rank, err := f.thread(dst)
	if err != nil {
		return 0, err
	}
	if dest.Process != uint32(rank) || dest.Length != uint64(orig.Len()) {
		return 0, fmt.Errorf("%w: destination buffer %v for %d bytes at rank %d", ErrBadThread, dest, orig.Len(), rank)
	}
	return rank, nil
}

// CallReturn runs h with args on dst and returns its result.
func (f *Fabric) CallReturn(ctx context.Context, src, dst ThreadID, h HandlerID, args []byte) ([]byte, error) {
	rank, err := f.thread(dst)
	if err != nil {
		return nil, err
	}
	return f.callReturn(ctx, rank, callHdr{kind: kindCall, flags: flagReply, handler: h, src: uint32(src), dst: uint32(dst)}, args)
}

// CallServiceReturn runs h on a service thread of rank and returns its result.
func (f *Fabric) CallServiceReturn(ctx context.Context, src ThreadID, rank int, h HandlerID, args []byte) ([]byte, error) {
	hd := callHdr{kind: kindCall, flags: flagReply | flagService, handler: h, src: uint32(src), dst: uint32(rank * f.names.ThreadsPerProcess)}
	return f.callReturn(ctx, rank, hd, args)
}

func (f *Fabric) callReturn(ctx context.Context, rank int, hd callHdr, args []byte) ([]byte, error) {
	hd.callID = f.nextID.Add(1)
	pc := &pendingCall{rank: rank, ch: make(chan callResult, 1)}
	f.pending.Store(hd.callID, pc)
	if err := f.send(rank, hd, args, nil, nil); err != nil {
		f.pending.Delete(hd.callID)
		return nil, err
	}
	if err := f.deadErr(rank); err != nil { // died between send and Store
		if _, ok := f.pending.LoadAndDelete(hd.callID); ok {
			return nil, err
		}
	}
	return f.awaitReply(ctx, hd.callID, pc)
}

// awaitReply waits for a call's reply. The caller routes arrivals itself
// and, once idle for HotPeriod, sleeps on the receive queue's doorbell, so
// that the reply's arrival wakes it directly (one wake-up where parking on
// the channel took the router's and then its own).
func (f *Fabric) awaitReply(ctx context.Context, id uint64, pc *pendingCall) ([]byte, error) {
	stop := context.AfterFunc(ctx, f.wakeFromOutside)
	defer stop()
	arrived := func() bool { return len(pc.ch) > 0 }
	hot := dtutils.HotWait{Spin: 2 * time.Microsecond, Yield: f.cfg.HotPeriod}
	for {
		select {
		case r := <-pc.ch:
			return r.data, r.err
		default:
		}
		if err := ctx.Err(); err != nil {
			f.pending.Delete(id)
			return nil, err
		}
		// Routing and AwaitRecv touch the process's queues: under life,
		// which Close takes before it unmaps them.
		f.life.RLock()
		if f.ctx.Err() != nil {
			f.life.RUnlock()
			return nil, ErrClosed
		}
		routed := f.tryRoute()
		if routed == 0 && f.proc.Progress() > 0 {
			routed = f.tryRoute() // a waiter drives the engines (tcp) too
		}
		if routed == 0 && !hot.Hot() {
			f.proc.AwaitRecv(ctx, 0, 50*time.Millisecond, arrived)
		}
		f.life.RUnlock()
		if routed > 0 {
			hot.Reset()
		} else if hot.Hot() {
			hot.Wait()
		}
	}
}

// CallReturnTyped is CallReturn with Go values, encoded as Encode does.
func CallReturnTyped[R any](ctx context.Context, f *Fabric, src, dst ThreadID, h HandlerID, arg any) (R, error) {
	var r R
	args, err := Encode(nil, arg)
	if err != nil {
		return r, err
	}
	out, err := f.CallReturn(ctx, src, dst, h, args)
	if err != nil {
		return r, err
	}
	return r, Decode(out, &r)
}

// Broadcast runs h with args on every worker thread of the job, this
// process's included. Processes forward it along a binomial tree of depth
// ⌈log2 P⌉. An Executed synchronizer expects one notification per thread.
func (f *Fabric) Broadcast(src ThreadID, h HandlerID, args []byte, s *Synchronizer) error {
	return f.BroadcastBuffer(src, h, args, nil, s)
}

// BroadcastBuffer is Broadcast with a buffer travelling in the call.
func (f *Fabric) BroadcastBuffer(src ThreadID, h HandlerID, args, buf []byte, s *Synchronizer) error {
	hd := callHdr{kind: kindBroadcast, handler: h, src: uint32(src), dst: uint32(f.rank)}
	if err := f.syncFlags(s, &hd); err != nil {
		return err
	}
	// The root sends to itself too: its workers run the call like everyone's.
	return transmitted(s, f.send(f.rank, hd, args, buf, nil))
}

// treeChildren returns the ranks rank forwards a broadcast from root to.
func treeChildren(rank, root, size int) []int {
	rel := (rank - root + size) % size
	var out []int
	for m := 1; m < size; m <<= 1 {
		if m > rel && rel+m < size {
			out = append(out, (rel+m+root)%size)
		}
	}
	return out
}

// readBuffer copies orig (at rank src) into dest (here) with a one-sided
// read on the queue pair to src.
func (f *Fabric) readBuffer(src int, orig, dest alloc.Locator) ([]byte, error) {
	buf, err := f.proc.Registry().Resolve(dest)
	if err != nil {
		return nil, err
	}
	if orig.Length != dest.Length || orig.Process != uint32(src) {
		return nil, fmt.Errorf("%w: read of %v into %v", ErrBadMessage, orig, dest)
	}
	r, _ := f.proc.Registry().Lookup(dest.Region)
	local, err := r.Memory(int(dest.Offset), int(dest.Length))
	if err != nil {
		return nil, err
	}
	if err := f.peers[src].calls.Read(f.ctx, local, orig); err != nil {
		return nil, f.lost(src, err)
	}
	return buf, nil
}

// refuse answers a call that cannot run: an error reply or notification
// when the caller waits for one, else a log line.
func (f *Fabric) refuse(h callHdr, src int, why string) {
	switch {
	case h.flags&flagReply != 0:
		f.send(src, callHdr{kind: kindReply, flags: flagError, callID: h.callID}, []byte(why), nil, nil)
	case h.flags&flagNotify != 0:
		f.log.Warn("dsfabric: call refused", "from", src, "handler", fmt.Sprintf("%#08x", uint32(h.handler)), "why", why)
		f.send(src, callHdr{kind: kindNotify, callID: h.callID}, nil, nil, nil)
	default:
		f.log.Warn("dsfabric: call refused", "from", src, "handler", fmt.Sprintf("%#08x", uint32(h.handler)), "why", why)
	}
}

// run executes a call on the current (worker or service) thread; c is the
// thread's own Call, filled in for the handler (a fresh one per call would
// escape to the heap through the handler).
func (f *Fabric) run(h callHdr, args, buf []byte, self ThreadID, c *Call) {
	src := f.names.Rank(ThreadID(h.src))
	if h.kind == kindBroadcast {
		src = int(h.dst)
	}
	fn := c.lastFn
	if fn == nil || c.lastID != h.handler {
		var ok bool
		if fn, ok = f.handlers.lookup(h.handler); !ok {
			if h.flags&(flagReply|flagNotify) == 0 {
				f.unknown.Add(1)
			}
			f.refuse(h, src, fmt.Sprintf("%v %#08x", ErrUnknownHandler, uint32(h.handler)))
			return
		}
		c.lastID, c.lastFn = h.handler, fn
	}
	c.Fabric, c.Src, c.Dst, c.Buffer = f, ThreadID(h.src), self, buf
	out, err := fn(c, args)
	c.Buffer = nil
	if h.flags&flagReply != 0 {
		rh := callHdr{kind: kindReply, callID: h.callID}
		if err != nil {
			rh.flags = flagError
			out = []byte(err.Error())
		}
		if e := f.send(src, rh, out, nil, nil); e != nil {
			f.log.Warn("dsfabric: sending a reply", "to", src, "err", e)
		}
	} else if err != nil {
		f.log.Warn("dsfabric: handler failed", "handler", fmt.Sprintf("%#08x", uint32(h.handler)), "err", err)
	}
	if h.flags&flagNotify != 0 {
		if e := f.send(src, callHdr{kind: kindNotify, callID: h.callID}, nil, nil, nil); e != nil {
			f.log.Warn("dsfabric: sending a notification", "to", src, "err", e)
		}
	}
}
