package shuffle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// probeEvery is how often a waiting endpoint checks that its peers live
// (a Nop on each connection it waits on).
const probeEvery = 20 * time.Millisecond

// WRIDs of the operations an endpoint posts.
const (
	wridData = iota + 1
	wridHeader
	wridCredit
	wridRead
	wridProbe
)

// conn is a queue pair and the completions polled from it, shared by
// every link attached to it (Share: the endpoints of several stages over
// one connection, seed 000). Whoever drains it counts each completion for
// the link whose id its WRID carries (id<<8 | the kind below).
type conn struct {
	qp    dtutils.QueuePair
	mu    sync.Mutex // serialises posting and polling
	cq    [16]dtutils.Completion
	links []*link
	err   atomic.Pointer[error] // the first failure: the connection is lost
}

// link is what an endpoint keeps of its connection to one peer endpoint:
// the shared queue pair and the completions counted for it.
type link struct {
	c    *conn
	id   uint64
	qp   dtutils.QueuePair // nil until attached
	peer uint32
	// reads counts RD reads completed (the receiver waits for its own).
	reads atomic.Uint64
	// credits counts credit writes (SR: sends) completed.
	credits atomic.Uint64
	probing atomic.Bool
}

// attach joins l to qp's connection (shared when qp came from Share).
func (l *link) attach(qp dtutils.QueuePair) {
	c, ok := qp.(*sharedQP)
	if !ok {
		c = Share(qp).(*sharedQP) // a connection of its own
	}
	c.c.mu.Lock()
	l.id = uint64(len(c.c.links))
	c.c.links = append(c.c.links, l)
	c.c.mu.Unlock()
	l.c, l.qp, l.peer = c.c, qp, qp.PeerRank()
}

// premap maps the peer's region holding loc into this process now, at
// OPEN, where the transport shares memory: the stream's first one-sided
// operation on it would otherwise ask the peer's process for it (a round
// trip through its unix socket, 0.2–7 ms on the development VM, several
// in turn at a stage's start and end). Best effort: an error is the first
// operation's to report, as without it.
func (l *link) premap(loc alloc.Locator) {
	if loc.Length > 0 && dtutils.CanMapRemote(l.c.qp) {
		_, _ = dtutils.MapRemote(l.c.qp, loc)
	}
}

// failed returns the connection's failure, nil while it works.
func (l *link) failed() error {
	if e := l.c.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (c *conn) fail(err error) {
	c.err.CompareAndSwap(nil, &err)
}

// drain polls the connection's completions, counting each for its link
// and recording failures.
func (l *link) drain() {
	c := l.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		n := c.qp.CQ().Poll(c.cq[:])
		for _, x := range c.cq[:n] {
			if x.Status != dtutils.StatusSuccess {
				if id := x.WRID >> 8; x.WRID&0xff == wridRead && id < uint64(len(c.links)) {
					// A read that failed is over too: nothing lands in its
					// buffer now, which Close waits for.
					c.links[id].reads.Add(1)
				}
				if x.Status == dtutils.StatusRemoteAccess && x.WRID&0xff == wridRead {
					// The sender's descriptor named memory it does not offer:
					// its fault, not the transport's, though the queue pair
					// is done for (verbs semantics).
					c.fail(fmt.Errorf("%w: process %d sent a descriptor its memory refused: %w (%w)", ErrBadBuffer, l.peer, x.Err(), ErrPeerLost))
					continue
				}
				c.fail(fmt.Errorf("%w: process %d: %v: %w", ErrPeerLost, l.peer, x.Op, x.Err()))
				continue
			}
			id := x.WRID >> 8
			if id >= uint64(len(c.links)) {
				continue
			}
			o := c.links[id]
			switch x.WRID & 0xff {
			case wridRead:
				o.reads.Add(1)
			case wridCredit:
				o.credits.Add(1)
			case wridProbe:
				o.probing.Store(false)
			}
		}
		if n < len(c.cq) {
			return
		}
	}
}

// post posts wr for l (its id in the WRID), recording a failure to post
// as the connection's.
func (l *link) post(wr dtutils.WorkRequest) error {
	if err := l.failed(); err != nil {
		return err
	}
	wr.WRID |= l.id << 8
	l.c.mu.Lock()
	err := l.c.qp.Post(wr)
	l.c.mu.Unlock()
	if err != nil {
		return l.lost(err)
	}
	return l.failed()
}

// lost records err, a failure of the connection itself, as the
// connection's (ErrPeerLost) and returns the connection's failure.
func (l *link) lost(err error) error {
	l.c.fail(fmt.Errorf("%w: process %d: %w", ErrPeerLost, l.peer, err))
	return l.failed()
}

// probe checks that the peer lives: a Nop whose failure drain records.
func (l *link) probe() {
	if l.failed() == nil && !l.probing.Swap(true) {
		l.post(dtutils.WorkRequest{Op: dtutils.OpNop, WRID: wridProbe, Signaled: true})
	}
	l.drain()
}

// sharedQP is a queue pair from Share.
type sharedQP struct {
	dtutils.QueuePair
	c *conn
}

// Share wraps qp so that the endpoints of several stages attach to it
// (seed 000's multiplexing: one connection per pair of processes for
// every shuffle of a plan, each stage with its own rings, credits and
// end of stream). Their operations go in order on the one connection,
// and whichever endpoint polls its completions counts each for the
// endpoint that posted it. Connect qp before attaching; attach endpoints
// to the wrapper only, and do not post or poll on qp yourself.
func Share(qp dtutils.QueuePair) dtutils.QueuePair {
	return &sharedQP{QueuePair: qp, c: &conn{qp: qp}}
}

