package dsfabric

import (
	"context"
	"fmt"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// rnrTimeout bounds how long a send retries while the destination has no
// receive buffer posted (its service threads are busy).
const rnrTimeout = 10 * time.Second

// rnrHot is how long a send whose receiver has no buffer retries without
// sleeping.
const rnrHot = 2 * time.Millisecond

// send builds a message in the peer's send buffer and transmits it; pre is
// a one-sided write posted first on the same queue pair (CallBufferWrite),
// which completes before the message is seen.
func (f *Fabric) send(rank int, h callHdr, args, tail []byte, pre *dtutils.WorkRequest) error {
	if rank < 0 || rank >= f.names.Size {
		return fmt.Errorf("%w: rank %d of %d", ErrBadThread, rank, f.names.Size)
	}
	if err := f.deadErr(rank); err != nil {
		return err
	}
	if f.ctx.Err() != nil {
		return ErrClosed
	}
	n := callHeader + len(args) + len(tail)
	if n > f.cfg.MaxMessage {
		return fmt.Errorf("%w: %d bytes (header %d + arguments %d + buffer %d) > MaxMessage %d", ErrTooLarge, n, callHeader, len(args), len(tail), f.cfg.MaxMessage)
	}
	h.args, h.buf = uint32(len(args)), uint32(len(tail))
	p := f.peers[rank]
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.buf.Bytes()
	h.put(b)
	copy(b[callHeader:], args)
	copy(b[callHeader+len(args):], tail)
	msg, _ := p.buf.Slice(0, n)
	deadline := time.Now().Add(rnrTimeout)
	backoff := dtutils.HotWait{Yield: rnrHot}
	for {
		if pre != nil {
			if err := p.qp.Post(*pre); err != nil {
				return f.lost(rank, err)
			}
		}
		if err := p.qp.Post(dtutils.WorkRequest{Op: dtutils.OpSend, WRID: 1, Signaled: true, Local: msg}); err != nil {
			return f.lost(rank, err)
		}
		st, err := f.awaitSend(p)
		if err != nil {
			return err
		}
		switch st {
		case dtutils.StatusSuccess:
			return nil
		case dtutils.StatusReceiverNotReady:
			if time.Now().After(deadline) {
				return fmt.Errorf("dsfabric: rank %d posted no receive buffer for %v: %w", rank, rnrTimeout, dtutils.ErrReceiverNotReady)
			}
			// The receiver reposts within microseconds when it is merely
			// behind: yield rather than sleep on a timer (about a
			// millisecond here) until rnrHot has passed.
			backoff.Wait()
		case dtutils.StatusConnectionLost:
			return f.lost(rank, dtutils.ErrConnectionLost)
		default:
			return fmt.Errorf("dsfabric: sending to rank %d: %w", rank, st.Err())
		}
	}
}

// awaitSend waits for the completion of the message (WRID 1), returning
// the first failure among what completed before it.
func (f *Fabric) awaitSend(p *peer) (dtutils.Status, error) {
	first := dtutils.StatusSuccess
	for {
		n, err := p.qp.CQ().Wait(f.ctx, p.cs[:])
		if err != nil {
			return 0, ErrClosed
		}
		for _, c := range p.cs[:n] {
			if c.Status != dtutils.StatusSuccess && first == dtutils.StatusSuccess {
				first = c.Status
			}
			if c.WRID == 1 && c.Op == dtutils.OpSend {
				if first == dtutils.StatusSuccess {
					first = c.Status
				}
				return first, nil
			}
		}
	}
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

// syncFlags prepares a call's notification.
func (f *Fabric) syncFlags(s *Synchronizer, h *callHdr) {
	if s != nil && s.mode == Executed {
		h.flags |= flagNotify
		h.callID = f.register(s)
	}
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
	f.syncFlags(s, &hd)
	return transmitted(s, f.send(rank, hd, args, nil, nil))
}

// CallService runs h with args on a service thread of process rank.
func (f *Fabric) CallService(src ThreadID, rank int, h HandlerID, args []byte, s *Synchronizer) error {
	hd := callHdr{kind: kindCall, flags: flagService, handler: h, src: uint32(src), dst: uint32(rank * f.names.ThreadsPerProcess)}
	f.syncFlags(s, &hd)
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
	f.syncFlags(s, &hd)
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
	f.syncFlags(s, &hd)
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
	f.syncFlags(s, &hd)
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
	select {
	case r := <-pc.ch:
		return r.data, r.err
	case <-ctx.Done():
		f.pending.Delete(hd.callID)
		return nil, ctx.Err()
	case <-f.ctx.Done():
		return nil, ErrClosed
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
	f.syncFlags(s, &hd)
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

// dispatch handles one received message (in a service thread).
func (f *Fabric) dispatch(msg []byte, src int) {
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
		}
	case kindNotify:
		if s, ok := f.syncs.Load(h.callID); ok {
			s.Done()
		}
	case kindBroadcast:
		root := int(h.dst)
		for _, c := range treeChildren(f.rank, root, f.names.Size) {
			if err := f.send(c, h, args, tail, nil); err != nil {
				f.log.Warn("dsfabric: forwarding a broadcast", "to", c, "err", err)
			}
		}
		for _, w := range f.workers {
			w.push(queued{h: h, args: clone(args), buf: clone(tail)})
		}
	case kindCall:
		var buf []byte
		switch {
		case h.flags&flagDestBuf != 0:
			var dest alloc.Locator
			if err := dest.UnmarshalBinary(tail); err == nil {
				buf, err = f.proc.Registry().Resolve(dest)
			}
			if err != nil {
				f.refuse(h, src, fmt.Sprintf("destination buffer: %v", err))
				return
			}
		case h.flags&flagReadBuf != 0:
			var orig, dest alloc.Locator
			err := orig.UnmarshalBinary(tail[:locSize])
			if err == nil {
				err = dest.UnmarshalBinary(tail[locSize:])
			}
			if err == nil {
				buf, err = f.readBuffer(src, orig, dest)
			}
			if err != nil {
				f.refuse(h, src, fmt.Sprintf("reading the buffer: %v", err))
				return
			}
		case len(tail) > 0:
			buf = tail
		}
		if h.flags&flagService != 0 {
			f.run(h, args, buf, ThreadID(h.dst))
			return
		}
		if !f.names.Valid(ThreadID(h.dst)) || f.names.Rank(ThreadID(h.dst)) != f.rank {
			f.refuse(h, src, fmt.Sprintf("thread %d is not in rank %d", h.dst, f.rank))
			return
		}
		w := f.workers[f.names.ThreadRank(ThreadID(h.dst))]
		if h.flags&(flagDestBuf|flagReadBuf) == 0 {
			buf = clone(buf) // it lives in the receive buffer, reposted next
		}
		w.push(queued{h: h, args: clone(args), buf: buf})
	}
}

// clone copies b (nil stays nil): worker calls outlive the receive buffer.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
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
	p := f.peers[src]
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.qp.Post(dtutils.WorkRequest{Op: dtutils.OpRead, WRID: 2, Signaled: true, Local: local, Remote: orig}); err != nil {
		return nil, f.lost(src, err)
	}
	for {
		n, err := p.qp.CQ().Wait(f.ctx, p.cs[:])
		if err != nil {
			return nil, ErrClosed
		}
		for _, c := range p.cs[:n] {
			if c.Status != dtutils.StatusSuccess {
				return nil, fmt.Errorf("dsfabric: reading from rank %d: %w", src, c.Status.Err())
			}
			if c.WRID == 2 {
				return buf, nil
			}
		}
	}
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

// run executes a call on the current (worker or service) thread.
func (f *Fabric) run(h callHdr, args, buf []byte, self ThreadID) {
	src := f.names.Rank(ThreadID(h.src))
	if h.kind == kindBroadcast {
		src = int(h.dst)
	}
	fn, ok := f.handlers.lookup(h.handler)
	if !ok {
		if h.flags&(flagReply|flagNotify) == 0 {
			f.unknown.Add(1)
		}
		f.refuse(h, src, fmt.Sprintf("%v %#08x", ErrUnknownHandler, uint32(h.handler)))
		return
	}
	c := Call{Fabric: f, Src: ThreadID(h.src), Dst: self, Buffer: buf}
	out, err := fn(&c, args)
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
