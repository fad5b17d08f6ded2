package riutils

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// sender is the sending half of a messenger: a ring of handles to chunks in
// the destination thread's memory.
type sender struct {
	m       *Messengers
	dst     dsfabric.ThreadID
	rank    int
	tx      *dtutils.Transmitter
	chunks  []alloc.Locator
	lastUse []uint64 // per slot: sequence number of its last fill (0: never)
	cur     int
	pos     int
	seq     uint64 // sequence number of the current chunk (from 1)
	fb      *atomic.Uint64
	fbLoc   alloc.Locator
	grew    bool // chunks were inserted after cur: the rotation must say so
	// Over shm and loop the current chunk is mapped here (MapRemote) and
	// calls are built in place: a one-sided write there is a store into
	// the destination's memory anyway, and building the record locally
	// first cost an allocator handout, a copy and the Transmitter's checks
	// per call. nil: write through tx.
	direct []byte
	rm     dtutils.RemoteMemory
	// The memory and counters of whoever drives the sender: its thread, or
	// the RetryAsync keeper while calls to dst are kept.
	ring *alloc.LinearCircular
	st   *Stats
}

// sender returns the messenger to dst, setting it up on first use.
func (m *Messengers) sender(dst dsfabric.ThreadID) (*sender, error) {
	if m.proc.Closed() {
		// Its memory (the feedback words, the chunks) is unmapped.
		return nil, errFabricClosed
	}
	if s := m.last; s != nil && s.dst == dst {
		return s, nil
	}
	if s, ok := m.out[dst]; ok {
		m.last = s
		return s, nil
	}
	return m.open(context.Background(), dst)
}

// Open sets up the messengers to dsts now instead of on the first call to
// each (DESIGN.md §6: "created on first use"): the allocation of their
// first chunks, a service call to the destination's process, and where the
// transport shares memory the mapping of the first chunk. Each costs a
// round trip to the destination's process, 0.5–4 ms measured on the 2-core
// development VM while a job starts, which the first call to a destination
// pays otherwise; a latency-sensitive job opens its destinations before
// its clock starts (mcts does). Destinations already set up are skipped;
// one that closed its messenger from this thread reports ErrClosed.
//
// When ctx ends during a round trip, Open returns its error but the
// allocation goes on: chunks given up half-way would stay allocated for
// this thread at the destination, which would then read them before the
// ones a second request got. The next Open of that destination, or the
// first call to it, takes the allocation over and waits only for what is
// left of it (a destination that is not yet bound answers within 30 s; a
// dead one ends the round trip with dsfabric.ErrRankDead). Like every use
// of m, Open runs on m's thread.
func (m *Messengers) Open(ctx context.Context, dsts ...dsfabric.ThreadID) error {
	if m.proc.Closed() {
		return errFabricClosed
	}
	for _, dst := range dsts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.closed[dst]; err != nil {
			return err
		}
		if _, ok := m.out[dst]; ok {
			continue
		}
		if _, err := m.open(ctx, dst); err != nil {
			return err
		}
	}
	return nil
}

// open sets up the messenger to dst, which has none yet, or finishes the
// set-up an earlier Open gave up waiting for. A ctx that cannot end (the
// first call's) waits on this goroutine; one that can waits on the
// allocation's own, so that it can stop waiting without abandoning it.
func (m *Messengers) open(ctx context.Context, dst dsfabric.ThreadID) (*sender, error) {
	po := m.opening[dst]
	if po == nil {
		s, err := m.newSender(dst)
		if err != nil {
			return nil, err
		}
		po = &pendingOpen{s: s, done: make(chan struct{})}
		k := m.p.cfg.ChunksPerAllocation
		if ctx.Done() == nil {
			po.locs, po.err = s.allocate(k)
			return m.opened(po)
		}
		go func() {
			po.locs, po.err = s.allocate(k)
			close(po.done)
		}()
	}
	select {
	case <-po.done:
	case <-ctx.Done():
		if m.opening == nil {
			m.opening = map[dsfabric.ThreadID]*pendingOpen{}
		}
		m.opening[dst] = po
		return nil, fmt.Errorf("riutils: setting up the messenger to thread %d (the allocation goes on; the next use of the thread takes it over): %w", dst, ctx.Err())
	}
	delete(m.opening, dst)
	return m.opened(po)
}

// pendingOpen is a messenger whose first allocation is under way; locs and
// err are set before done is closed.
type pendingOpen struct {
	s    *sender
	done chan struct{}
	locs []alloc.Locator
	err  error
}