// waiter is the loop of an endpoint waiting for its peers: it drives the
// transport's progress, polls for hotSpin and yields until hotYield (a
// buffer or a credit is usually microseconds away while a shuffle runs,
// and a timer sleep costs a millisecond), then backs off to sleeping; it
// probes the links it waits on every probeEvery. Measured with mctsbench
// shuffle repartition, 2 processes on 2 cores, 512 MiB each: sleeping at
// once 0.44–0.67 GB/s per process, 20 µs/2 ms 0.53–0.57 (the spinning
// waiters starve the producers), 2 µs/100 µs 0.92–1.14.
type waiter struct {
	hw        dtutils.HotWait
	lastProbe time.Time
}

const (
	hotSpin  = 2 * time.Microsecond
	hotYield = 100 * time.Microsecond
)

// wait waits one round; probe says the links waited on are due a check
// (the caller probes them, under its own lock).
func (w *waiter) wait(ctx context.Context, proc *dtutils.Process) (probe bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := procClosed(proc); err != nil {
		return false, err
	}
	proc.Progress()
	if w.lastProbe.IsZero() {
		w.lastProbe = time.Now()
	} else if time.Since(w.lastProbe) >= probeEvery {
		w.lastProbe, probe = time.Now(), true
	}
	w.hw.Spin, w.hw.Yield, w.hw.Idle = hotSpin, hotYield, proc.Idle
	w.hw.Wait()
	return probe, nil
}

// procClosed is the error of an endpoint whose process was closed under it:
// its memory stays mapped (the endpoint holds it, Process.Hold), but the
// queue pairs and the peers' memory are gone.
func procClosed(proc *dtutils.Process) error {
	if proc.Closed() {
		return fmt.Errorf("%w: its process was closed (%w)", ErrClosed, dtutils.ErrClosed)
	}
	return nil
}

// Sender is a SEND endpoint (seed 004, §4.2): it hands out registered
// buffers (Acquire) and transmits each to one or more receivers (PutData);
// a receiver's credit (its count of buffers consumed) bounds the buffers
// in flight to it at Depth. Safe for concurrent use: threads may share one
// (the single-endpoint configuration) or have one each (multi-endpoint).
type Sender struct {
	proc     *dtutils.Process
	release  func() // the hold on proc's memory (Process.Hold)
	released bool   // Close has given the memory back
	cfg      Config
	region   *alloc.Region
	grown    []*alloc.Region // buffers added when the users held every one
	mu       sync.Mutex
	conns    []*sendConn
	bufs     []alloc.Memory // transmission buffers
	refs     []int          // per buffer: connections still holding it
	free     []int
	users    int  // operators not yet closed
	unopened int  // operators not yet started
	done     bool // Depleted sent
	// SR: the receive buffers credit messages land in, Depth per
	// destination (each Release may send one).
	creditBufs alloc.Memory
	cq         [16]dtutils.Completion
}

type sendConn struct {
	link
	ring     alloc.Locator  // the receiver's ring
	credit   *atomic.Uint64 // written by the receiver
	creditAt alloc.Locator
	hdrs     alloc.Memory // Depth header (or RD descriptor) sources
	sent     uint64
	held     []held // buffers sent and not yet consumed, in order
	index    int    // SR: this sender's source index at the receiver
}

type held struct {
	seq uint64
	buf int
}

// OutBuffer is a transmission buffer from Acquire: append records to Data
// (AppendRecord), then hand it to PutData.
type OutBuffer struct {
	Data []byte // len: the bytes to send; cap: BufferBytes
	idx  int
	// from is the Sender that handed the buffer out, until PutData or
	// Discard gives it back: a buffer given back twice would be handed
	// out twice.
	from *Sender
}

