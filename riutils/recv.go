package riutils

import (
	"encoding/binary"
	"fmt"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// receiver is the receiving half of a messenger: the ring of chunks one
// sender writes into, symmetric to the sender's ring of handles.
type receiver struct {
	m        *Messengers
	src      dsfabric.ThreadID
	in       *incoming
	chunks   [][]byte
	cur, pos int
	consumed uint64
	tx       *dtutils.Transmitter
	fbLoc    alloc.Locator
	err      error // protocol error: this messenger is stopped
	done     bool  // shut down: dropped at the next Poll
	request  uint64
	rec      record // the record being dispatched (parseRecord fills it)
	call     dsfabric.Call
	// The last handler run, to skip the concurrent map on a stream of
	// calls to one handler (handlers are never unregistered).
	lastID dsfabric.HandlerID
	lastFn dsfabric.HandlerFunc
}

// rxState is the receiving side of a thread's messengers.
type rxState struct {
	in      []*receiver
	ring    *alloc.LinearCircular // feedback words and replies being written
	stats   Stats                 // Received and UnknownHandlers
	polling bool                  // a poll is running: handlers must not poll again
}

// Poll runs the calls written to this thread, in each sender's order, and
// returns how many ran: at most one lap of each messenger's ring of chunks,
// so that a sender that keeps refilling cannot keep one Poll from
// returning. Handlers get a *dsfabric.Call valid only until they
// return. A Poll from inside a handler (directly, or by a call that waits
// for room) runs no calls: the records being run must stay where they are.
// With a Poller, the Poller runs the calls and Poll only drives the
// transports' progress. Over tcp that progress is where the calls and
// replies addressed to this process are read off the socket: a polling
// thread lands them itself (dtutils.Process.Progress).
func (m *Messengers) Poll() int {
	if m.proc.Closed() {
		return 0 // the incoming chunks are unmapped
	}
	m.proc.Progress()
	n := 0
	if !m.delegated {
		n = m.pollIn()
	}
	return n
}

// pollIn runs the calls of every incoming messenger.
func (m *Messengers) pollIn() int {
	rx := &m.rx
	if rx.polling {
		return 0
	}
	rx.polling = true
	defer func() { rx.polling = false }()
	if m.inbox.fresh.Swap(false) {
		m.inbox.senders.Range(func(src dsfabric.ThreadID, in *incoming) bool {
			in.mu.Lock()
			// An entry with no chunks yet is left for the scan that its
			// allocation's fresh flag brings.
			start := !in.taken && len(in.batches) > 0
			if start {
				in.taken = true
			}
			in.mu.Unlock()
			if start {
				m.addReceiver(src, in)
			}
			return true
		})
	}
	n := 0
	live := rx.in[:0]
	for _, r := range rx.in {
		n += r.poll()
		if !r.done {
			live = append(live, r)
		}
	}
	clear(rx.in[len(live):])
	rx.in = live
	return n
}

func (m *Messengers) addReceiver(src dsfabric.ThreadID, in *incoming) {
	r := &receiver{m: m, src: src, in: in, pos: recordsStart, fbLoc: in.fb}
	r.chunks = in.take()
	tx, err := m.f.Transmitter(m.f.Names().Rank(src))
	r.tx = tx
	switch {
	case err != nil:
		r.stop(err)
	case r.chunks == nil:
		r.stop(fmt.Errorf("%w: no chunks allocated", ErrProtocol))
	}
	m.rx.in = append(m.rx.in, r)
}

// Err returns the first protocol error of any incoming messenger: each one
// with an error is stopped, the others keep running. With a Poller, ask the
// Poller.
func (m *Messengers) Err() error {
	for _, r := range m.rx.in {
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

func (r *receiver) stop(err error) {
	r.err = fmt.Errorf("riutils: messenger from thread %d stopped: %w", r.src, err)
	r.m.p.log.Error("riutils: protocol error", "from", r.src, "to", r.m.self, "err", err)
}

func (r *receiver) poll() int {
	if r.err != nil {
		return 0
	}
	n, finished := 0, 0
	for {
		c := r.chunks[r.cur]
		rec := &r.rec
		st, err := parseRecord(c, r.pos, rec)
		switch st {
		case recOK:
			if rec.src != r.src {
				r.stop(fmt.Errorf("%w: record from thread %d in thread %d's chunk", ErrProtocol, rec.src, r.src))
				return n
			}
			if err := r.dispatch(rec); err != nil {
				r.stop(err)
				return n
			}
			r.pos += rec.size
			n++
			continue
		case recCorrupt:
			r.stop(err)
			return n
		}
		pw := word(c, offProducer).Load()
		if pw&prodShutdown != 0 && int(pw&prodOffsetMax) == r.pos {
			if err := r.shutdown(); err != nil {
				r.stop(err)
			}
			return n
		}
		if pw&prodRotate == 0 || int(pw&prodOffsetMax) != r.pos {
			if pw&prodRotate != 0 && int(pw&prodOffsetMax) < r.pos {
				r.stop(fmt.Errorf("%w: chunk finished at %d, records read to %d", ErrProtocol, pw&prodOffsetMax, r.pos))
			}
			return n
		}
		if err := r.finish(pw); err != nil {
			r.stop(err)
			return n
		}
		// One lap of the ring per poll: the feedback just given lets the
		// sender refill, and a sender as fast as this loop would otherwise
		// keep it from returning, starving the thread's other messengers
		// and its own work.
		if finished++; finished >= len(r.chunks) {
			return n
		}
	}
}

func (r *receiver) dispatch(rec *record) error {
	if rec.handler == batchHandler {
		for b := rec.args; len(b) > 0; {
			if len(b) >= innerHeader && binary.LittleEndian.Uint32(b[4:])&innerRun != 0 {
				n, err := r.runRun(rec.src, b)
				if err != nil {
					return err
				}
				b = b[n:]
				continue
			}
			h, args, buf, size, err := nextInner(b)
			if err != nil {
				return err
			}
			if h == extHandler {
				if err := r.extended(args, buf); err != nil {
					return err
				}
			} else if _, err := r.run(h, rec.src, args, buf); err != nil {
				r.m.p.log.Warn("riutils: handler failed", "handler", fmt.Sprintf("%#08x", uint32(h)), "err", err)
			}
			b = b[size:]
		}
		return nil
	}
	if rec.handler == returnHandler {
		return r.answer(rec.args)
	}
	if rec.handler == extHandler {
		return r.extended(rec.args, rec.buf)
	}
	if _, err := r.run(rec.handler, rec.src, rec.args, rec.buf); err != nil {
		r.m.p.log.Warn("riutils: handler failed", "handler", fmt.Sprintf("%#08x", uint32(rec.handler)), "err", err)
	}
	return nil
}

// runRun runs the run of calls at the start of b (docs/wire.md, "Batch")
// and returns its size. The handler is looked up once for the run, and a
// run to an unknown handler is counted and reported once, not per call.
func (r *receiver) runRun(src dsfabric.ThreadID, b []byte) (int, error) {
	h, args, na, stride, count, size, err := nextRun(b)
	if err != nil {
		return 0, err
	}
	if h == extHandler { // an extension record is never put in a run
		return 0, fmt.Errorf("%w: a run of extension records", ErrProtocol)
	}
	m := r.m
	fn, ok := r.handler(h)
	m.rx.stats.Received += int64(count)
	if !ok {
		m.rx.stats.UnknownHandlers += int64(count)
		m.p.log.Warn("riutils: calls to an unknown handler", "from", src, "handler", fmt.Sprintf("%#08x", uint32(h)), "calls", count)
		return size, nil
	}
	for i := 0; i < count; i++ {
		if _, err := fn(r.callFor(src, nil), args[i*stride:i*stride+na:i*stride+na]); err != nil {
			m.p.log.Warn("riutils: handler failed", "handler", fmt.Sprintf("%#08x", uint32(h)), "err", err)
		}
	}
	return size, nil
}

// handler returns h's function; the last one found is kept at hand.
func (r *receiver) handler(h dsfabric.HandlerID) (dsfabric.HandlerFunc, bool) {
	if r.lastFn != nil && r.lastID == h {
		return r.lastFn, true
	}
	fn, ok := r.m.p.handlers.Lookup(h)
	if ok {
		r.lastID, r.lastFn = h, fn
	}
	return fn, ok
}

// run runs handler h for src and returns its result and error.
func (r *receiver) run(h dsfabric.HandlerID, src dsfabric.ThreadID, args, buf []byte) ([]byte, error) {
	m := r.m
	fn, ok := r.handler(h)
	m.rx.stats.Received++
	if !ok {
		m.rx.stats.UnknownHandlers++
		m.p.log.Warn("riutils: call to an unknown handler", "from", src, "handler", fmt.Sprintf("%#08x", uint32(h)))
		return nil, fmt.Errorf("%w %#08x", dsfabric.ErrUnknownHandler, uint32(h))
	}
	return fn(r.callFor(src, buf), args)
}

// callFor fills the receiver's Call for a call from src with buffer buf.
func (r *receiver) callFor(src dsfabric.ThreadID, buf []byte) *dsfabric.Call {
	m := r.m
	// Field by field: a composite literal is built on the stack and then
	// copied in with 16-byte moves, and that copy stalled (a quarter of the
	// receiver's profile at 8-byte trad calls).
	c := &r.call
	c.Fabric, c.Src, c.Dst, c.Buffer = m.f, src, m.self, buf
	if len(buf) == 0 {
		c.Buffer = nil
	}
	return c
}

// finish zeroes the consumed chunk, tells the sender (pushed feedback: the
// sender never reads our memory) and moves to the next chunk, first taking
// in new chunks when the sender grew the ring here.
func (r *receiver) finish(pw uint64) error {
	c := r.chunks[r.cur]
	clear(c[recordsStart:r.pos])
	word(c, offProducer).Store(0)
	word(c, offConsumer).Store(uint64(r.pos))
	r.consumed++
	if err := r.feedback(r.consumed | r.request); err != nil {
		return err
	}
	if pw&prodGrow != 0 {
		batch := r.in.take()
		if batch == nil {
			return fmt.Errorf("%w: the sender grew the ring but no chunks were allocated", ErrProtocol)
		}
		r.chunks = append(r.chunks[:r.cur+1], append(batch, r.chunks[r.cur+1:]...)...)
	}
	r.cur = (r.cur + 1) % len(r.chunks)
	r.pos = recordsStart
	if r.m.afterFinish != nil {
		r.m.afterFinish(r)
	}
	return nil
}

// feedback writes v into the sender's feedback word.
func (r *receiver) feedback(v uint64) error {
	mem, err := allocFrom(r.m.rx.ring, r.tx, 8)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(mem.Bytes(), v)
	return r.tx.Write(mem, r.fbLoc)
}

// shutdown ends this messenger after the sender's last record: the inbox
// forgets the sender (a later call sets up a new messenger), then the sender
// gets its acknowledgement. The sender writes nothing after the shutdown
// word, so the chunks (and any allocated for a growth that never came) go
// back to the process for the next messenger.
func (r *receiver) shutdown() error {
	r.m.inbox.senders.Delete(r.src)
	r.done = true
	// Release before acknowledging: the sender's next messenger may ask
	// for chunks as soon as it has the acknowledgement.
	for b := r.in.take(); b != nil; b = r.in.take() {
		r.chunks = append(r.chunks, b...)
	}
	r.m.p.release(r.chunks)
	r.chunks = nil
	return r.feedback(r.consumed | r.request | fbAck)
}

// RequestShutdown asks thread src to shut its messenger to this thread
// down: its next call to this thread completes the handshake and fails with
// ErrClosed, as do later ones.
func (m *Messengers) RequestShutdown(src dsfabric.ThreadID) error {
	for _, r := range m.rx.in {
		if r.src == src && !r.done {
			r.request = fbRequest
			return r.feedback(r.consumed | fbRequest)
		}
	}
	return fmt.Errorf("%w from thread %d to thread %d", ErrNoMessenger, src, m.self)
}