// newSender makes the messenger to dst, before its first allocation.
func (m *Messengers) newSender(dst dsfabric.ThreadID) (*sender, error) {
	n := m.f.Names()
	if !n.Valid(dst) {
		return nil, fmt.Errorf("riutils: %w: thread %d", dsfabric.ErrBadThread, dst)
	}
	rank := n.Rank(dst)
	tx, err := m.f.Transmitter(rank)
	if err != nil {
		return nil, err
	}
	fbm, _ := m.fbReg.Memory(8*int(dst), 8)
	s := &sender{m: m, dst: dst, rank: rank, tx: tx, seq: 1, pos: recordsStart,
		fb: (*atomic.Uint64)(unsafe.Pointer(&fbm.Bytes()[0])), fbLoc: fbm.Locator(), ring: m.ring, st: &m.stats}
	// The word may hold the count and acknowledgement of an earlier,
	// shut-down messenger to dst, whose receiver writes nothing more: a
	// stale count would let this one refill chunks not yet consumed, and a
	// stale acknowledgement would end its own shutdown early. (Before the
	// allocation: the new receiver writes it only once it has the chunks.)
	s.fb.Store(0)
	return s, nil
}

// opened finishes the set-up of po's messenger once its allocation is
// back; a failed one leaves nothing set up, for the next use to retry.
func (m *Messengers) opened(po *pendingOpen) (*sender, error) {
	s := po.s
	if po.err != nil {
		return nil, fmt.Errorf("riutils: setting up the messenger to thread %d: %w", s.dst, po.err)
	}
	s.chunks = po.locs
	s.lastUse = make([]uint64, len(po.locs))
	s.mapChunk()
	m.out[s.dst] = s
	m.stats.Opened++
	return s, nil
}

// mapChunk maps the current chunk for building calls in place, where the
// transport shares memory; elsewhere, or if mapping fails (the Transmitter
// then reports why), calls go through tx.
func (s *sender) mapChunk() {
	s.direct, s.rm = nil, dtutils.RemoteMemory{}
	qp := s.tx.QueuePair()
	if s.m.p.cfg.NoMapping || !dtutils.CanMapRemote(qp) {
		return
	}
	if rm, err := dtutils.MapRemote(qp, s.chunks[s.cur]); err == nil {
		s.rm, s.direct = rm, rm.Bytes()
		if s.lastUse[s.cur] == 0 {
			// The chunk's first fill. The receiver populated it
			// (Process.chunks), but the transport mapped its region here
			// once, perhaps before this chunk was allocated: map its pages
			// now rather than fault on each. Best effort, as there.
			_, _ = alloc.MapResident(s.direct, len(s.direct))
		}
	}
}

// allocate asks the destination's process for k chunks (a service call: the
// destination thread takes no part).
func (s *sender) allocate(k int) ([]alloc.Locator, error) {
	cfg := s.m.p.cfg
	req := allocReq{src: s.m.self, dst: s.dst, count: k, size: cfg.ChunkSize, feedback: s.fbLoc}.marshal()
	out, err := s.m.f.CallServiceReturn(context.Background(), s.m.self, s.rank, s.m.p.allocID, req)
	if err != nil {
		return nil, err
	}
	return parseAllocReply(out, k, cfg.ChunkSize, uint32(s.rank))
}

// failed names the destination in a transport error, so that a caller
// learns which rank went away.
func (s *sender) failed(err error) error {
	return fmt.Errorf("riutils: writing to thread %d on rank %d: %w", s.dst, s.rank, err)
}

// free reports whether slot j may be filled: never used, or the receiver
// has consumed the fill that last used it.
func (s *sender) free(j int) bool { return s.lastUse[j] == 0 || s.fb.Load()&fbCount >= s.lastUse[j] }

// stuck reports, without side effects, that a record of size bytes would
// find no room: the current chunk is short of it, the next one is still
// unread and the ring is at MaxChunks. Ovfl asks it before every call while
// it keeps calls, so it must stay a few loads.
func (s *sender) stuck(size int) bool {
	return s.pos+size > s.m.p.cfg.ChunkSize && len(s.chunks) >= s.m.p.cfg.MaxChunks && !s.free((s.cur+1)%len(s.chunks))
}

// Call runs handler h with args on thread dst, one-sided: the call is
// written straight into dst's memory. It returns once written (queued on
// the transport); dst runs it when it polls.
func (m *Messengers) Call(dst dsfabric.ThreadID, h dsfabric.HandlerID, args []byte) error {
	return m.CallBuffer(dst, h, args, nil)
}