// NewSender makes a SEND endpoint of proc for dests connections (Attach
// each), with Depth buffers per connection, shared by users SHUFFLE
// operators (the threads of a single-endpoint configuration; 1 for a
// thread's own endpoint): the last of them to close sends Depleted.
func NewSender(proc *dtutils.Process, cfg Config, dests, users int) (*Sender, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if dests < 1 || dests > 1<<16 || users < 1 {
		return nil, fmt.Errorf("%w: %d destinations (want 1…65536), %d users (want ≥ 1)", ErrBadConfig, dests, users)
	}
	nb := cfg.Depth*dests + 1
	hdrBytes := 64 + cfg.Depth*rdSlotBytes // the credit word's line, then the header sources
	credits := 0
	if cfg.Design == SR {
		credits = dests * cfg.Depth
		if err := srSlots(proc, credits); err != nil {
			return nil, err
		}
	}
	s := &Sender{proc: proc, cfg: cfg, users: users, unopened: users}
	release, err := dtutils.HoldFor(proc, s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	// Populated, as OPEN registers its buffers in seed 004 §4.2 (an RDMA
	// registration pins them): a stream's first lap through them would
	// otherwise fault a page per 4 KiB, 10–20 % of a short query's time
	// on a VM (perf of shuffle join at 500 000 orders).
	r, err := proc.Registry().NewRegion(nb*cfg.BufferBytes+dests*hdrBytes+credits*creditBytes, alloc.RegionConfig{Name: "shuffle-send", Populate: true})
	if err != nil {
		release()
		return nil, fmt.Errorf("shuffle: send buffers: %w", err)
	}
	s.release, s.region = release, r
	for i := 0; i < nb; i++ {
		m, _ := r.Memory(i*cfg.BufferBytes, cfg.BufferBytes)
		s.bufs = append(s.bufs, m)
		s.refs = append(s.refs, 0)
		s.free = append(s.free, i)
	}
	for d := 0; d < dests; d++ {
		at := nb*cfg.BufferBytes + d*hdrBytes
		c := &sendConn{credit: (*atomic.Uint64)(unsafe.Pointer(&r.Bytes()[at]))}
		c.creditAt, _ = r.Locator(at, 8)
		c.hdrs, _ = r.Memory(at+64, cfg.Depth*rdSlotBytes)
		s.conns = append(s.conns, c)
	}
	if credits > 0 {
		s.creditBufs, _ = r.Memory(nb*cfg.BufferBytes+dests*hdrBytes, credits*creditBytes)
		for i := 0; i < credits; i++ {
			if err := s.postCredit(i); err != nil {
				proc.Registry().Release(r)
				release()
				return nil, err
			}
		}
	}
	return s, nil
}

// Attach wires destination d to a receiver: qp is connected to the
// receiver's queue pair for this sender, offer is what the receiver's
// Offer gave for it. It returns what the receiver's Attach needs.
func (s *Sender) Attach(d int, qp dtutils.QueuePair, offer []byte) ([]byte, error) {
	o, err := parseOffer(offer, s.cfg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d < 0 || d >= len(s.conns) || s.conns[d].qp != nil {
		return nil, fmt.Errorf("%w: destination %d of %d, or attached twice", ErrBadConfig, d, len(s.conns))
	}
	want := uint64(s.cfg.Depth * s.slotBytes())
	if o.loc.Length != want || o.loc.Process != qp.PeerRank() || o.window < 1 {
		return nil, fmt.Errorf("%w: ring of %d bytes in process %d and window %d, want %d bytes in %d and a window", ErrBadOffer, o.loc.Length, o.loc.Process, o.window, want, qp.PeerRank())
	}
	c := s.conns[d]
	c.attach(qp)
	c.ring, c.index = o.loc, o.index
	c.premap(c.ring) // WR's buffers, RD's descriptors (SR has no ring)
	c.credit.Store(packCredit(0, o.window))
	return marshalOffer(s.cfg, c.creditAt, 0, d), nil
}

func marshalOffer(cfg Config, loc alloc.Locator, window, index int) []byte {
	return offer{design: cfg.Design, depth: cfg.Depth, bytes: cfg.BufferBytes, window: window, index: index, loc: loc}.marshal()
}

// limit returns the count of buffers the receiver consumed and the highest
// sequence number c may send: consumed + window, the window clamped to
// the ring's depth (a larger one would overwrite unconsumed slots).
func (c *sendConn) limit(depth int) (consumed, limit uint64) {
	consumed, limit = unpackCredit(c.credit.Load())
	return consumed, min(limit, consumed+uint64(depth))
}

func (s *Sender) slotBytes() int { return slotBytes(s.cfg) }

func slotBytes(cfg Config) int {
	switch cfg.Design {
	case RD:
		return rdSlotBytes
	case SR:
		return 0 // no ring: the receive buffers are posted
	}
	return cfg.BufferBytes + 64
}

// Dests returns the number of destinations.
func (s *Sender) Dests() int { return len(s.conns) }

// Acquire returns a free transmission buffer, waiting (back-pressure) while
// every buffer is in flight.
func (s *Sender) Acquire(ctx context.Context) (*OutBuffer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w waiter
	for {
		if s.done {
			return nil, ErrClosed
		}
		if err := procClosed(s.proc); err != nil {
			return nil, err
		}
		// Only with no buffer free: retiring polls the completion queue,
		// which over tcp drives the transport (a read of the socket) once
		// per buffer. Buffers and credits come back at the next retire
		// (here, or where PutData waits for the window), and whatever polls
		// the process meanwhile writes out what was posted.
		if len(s.free) == 0 {
			s.retire()
		}
		if n := len(s.free); n > 0 {
			i := s.free[n-1]
			s.free = s.free[:n-1]
			return &OutBuffer{Data: s.bufs[i].Bytes()[:0], idx: i, from: s}, nil
		}
		if !s.inFlight() {
			// Every buffer sits in the users' output buffers (many threads,
			// many groups): none will come back, so waiting would never end.
			if err := s.grow(); err != nil {
				return nil, err
			}
			continue
		}
		if err := s.waitLocked(ctx, &w, nil); err != nil {
			return nil, err
		}
	}
}

// inFlight reports whether any buffer is sent and not yet consumed; mu is
// held.
func (s *Sender) inFlight() bool {
	for _, c := range s.conns {
		if len(c.held) > 0 {
			return true
		}
	}
	return false
}

// grow adds Depth buffers to the pool, in a region of their own; mu is held.
func (s *Sender) grow() error {
	// Not populated: this runs under mu, in the middle of a stream, where
	// faulting the pages in at once would stall every thread of the
	// endpoint; they fault in one by one as buffers are first filled.
	r, err := s.proc.Registry().NewRegion(s.cfg.Depth*s.cfg.BufferBytes, alloc.RegionConfig{Name: "shuffle-send"})
	if err != nil {
		return fmt.Errorf("shuffle: more send buffers: %w", err)
	}
	s.grown = append(s.grown, r)
	for i := 0; i < s.cfg.Depth; i++ {
		m, _ := r.Memory(i*s.cfg.BufferBytes, s.cfg.BufferBytes)
		s.free = append(s.free, len(s.bufs))
		s.bufs, s.refs = append(s.bufs, m), append(s.refs, 0)
	}
	return nil
}

// waitLocked waits a round with mu released, then probes, when due, the
// connection it waits on (every one when only is nil); mu is held.
func (s *Sender) waitLocked(ctx context.Context, w *waiter, only *sendConn) error {
	s.mu.Unlock()
	probe, err := w.wait(ctx, s.proc)
	s.mu.Lock()
	if err != nil || !probe {
		return err
	}
	for _, c := range s.conns {
		if c.qp != nil && (only == nil || c == only) {
			c.probe()
			if err := c.failed(); err != nil {
				return err
			}
		}
	}
	return nil
}

// retire frees the buffers every holder has consumed; mu is held.
func (s *Sender) retire() {
	if s.cfg.Design == SR {
		s.pollCredits()
	}
	for _, c := range s.conns {
		if c.qp == nil {
			continue
		}
		c.drain()
		got, _ := c.limit(s.cfg.Depth)
		k := 0
		for ; k < len(c.held) && c.held[k].seq <= got; k++ {
			b := c.held[k].buf
			if s.refs[b]--; s.refs[b] == 0 {
				s.free = append(s.free, b)
			}
		}
		c.held = c.held[:copy(c.held, c.held[k:])]
	}
}

// Discard gives back a buffer from Acquire that will not be sent. A
// buffer already given back (sent or discarded), or another Sender's, is
// left alone.
func (s *Sender) Discard(b *OutBuffer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.from != s {
		return
	}
	b.from = nil
	s.free = append(s.free, b.idx) // never sent: nothing else holds it
}

// PutData transmits b to the destinations dests and takes b back, whatever
// it returns (b must not be used after; given back twice, it is
// ErrBadBuffer). depleted marks it the last buffer of this endpoint to
// them. It waits while a destination has Depth buffers unconsumed.
func (s *Sender) PutData(ctx context.Context, b *OutBuffer, dests []int, depleted bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return ErrClosed
	}
	if err := procClosed(s.proc); err != nil {
		return err
	}
	if b.from != s {
		return fmt.Errorf("%w: a buffer sent or discarded already, or of another endpoint", ErrBadBuffer)
	}
	b.from = nil // given back, whatever putLocked returns
	return s.putLocked(ctx, b, dests, depleted)
}

func (s *Sender) putLocked(ctx context.Context, b *OutBuffer, dests []int, depleted bool) error {
	var w waiter
	s.refs[b.idx]++ // held by this call until every destination has it
	defer func() {
		if s.refs[b.idx]--; s.refs[b.idx] == 0 {
			s.free = append(s.free, b.idx)
		}
	}()
	n := len(b.Data)
	if n > s.cfg.BufferBytes {
		return fmt.Errorf("%w: %d bytes in a %d-byte buffer", ErrTooLarge, n, s.cfg.BufferBytes)
	}
	for _, d := range dests {
		if d < 0 || d >= len(s.conns) || s.conns[d].qp == nil {
			return fmt.Errorf("%w: destination %d not attached", ErrBadConfig, d)
		}
		c := s.conns[d]
		var flags uint32
		if depleted {
			flags |= flagDepleted
		}
		for {
			if _, limit := c.limit(s.cfg.Depth); c.sent < limit {
				break
			}
			if err := c.failed(); err != nil {
				return err
			}
			flags |= flagStalled // the window held this buffer back
			if err := s.waitLocked(ctx, &w, c); err != nil {
				return err
			}
			s.retire()
		}
		if err := s.send(c, b, n, flags); err != nil {
			return err
		}
	}
	return nil
}

// headerSignalEvery: one slot header write in this many is signaled. A
// header's completion frees nothing (its local copy is reused only after
// the receiver consumed the buffer, which the credit says), and a failed
// unsignaled write still fails the connection; the signaled ones retire
// the queue pair's unsignaled operations. Over tcp each signaled write is
// an answer frame: signaling every header, repartition -impl wr
// -transport tcp ran 0.50–0.56 GB/s per process against 0.52–0.58 with
// one in eight (six interleaved rounds).
const headerSignalEvery = 8

// send writes buffer b (n bytes) into c's next ring slot; mu is held.
func (s *Sender) send(c *sendConn, b *OutBuffer, n int, flags uint32) error {
	seq := c.sent + 1
	slot := int((seq - 1) % uint64(s.cfg.Depth))
	sb := s.slotBytes()
	hdr, _ := c.hdrs.Slice(slot*rdSlotBytes, rdSlotBytes)
	switch s.cfg.Design {
	case WR:
		if n > 0 {
			src, _ := s.bufs[b.idx].Slice(0, n)
			dst, _ := c.ring.Sub(uint64(slot*sb), uint64(n))
			if err := c.post(dtutils.WorkRequest{Op: dtutils.OpWrite, WRID: wridData, Local: src, Remote: dst}); err != nil {
				return err
			}
		}
		putHeader(hdr.Bytes(), seq, n, flags)
		h, _ := hdr.Slice(0, slotHeader)
		dst, _ := c.ring.Sub(uint64(slot*sb+s.cfg.BufferBytes), slotHeader)
		if err := c.post(dtutils.WorkRequest{Op: dtutils.OpWrite, WRID: wridHeader, Signaled: seq%headerSignalEvery == 0, Local: h, Remote: dst}); err != nil {
			return err
		}
	case SR:
		src, _ := s.bufs[b.idx].Slice(0, n)
		if err := c.post(dtutils.WorkRequest{Op: dtutils.OpSend, WRID: wridData, Signaled: true, Local: src, Imm: srImm(c.index, flags)}); err != nil {
			return err
		}
	case RD:
		loc := s.bufs[b.idx].Locator()
		loc.AppendBinary(hdr.Bytes()[:0])
		putHeader(hdr.Bytes()[rdHeaderAt:], seq, n, flags)
		d, _ := hdr.Slice(0, rdHeaderAt+slotHeader)
		dst, _ := c.ring.Sub(uint64(slot*sb), rdHeaderAt+slotHeader)
		if err := c.post(dtutils.WorkRequest{Op: dtutils.OpWrite, WRID: wridHeader, Signaled: seq%headerSignalEvery == 0, Local: d, Remote: dst}); err != nil {
			return err
		}
	}
	c.sent = seq
	c.held = append(c.held, held{seq: seq, buf: b.idx})
	s.refs[b.idx]++
	return nil
}

// open starts one of the endpoint's users (a thread's SHUFFLE operator).
func (s *Sender) open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.unopened == 0 {
		return fmt.Errorf("%w: all %d users of the endpoint started", ErrClosed, s.users)
	}
	s.unopened--
	return nil
}

// closeUser ends a user; the last one sends Depleted (an empty buffer) to
// every destination and waits until all have consumed everything.
func (s *Sender) closeUser(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users--; s.users > 0 || s.done {
		return nil
	}
	return s.depleteLocked(ctx)
}

// Close sends Depleted to every destination, if no user has, and waits
// until the receivers have consumed every buffer; then the memory is
// released. The queue pairs stay open (they are the caller's). If the
// process was closed first, Close only releases the memory and, unless
// Depleted had been sent, returns ErrClosed: the receivers did not get
// the end of the stream. Closing again does nothing.
func (s *Sender) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	var err error
	if !s.done {
		if err = procClosed(s.proc); err == nil {
			err = s.depleteLocked(ctx)
		}
	}
	s.proc.Registry().Release(s.region)
	for _, r := range s.grown {
		s.proc.Registry().Release(r)
	}
	s.released = true
	s.release()
	return err
}

func (s *Sender) depleteLocked(ctx context.Context) error {
	var w waiter
	for s.retire(); len(s.free) == 0; s.retire() {
		if err := s.waitLocked(ctx, &w, nil); err != nil {
			return err
		}
	}
	i := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	all := make([]int, len(s.conns))
	for d := range all {
		all[d] = d
	}
	if err := s.putLocked(ctx, &OutBuffer{Data: s.bufs[i].Bytes()[:0], idx: i}, all, true); err != nil {
		return err
	}
	s.done = true
	// Wait until everything sent is consumed: RD's receivers still read
	// from these buffers, and the caller may release the memory next.
	for {
		s.retire()
		pending := false
		for _, c := range s.conns {
			if len(c.held) == 0 {
				continue // all consumed: a connection lost since loses nothing
			}
			if err := c.failed(); err != nil {
				return err
			}
			pending = true
		}
		if !pending {
			return nil
		}
		if err := s.waitLocked(ctx, &w, nil); err != nil {
			return err
		}
	}
}