// CallBuffer is Call with a buffer written side by side with the call (the
// handler sees it as Call.Buffer).
func (m *Messengers) CallBuffer(dst dsfabric.ThreadID, h dsfabric.HandlerID, args, buf []byte) error {
	if len(m.closed) != 0 {
		if err := m.closed[dst]; err != nil {
			return err
		}
	}
	if err := m.checkSize(len(args) + len(buf)); err != nil {
		return err // before any setup: nothing is allocated for it
	}
	s, err := m.sender(dst) // the one map lookup of the hot path
	if err != nil {
		return err
	}
	if s.fb.Load()&fbRequest != 0 {
		// The receiver asked to close: finish the handshake, refuse the call.
		if err := m.Shutdown(context.Background(), dst); err != nil {
			return err
		}
		m.closed[dst] = fmt.Errorf("%w: thread %d closed its messenger from thread %d", ErrClosed, dst, m.self)
		return m.closed[dst]
	}
	if m.keeper != nil {
		return m.keeper.call(s, h, args, buf)
	}
	ok, err := m.callTo(s, h, args, buf, m.p.cfg.Policy)
	if !ok && err == nil {
		err = fmt.Errorf("%w: thread %d has not consumed %d chunks", ErrFull, dst, m.p.cfg.MaxChunks)
	}
	return err
}

// call builds the record in registered memory and writes it; with policy
// Fail a full messenger reports (false, nil) and writes nothing.
func (m *Messengers) call(dst dsfabric.ThreadID, h dsfabric.HandlerID, args, buf []byte, policy Policy) (bool, error) {
	if err := m.checkSize(len(args) + len(buf)); err != nil {
		return false, err
	}
	s, err := m.sender(dst)
	if err != nil {
		return false, err
	}
	if err := m.own(s); err != nil {
		return false, err
	}
	return m.callTo(s, h, args, buf, policy)
}

// checkSize refuses a call that no chunk can hold.
func (m *Messengers) checkSize(n int) error {
	if n > m.p.cfg.MaxPayload() {
		return fmt.Errorf("%w: %d bytes of arguments and buffer, at most %d in %d-byte chunks", ErrTooLarge, n, m.p.cfg.MaxPayload(), m.p.cfg.ChunkSize)
	}
	return nil
}

// callTo is call once the sender is known; the size was checked.
func (m *Messengers) callTo(s *sender, h dsfabric.HandlerID, args, buf []byte, policy Policy) (bool, error) {
	n := len(args) + len(buf)
	size := recordSize(n)
	if ok, err := s.reserve(size, policy); !ok || err != nil {
		return ok, err
	}
	if s.direct != nil {
		// RemoteMemory.Err here, not in a helper: one call less per call.
		if err := s.rm.Err(); err != nil {
			return false, s.failed(err)
		}
		b := s.direct[s.pos : s.pos+size : s.pos+size]
		sealRecord(b, h, m.self, len(args), copyBody(b, args, buf))
		s.advance(size)
		return true, nil
	}
	mem, err := m.alloc(s.tx, size)
	if err != nil {
		return false, err
	}
	b := mem.Bytes()
	sealRecord(b, h, m.self, len(args), copyBody(b, args, buf))
	return true, s.write(mem)
}

// reserve makes room for a record of size bytes in the current chunk,
// rotating if needed. With policy Fail, a full messenger gives (false, nil).
func (s *sender) reserve(size int, policy Policy) (bool, error) {
	if s.pos+size <= s.m.p.cfg.ChunkSize {
		return true, nil
	}
	err := s.rotate(policy)
	if errors.Is(err, ErrFull) {
		return false, nil
	}
	return err == nil, err
}

// write sends a complete record (reserved with reserve) to the current
// position.
func (s *sender) write(mem alloc.Memory) error {
	if s.direct != nil {
		// As the Transmitter's shm path would, without its checks per call.
		if err := s.rm.Err(); err != nil {
			return s.failed(err)
		}
		dtutils.Publish(s.direct[s.pos:s.pos+mem.Len()], mem.Bytes())
		mem.Done()
	} else {
		loc, _ := s.chunks[s.cur].Sub(uint64(s.pos), uint64(mem.Len()))
		if err := s.tx.Write(mem, loc); err != nil {
			return s.failed(err)
		}
	}
	s.advance(mem.Len())
	return nil
}

// advance moves past a record of size bytes just written.
func (s *sender) advance(size int) {
	s.pos += size
	s.st.Calls++
}