// In is a received buffer (GetData): its data, the source connection, and
// whether it is that source's last. Release it when done: Data is valid
// until then (with RD over shared memory it is the sender's own buffer).
type In struct {
	Data     []byte
	Src      int
	Depleted bool
	seq      uint64
}

// Receiver is a RECEIVE endpoint (seed 004, §4.2): it returns filled
// buffers (GetData) from its sources and takes them back (Release),
// returning the credit to their senders. Safe for concurrent use.
type Receiver struct {
	proc     *dtutils.Process
	release  func() // the hold on proc's memory (Process.Hold)
	released bool   // Close has given the memory back
	cfg      Config
	region   *alloc.Region
	mu       sync.Mutex
	srcs     []*recvSrc
	rr       int
	live     int // sources whose Depleted buffer has not come
	// The adaptive window's moves (Config.Adaptive).
	grows, shrinks int64
	maxWindow      int
	// SR: the receive buffers (Depth per source), which source each is
	// handed out for (source+1; 0 while posted), and the arrivals polled
	// and not yet handed out, in order, from landed[landedAt].
	bufs     []alloc.Memory
	out      []int
	landed   []srArrival
	landedAt int
	cq       [16]dtutils.Completion
}

type recvSrc struct {
	link
	ring     []byte
	ringMem  alloc.Memory
	credit   alloc.Locator // the sender's credit word
	words    alloc.Memory  // creditRing local words for the credit writes
	next     uint64        // the next sequence number expected
	consumed uint64
	released []bool
	reads    alloc.Memory // RD: Depth buffers to read into
	mapped   bool         // RD over shared memory: the buffer is read in place
	// RD reading into reads: readNext is the next sequence number whose
	// read is to be posted, readsPosted the reads posted on the link, and
	// readIdx, per slot, the count of completed reads at which the slot's
	// read is done (reads complete in the order posted).
	readNext    uint64
	readsPosted uint64
	readIdx     []uint64
	posted      uint64 // credit writes posted
	ended       bool
	window      int // buffers the sender may have in flight beyond consumed
	// SR: this receiver's destination index at the sender, and the count
	// consumed that the last credit message carried.
	index      int
	creditSent uint64
	// The adaptive window's epoch: buffers left in it, and the fewest
	// spare buffers seen in it; floor is one more than the largest window
	// that starved the consumers, below which it never shrinks.
	epochLeft, minSpare int
	floor               int
	// arrivedAhead is how many buffers after next were found in their
	// slots by the last take (they stay there until taken). SR: landed
	// counts this source's arrivals polled and not yet handed out.
	arrivedAhead int
	landed       int
}

// creditRing bounds the credit writes in flight per source.
const creditRing = 64

// NewReceiver makes a RECEIVE endpoint of proc for sources connections
// (Attach each).
func NewReceiver(proc *dtutils.Process, cfg Config, sources int) (*Receiver, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if sources < 1 || sources > 1<<16 {
		return nil, fmt.Errorf("%w: %d sources (want 1…65536)", ErrBadConfig, sources)
	}
	ring := cfg.Depth * slotBytes(cfg)
	per := ring + 8*creditRing
	if cfg.Design == RD || cfg.Design == SR {
		per += cfg.Depth * cfg.BufferBytes // RD: read into; SR: receive into
	}
	if cfg.Design == SR {
		if err := srSlots(proc, sources*cfg.Depth); err != nil {
			return nil, err
		}
	}
	rc := &Receiver{proc: proc, cfg: cfg, live: sources, maxWindow: cfg.window()}
	release, err := dtutils.HoldFor(proc, rc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	// Populated, as the send buffers are (NewSender).
	r, err := proc.Registry().NewRegion(sources*per, alloc.RegionConfig{Name: "shuffle-recv", Populate: true})
	if err != nil {
		release()
		return nil, fmt.Errorf("shuffle: receive rings: %w", err)
	}
	rc.release, rc.region = release, r
	for i := 0; i < sources; i++ {
		at := i * per
		s := &recvSrc{next: 1, released: make([]bool, cfg.Depth), window: cfg.window()}
		s.ringMem, _ = r.Memory(at, ring)
		s.ring = s.ringMem.Bytes()
		s.words, _ = r.Memory(at+ring, 8*creditRing)
		if cfg.Design == RD || cfg.Design == SR {
			s.reads, _ = r.Memory(at+ring+8*creditRing, cfg.Depth*cfg.BufferBytes)
		}
		rc.srcs = append(rc.srcs, s)
	}
	if cfg.Design == SR {
		if err := rc.postAll(); err != nil {
			proc.Registry().Release(r)
			release()
			return nil, err
		}
	}
	return rc, nil
}

// Offer returns what source i's sender needs (its Attach's offer).
func (r *Receiver) Offer(i int) []byte {
	loc := r.srcs[i].ringMem.Locator()
	if r.cfg.Design == SR {
		loc, _ = r.region.Locator(0, 0) // no ring: the receiver's process, nothing in it
	}
	return marshalOffer(r.cfg, loc, r.srcs[i].window, i)
}

// Attach wires source i: qp is connected to the sender's queue pair for
// this receiver, offer is what the sender's Attach returned.
func (r *Receiver) Attach(i int, qp dtutils.QueuePair, offer []byte) error {
	o, err := parseOffer(offer, r.cfg)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < 0 || i >= len(r.srcs) || r.srcs[i].qp != nil {
		return fmt.Errorf("%w: source %d of %d, or attached twice", ErrBadConfig, i, len(r.srcs))
	}
	if o.loc.Length != 8 || o.loc.Process != qp.PeerRank() {
		return fmt.Errorf("%w: credit word of %d bytes in process %d", ErrBadOffer, o.loc.Length, o.loc.Process)
	}
	s := r.srcs[i]
	s.attach(qp)
	s.credit, s.index = o.loc, o.index
	if r.cfg.Design != SR {
		s.premap(s.credit) // the credit word, and RD's buffers (one region)
	}
	s.mapped = r.cfg.Design == RD && !r.cfg.NoMap && dtutils.CanMapRemote(s.c.qp)
	return nil
}

// Sources returns the number of sources.
func (r *Receiver) Sources() int { return len(r.srcs) }

// GetData returns the next filled buffer of any source, waiting for one;
// io.EOF once every source has sent its Depleted buffer and all were
// handed out.
func (r *Receiver) GetData(ctx context.Context) (In, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return In{}, errReceiverClosed // its rings are given back
	}
	if err := procClosed(r.proc); err != nil {
		return In{}, err
	}
	var w waiter
	for waited := false; ; waited = true {
		if in, ok, err := r.take(ctx, waited); ok || err != nil {
			return in, err
		}
		if r.live == 0 {
			return In{}, io.EOF
		}
		// Credits held back for batching go out before waiting: the
		// sender may be waiting for exactly them.
		if err := r.flushCredits(); err != nil {
			return In{}, err
		}
		r.mu.Unlock()
		probe, err := w.wait(ctx, r.proc)
		r.mu.Lock()
		if err != nil {
			return In{}, err
		}
		for _, s := range r.srcs {
			if !probe {
				break
			}
			if s.qp != nil && !s.ended {
				s.probe()
				if err := s.failed(); err != nil {
					return In{}, err
				}
			}
		}
	}
}

// take returns a buffer that has arrived, if any; waited says the caller
// has waited for one. mu is held.
func (r *Receiver) take(ctx context.Context, waited bool) (In, bool, error) {
	if r.cfg.Design == SR {
		return r.takeSR(waited)
	}
	n := len(r.srcs)
	sb := slotBytes(r.cfg)
	for k := 0; k < n; k++ {
		i := (r.rr + k) % n
		s := r.srcs[i]
		if s.qp == nil || s.ended {
			continue
		}
		slot := int((s.next - 1) % uint64(r.cfg.Depth))
		at := slot * sb
		h := at + r.cfg.BufferBytes
		if r.cfg.Design == RD {
			h = at + rdHeaderAt
		}
		if !r.arrived(s, s.next) {
			continue
		}
		size, flags := parseHeader(s.ring[h:])
		depleted := flags&flagDepleted != 0
		ahead := 0
		if r.cfg.Adaptive {
			// The buffers after this one that are in their slots: those
			// counted at the last take stay there until taken, so only the
			// rest is looked at, and each slot's header (a line the sender
			// wrote) is loaded once rather than at every take before it.
			spare := min(s.arrivedAhead, s.window)
			for spare < s.window && r.arrived(s, s.next+1+uint64(spare)) {
				spare++
			}
			ahead = spare
			r.adapt(s, waited && flags&flagStalled != 0, spare)
		}
		if size > r.cfg.BufferBytes {
			return In{}, false, fmt.Errorf("%w: source %d sent a %d-byte buffer (at most %d)", ErrBadBuffer, i, size, r.cfg.BufferBytes)
		}
		var data []byte
		switch {
		case r.cfg.Design == WR:
			data = s.ring[at : at+size]
		case size > 0:
			var err error
			if data, err = r.read(ctx, s, slot, at, size); err != nil {
				return In{}, false, err
			}
		}
		in := In{Data: data, Src: i, Depleted: depleted, seq: s.next}
		s.next++
		s.arrivedAhead = max(ahead-1, 0) // the first of them is the next now
		if depleted {
			s.ended = true
			r.live--
		}
		r.rr = (i + 1) % n
		return in, true, nil
	}
	return In{}, false, nil
}

// arrived reports whether buffer seq of s is in its slot.
func (r *Receiver) arrived(s *recvSrc, seq uint64) bool {
	at := int((seq-1)%uint64(r.cfg.Depth)) * slotBytes(r.cfg)
	h := at + r.cfg.BufferBytes
	if r.cfg.Design == RD {
		h = at + rdHeaderAt
	}
	return (*atomic.Uint64)(unsafe.Pointer(&s.ring[h+8])).Load() == seq
}