// rotate finishes the current chunk and moves to the next one, growing the
// ring or applying the policy when the next one is not consumed yet.
func (s *sender) rotate(policy Policy) error {
	cfg := s.m.p.cfg
	next := (s.cur + 1) % len(s.chunks)
	b := dtutils.Backoff{Idle: s.m.f.Process().Idle}
	waited := false
	for !s.free(next) {
		if len(s.chunks) < cfg.MaxChunks {
			locs, err := s.allocate(min(cfg.ChunksPerAllocation, cfg.MaxChunks-len(s.chunks)))
			if err != nil {
				return fmt.Errorf("riutils: growing the messenger to thread %d: %w", s.dst, err)
			}
			// Insert after the current chunk; the receiver, told by the grow
			// bit of this rotation, inserts its copies at the same place.
			s.chunks = append(s.chunks[:s.cur+1], append(locs, s.chunks[s.cur+1:]...)...)
			s.lastUse = append(s.lastUse[:s.cur+1], append(make([]uint64, len(locs)), s.lastUse[s.cur+1:]...)...)
			s.grew = true
			next = s.cur + 1
			s.st.Grows++
			break
		}
		if policy == Fail {
			// The bare sentinel: reserve turns it into false and each caller
			// words its own error, so formatting one here would only cost
			// an allocation per call while Ovfl keeps calls or RetryAsync
			// retries them.
			return ErrFull
		}
		if _, err := s.m.f.Transmitter(s.rank); err != nil {
			return err // the destination died
		}
		if hook := s.m.p.retryWaits.Load(); hook != nil && !waited {
			(*hook)()
		}
		waited = true
		if s.m.Poll() > 0 { // keep our own callers going while we wait
			b.Reset()
		} else {
			b.Wait()
		}
	}
	pw := uint64(s.pos) | prodRotate
	if s.grew {
		pw |= prodGrow
		s.grew = false
	}
	mem, err := allocFrom(s.ring, s.tx, 8)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(mem.Bytes(), pw)
	loc, _ := s.chunks[s.cur].Sub(offProducer, 8)
	if err := s.tx.Write(mem, loc); err != nil {
		return s.failed(err)
	}
	s.lastUse[s.cur] = s.seq
	s.seq++
	s.cur, s.pos = next, recordsStart
	s.mapChunk()
	s.st.Rotations++
	return nil
}

// Shutdown ends the messenger to dst: it tells the receiver, after the calls
// already written, and waits (running this thread's own calls meanwhile)
// until the receiver has run them and acknowledged. A later call to dst
// sets up a new messenger. Calls kept by RetryAsync or an Aggregator must be
// flushed first.
func (m *Messengers) Shutdown(ctx context.Context, dst dsfabric.ThreadID) error {
	s, ok := m.out[dst]
	if !ok {
		return nil
	}
	if m.proc.Closed() {
		return errFabricClosed
	}
	if n := m.keeper.kept(dst); n > 0 {
		return fmt.Errorf("%w: %d bytes for thread %d: Flush before Shutdown", ErrKept, n, dst)
	}
	if err := m.ownContext(ctx, s); err != nil {
		return err
	}
	mem, err := m.alloc(s.tx, 8)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(mem.Bytes(), uint64(s.pos)|prodShutdown)
	loc, _ := s.chunks[s.cur].Sub(offProducer, 8)
	if err := s.tx.Write(mem, loc); err != nil {
		return s.failed(err)
	}
	var b dtutils.Backoff
	for s.fb.Load()&fbAck == 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := m.f.Transmitter(s.rank); err != nil {
			return err
		}
		if m.Poll() > 0 {
			b.Reset()
		} else {
			b.Wait()
		}
	}
	delete(m.out, dst)
	if m.last == s {
		m.last = nil
	}
	return nil
}

// Broadcast runs h with args on every worker thread of the job, this one
// included, with one one-sided call each (cheap enough not to need the
// send-based tree).
func (m *Messengers) Broadcast(h dsfabric.HandlerID, args []byte) error {
	return m.BroadcastBuffer(h, args, nil)
}

// BroadcastBuffer is Broadcast with a buffer side by side.
func (m *Messengers) BroadcastBuffer(h dsfabric.HandlerID, args, buf []byte) error {
	for t := 0; t < m.f.Names().Threads(); t++ {
		if err := m.CallBuffer(dsfabric.ThreadID(t), h, args, buf); err != nil {
			return fmt.Errorf("riutils: broadcast to thread %d: %w", t, err)
		}
	}
	return nil
}