// adapt moves s's window when buffer s.next is taken, after seed 004 §6:
// the window grows when it starves the consumers, and gives back what they
// do not need. Growth doubles the window when a consumer waited for a
// buffer the window had held back (the sender marked it stalled): a
// starved consumer costs a round trip per buffer, so the window must catch
// up fast. Shrinking is gentle: over an epoch of a window's worth of
// buffers taken without starving, the fewest buffers found waiting beyond
// the one taken (the spare) is what the window could do without, all but
// one (the seed retires all but one buffer; keeping one spare keeps the
// next GetData from waiting), but never below the floor: one more than
// the largest window that starved the consumers. Without the floor the
// window went back down to a size that had starved them as soon as a
// burst left buffers waiting, and starved them again: 20–45 shrinks and
// as many growths per 512 MiB, and repartition at 0.72 of the fixed
// window's throughput (median of nine interleaved rounds; 0.90 with the
// floor). The new window reaches the sender with the next credit. mu is
// held.
func (r *Receiver) adapt(s *recvSrc, stalled bool, spare int) {
	if stalled {
		if s.window < r.cfg.Depth {
			s.floor = s.window + 1 // the window never goes below the floor: this raises it
			s.window = min(r.cfg.Depth, 2*s.window)
			r.grows++
			r.maxWindow = max(r.maxWindow, s.window)
		}
		s.epochLeft = 0
		return
	}
	if s.epochLeft == 0 {
		s.epochLeft, s.minSpare = s.window, spare
	}
	s.minSpare = min(s.minSpare, spare)
	if s.epochLeft--; s.epochLeft == 0 && s.minSpare > 1 {
		if w := max(1, s.floor, s.window-(s.minSpare-1)); w < s.window {
			s.window = w
			r.shrinks++
		}
	}
}

// ReceiverStats are the adaptive windows' moves (Config.Adaptive).
type ReceiverStats struct {
	// Grows and Shrinks count the windows' moves, over every source.
	Grows, Shrinks int64
	// Windows is each source's window now; MaxWindow the largest any
	// reached.
	Windows   []int
	MaxWindow int
	// Floors is each source's floor: one more than the largest window
	// that starved its consumers (0: none has), the least the window
	// shrinks to.
	Floors []int
	// Credits counts the credits sent, over every source: one per quarter
	// of a window consumed while a stream runs, plus those sent before
	// the receiver waits and at a stream's end.
	Credits int64
}

// Stats returns the receiver's window statistics.
func (r *Receiver) Stats() ReceiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := ReceiverStats{Grows: r.grows, Shrinks: r.shrinks, MaxWindow: r.maxWindow}
	for _, s := range r.srcs {
		st.Windows = append(st.Windows, s.window)
		st.Floors = append(st.Floors, s.floor)
		st.Credits += int64(s.posted)
	}
	return st
}

// read pulls an RD buffer from the sender into the slot's read buffer, or
// where the sender's memory is mapped here returns it in place.
func (r *Receiver) read(ctx context.Context, s *recvSrc, slot, at, size int) ([]byte, error) {
	if s.mapped {
		src, err := r.descriptor(s, at, size)
		if err != nil {
			return nil, err
		}
		m, err := dtutils.MapRemote(s.c.qp, src)
		if err != nil {
			if errors.Is(err, dtutils.ErrRemoteAccess) {
				return nil, fmt.Errorf("%w: descriptor %v for %d bytes: %w", ErrBadBuffer, src, size, err)
			}
			return nil, s.lost(err)
		}
		return m.Bytes(), nil
	}
	if err := r.postReads(s); err != nil {
		return nil, err
	}
	dst, _ := s.reads.Slice(slot*r.cfg.BufferBytes, size)
	want := s.readIdx[slot]
	var w waiter
	for s.drain(); s.link.reads.Load() < want; s.drain() {
		if err := s.failed(); err != nil {
			return nil, err
		}
		// mu stays held: the read is this thread's to finish.
		probe, err := w.wait(ctx, r.proc)
		if err != nil {
			return nil, err
		}
		if probe {
			s.probe()
		}
	}
	// A failed read is counted too; completions come in order, so a
	// failure seen now is this read's or one after it: the connection is
	// done either way.
	if err := s.failed(); err != nil {
		return nil, err
	}
	return dst.Bytes(), nil
}

// readAhead bounds the RD buffers of a source whose reads are posted
// ahead of the one taken; they land in slots the receiver has anyway. One
// read at a time made each buffer's transfer a round trip of its own:
// repartition -impl rd -transport tcp ran 0.20–0.24 GB/s per process
// that way, 0.32–0.37 with 4 ahead, 0.38–0.41 with 8, 0.41–0.51 with 32
// to 128 (interleaved rounds). 32: the whole default window would do as
// well, but an RDMA NIC keeps only a few reads in flight per queue pair
// (max_rd_atomic, 16 on many), so more would only queue.
const readAhead = 32

// postReads posts the read of buffer s.next, unless it is posted, and of
// the buffers after it that have arrived, up to readAhead (and Depth) of
// them; mu is held. A buffer's slot in reads is free once it has arrived:
// the sender sent it only after the buffer Depth before it was released.
// A descriptor that does not parse stops the posting ahead; that buffer
// reports it when its turn comes.
func (r *Receiver) postReads(s *recvSrc) error {
	if s.readIdx == nil {
		s.readIdx = make([]uint64, r.cfg.Depth)
	}
	first := s.next
	s.readNext = max(s.readNext, first)
	for q := s.readNext; q < first+uint64(min(readAhead, r.cfg.Depth)); q++ {
		if q != first && !r.arrived(s, q) {
			break
		}
		slot := int((q - 1) % uint64(r.cfg.Depth))
		at := slot * rdSlotBytes
		size, _ := parseHeader(s.ring[at+rdHeaderAt:])
		if size > 0 {
			if q != first && size > r.cfg.BufferBytes {
				break
			}
			src, err := r.descriptor(s, at, size)
			if err != nil {
				if q == first {
					return err
				}
				break
			}
			dst, _ := s.reads.Slice(slot*r.cfg.BufferBytes, size)
			if err := s.post(dtutils.WorkRequest{Op: dtutils.OpRead, WRID: wridRead, Signaled: true, Local: dst, Remote: src}); err != nil {
				return err
			}
			s.readsPosted++
			s.readIdx[slot] = s.readsPosted
		}
		s.readNext = q + 1
	}
	return nil
}

// descriptor returns the sender's memory an RD slot names for size bytes.
func (r *Receiver) descriptor(s *recvSrc, at, size int) (alloc.Locator, error) {
	var loc alloc.Locator
	if err := loc.UnmarshalBinary(s.ring[at : at+alloc.LocatorSize]); err != nil || loc.Process != s.peer || loc.Length < uint64(size) {
		return alloc.Locator{}, fmt.Errorf("%w: descriptor %v for %d bytes", ErrBadBuffer, loc, size)
	}
	src, _ := loc.Sub(0, uint64(size))
	return src, nil
}

// Release hands a buffer from GetData back: once every earlier buffer of
// its source is released too, the source's sender gets the credit.
func (r *Receiver) Release(in In) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return errReceiverClosed
	}
	if err := procClosed(r.proc); err != nil {
		return err
	}
	if in.Src < 0 || in.Src >= len(r.srcs) {
		return fmt.Errorf("%w: source %d", ErrBadBuffer, in.Src)
	}
	s := r.srcs[in.Src]
	if r.cfg.Design == SR {
		return r.releaseSR(s, in)
	}
	slot := int((in.seq - 1) % uint64(r.cfg.Depth))
	if in.seq <= s.consumed || in.seq >= s.next || s.released[slot] {
		return fmt.Errorf("%w: buffer %d of source %d released twice or never handed out", ErrBadBuffer, in.seq, in.Src)
	}
	s.released[slot] = true
	before := s.consumed
	for s.consumed+1 < s.next && s.released[s.consumed%uint64(r.cfg.Depth)] {
		s.released[s.consumed%uint64(r.cfg.Depth)] = false
		s.consumed++
	}
	if s.consumed == before {
		return nil
	}
	return r.creditDue(s)
}

// creditDue credits s once a quarter of its window has been consumed
// since its last credit: a credit carries the running count, so one
// stands for every one before it. What is held back goes out before the
// receiver waits (flushCredits), so a sender never waits for a credit the
// receiver holds. Once the source's Depleted buffer is taken, every
// release credits at once: its sender waits for the last ones, and no
// GetData may come to flush them (another thread may release a data
// buffer after the Depleted one was released). mu is held.
//
// WR and RD credited every buffer until 2026-12-08: over tcp that is a
// frame and its answer each way per 16 KiB buffer, and the receiver
// waited for the answers once creditRing writes were in flight (shuffle
// repartition -impl wr -transport tcp: 0.45–0.49 → 0.53–0.59 GB/s per
// process in four interleaved rounds; over shm within the noise).
func (r *Receiver) creditDue(s *recvSrc) error {
	if s.consumed-s.creditSent >= uint64(max(1, s.window/4)) || s.ended {
		return r.credit(s)
	}
	return nil
}

// flushCredits sends every credit held back, each source's whatever
// another's connection does; mu is held.
func (r *Receiver) flushCredits() error {
	var errs []error
	for _, s := range r.srcs {
		if s.qp != nil && s.consumed > s.creditSent {
			errs = append(errs, r.credit(s))
		}
	}
	return errors.Join(errs...)
}

// credit gives s's sender the count consumed and the window: a one-sided
// write into its credit word (WR, RD), or a Send (SR). The local word is
// reused after creditRing more, once its own operation has completed. mu
// is held.
func (r *Receiver) credit(s *recvSrc) error {
	for s.posted-s.link.credits.Load() >= creditRing {
		s.drain()
		if err := s.failed(); err != nil {
			return err
		}
		r.proc.Progress()
	}
	w, _ := s.words.Slice(int(s.posted%creditRing)*8, 8)
	(*atomic.Uint64)(unsafe.Pointer(&w.Bytes()[0])).Store(packCredit(s.consumed, s.window))
	s.posted++
	s.creditSent = s.consumed
	if r.cfg.Design == SR {
		return s.post(dtutils.WorkRequest{Op: dtutils.OpSend, WRID: wridCredit, Signaled: true, Local: w, Imm: srImm(s.index, 0)})
	}
	return s.post(dtutils.WorkRequest{Op: dtutils.OpWrite, WRID: wridCredit, Signaled: true, Local: w, Remote: s.credit})
}

// Close waits until the credits it wrote have reached their senders (a
// sender finishing its Depleted stream waits for them: closing the
// connection under them would fail it) and the RD reads it posted have
// landed, then releases the receiver's memory; the queue pairs stay open.
// Should ctx end with reads still outstanding (a peer that neither
// answers nor dies), the memory they land in stays mapped until the
// process closes, and Close says so. If the process was closed first,
// Close only releases the memory and, unless every source had ended its
// stream, returns ErrClosed. Closing again does nothing; GetData and
// Release afterwards return ErrClosed.
func (r *Receiver) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return nil
	}
	defer func() { r.released = true; r.release() }()
	var w waiter
	var err error
	if err = procClosed(r.proc); err != nil {
		if r.live == 0 {
			err = nil
		}
		return errors.Join(err, r.proc.Registry().Release(r.region))
	}
	ferr := r.flushCredits()
	for _, s := range r.srcs {
		// Reads posted ahead land in this receiver's memory: it is
		// released only once each has completed, failed or been flushed
		// (a lost queue pair completes what it had pending), even on a
		// failed connection.
		done := func() bool {
			return (s.failed() != nil || s.link.credits.Load() >= s.posted) && s.link.reads.Load() >= s.readsPosted
		}
		for err == nil && s.qp != nil && !done() {
			s.drain()
			if done() {
				break
			}
			r.mu.Unlock()
			var probe bool
			probe, err = w.wait(ctx, r.proc)
			r.mu.Lock()
			if err != nil {
				break
			}
			if probe {
				s.probe()
			}
		}
	}
	var out int
	for _, s := range r.srcs {
		out += int(s.readsPosted - min(s.readsPosted, s.link.reads.Load()))
	}
	if out > 0 {
		return errors.Join(ferr, err, fmt.Errorf("shuffle: %d reads still outstanding: the receiver's memory stays mapped until its process closes", out))
	}
	return errors.Join(ferr, err, r.proc.Registry().Release(r.region))
}
