package dtutils

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"golang.org/x/sys/unix"
)

// TCPConfig configures the tcp provider.
type TCPConfig struct {
	// Listen is the address queue-pair connections are accepted on.
	// Default "127.0.0.1:0": loopback only, any port. Give a routable
	// address to reach other machines.
	Listen string
	// Advertise is the address written into endpoints; default the
	// listener's actual address, with its host replaced by AdvertiseHost
	// when that is set.
	Advertise string
	// AdvertiseHost is the host (an address peers reach) advertised with
	// the listener's port when Advertise is empty: for a listener on every
	// interface (":0"), whose own address names none.
	AdvertiseHost string
	// ConnectTimeout bounds Connect (dialing, or waiting for the peer to
	// dial). Default 10 s.
	ConnectTimeout time.Duration
	// Logger receives connection-level events; default slog.Default().
	Logger *slog.Logger
}

// DefaultTCPConfig returns the defaults.
func DefaultTCPConfig() TCPConfig {
	return TCPConfig{Listen: "127.0.0.1:0", ConnectTimeout: 10 * time.Second}
}

func (c TCPConfig) withDefaults() TCPConfig {
	d := DefaultTCPConfig()
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	return c
}

// VerifyConfig checks c (after defaults).
func (c TCPConfig) VerifyConfig() error {
	c = c.withDefaults()
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%w: Listen %q: %v", ErrBadConfig, c.Listen, err)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("%w: ConnectTimeout %v", ErrBadConfig, c.ConnectTimeout)
	}
	return nil
}

// tcp: one connection per queue pair. Posted operations are framed into an
// output buffer; whatever is queued goes out in one system call, written by
// the first thread that polls (Process.Progress, or an empty Poll of the
// queue pair's completion queue) — so a burst is coalesced into few writes
// and a lone operation leaves as soon as its poster waits. Incoming frames
// are read and applied the same way, by a polling thread. Requests are
// applied to this process's registered memory after the key and bounds
// checks of alloc.Registry.Resolve; responses complete this side's
// operations, in order.
//
// The socket is kept out of Go's network poller: on a machine whose cores
// are all busy polling, a wake-up of a poller thread or goroutine per
// packet preempts a polling thread, and that cost 100+ µs at the 99th
// percentile (docs/benchmarks.md). Instead each queue pair has one engine
// goroutine that stands by (a timer, no socket) while threads of the
// process poll, and watches the socket itself (poll(2), with an eventfd to
// be kicked) once nobody has polled for a stand-by interval or a waiter
// said it sleeps (Process.Idle). While it watches, posters write their
// frames themselves.
type tcpProvider struct {
	proc   *Process
	cfg    TCPConfig
	log    *slog.Logger
	ln     net.Listener
	addr   string
	mu     sync.Mutex
	qps    map[uint64]*tcpQP
	closed atomic.Bool
}

// NewTCP returns a tcp provider for proc, listening per cfg.
func NewTCP(proc *Process, cfg TCPConfig) (Provider, error) {
	cfg = cfg.withDefaults()
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("dtutils: tcp listen on %s: %w", cfg.Listen, err)
	}
	p := &tcpProvider{proc: proc, cfg: cfg, log: log.With("transport", "tcp", "rank", proc.cfg.Rank), ln: ln, addr: ln.Addr().String(), qps: make(map[uint64]*tcpQP)}
	if cfg.Advertise != "" {
		p.addr = cfg.Advertise
	} else if cfg.AdvertiseHost != "" {
		p.addr = net.JoinHostPort(cfg.AdvertiseHost, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	}
	go p.accept()
	return p, nil
}

func (p *tcpProvider) Transport() string { return "tcp" }
func (p *tcpProvider) Process() *Process { return p.proc }

func (p *tcpProvider) NewQueuePair() (QueuePair, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	q := &tcpQP{prov: p, token: randomToken(), incoming: make(chan net.Conn, 1), hint: make(chan struct{}, 1), done: make(chan struct{}), fd: -1, efd: -1, watchMax: watchTimeoutMax}
	q.acct.max = uint64(p.proc.cfg.MaxUnsignaled)
	q.cq = newMemCQ(&q.acct)
	q.cq.progress = q.progress
	q.cq.idle = q.idle
	p.mu.Lock()
	p.qps[q.token] = q
	p.mu.Unlock()
	return q, nil
}

func (p *tcpProvider) Close() error {
	if p.closed.Swap(true) {
		return nil // as the other providers: the listener's error once
	}
	err := p.ln.Close()
	p.mu.Lock()
	qps := make([]*tcpQP, 0, len(p.qps))
	for _, q := range p.qps {
		qps = append(qps, q)
	}
	p.mu.Unlock()
	for _, q := range qps {
		q.Close()
	}
	return err
}

// hello is what a dialer sends first: the acceptor's token, then its own.
const helloSize = 16

func (p *tcpProvider) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			var h [helloSize]byte
			c.SetReadDeadline(time.Now().Add(p.cfg.ConnectTimeout))
			if _, err := io.ReadFull(c, h[:]); err != nil {
				c.Close()
				return
			}
			c.SetReadDeadline(time.Time{})
			p.mu.Lock()
			q := p.qps[binary.LittleEndian.Uint64(h[0:])]
			p.mu.Unlock()
			if q == nil {
				p.log.Warn("tcp connection for an unknown queue pair refused", "from", c.RemoteAddr())
				c.Close()
				return
			}
			q.peerToken.Store(binary.LittleEndian.Uint64(h[8:]))
			select {
			case q.incoming <- c:
			default:
				c.Close() // already has a connection on the way
			}
		}()
	}
}

type pendingOp struct {
	wrid     uint64
	op       Op
	signaled bool
	internal bool // a fence (see fence): no work request of the user's
	local    alloc.Memory
	retire   uint64
}

type tcpQP struct {
	prov      *tcpProvider
	token     uint64
	peerToken atomic.Uint64
	incoming  chan net.Conn
	peerRank  uint32
	connected atomic.Bool
	acct      sqAccount
	cq        *memCQ

	mu      sync.Mutex
	out     []byte      // frames not yet taken by a writer
	queued  atomic.Bool // out holds frames: all that is read of it outside mu
	pending fifo[pendingOp]
	fences  int // fences posted and not yet answered
	lostErr error

	// fd is the socket and efd the eventfd that wakes the engine from
	// poll(2); both are used under fdmu.RLock and closed under fdmu.Lock.
	fd, efd  int
	fdmu     sync.RWMutex
	fdClosed bool
	watching atomic.Bool // the engine watches the socket: nobody polls
	kicked   atomic.Bool // efd was written and not yet read

	wmu   sync.Mutex // held by whoever writes
	wbuf  []byte     // taken from out, written up to wpos
	wpos  int
	wleft atomic.Int64 // len(wbuf) − wpos

	rx tcpRx

	// link, when set, carries the frames instead of a socket: the ofi
	// provider runs this same frame engine over libfabric messages.
	link frameLink

	// applying, when set (tests only), runs before each piece of a
	// streamed payload is copied into memory: a test holds the engine
	// there to check that Close waits for it.
	applying func()
	// watchWait, when set (tests only), is told the bound of each poll(2)
	// of the watching engine before it waits; watchMax is the most it may
	// grow to (watchTimeoutMax; tests set their own).
	watchWait func(ms int)
	watchMax  int

	hint      chan struct{} // Process.Idle: watch now
	done      chan struct{}
	closeOnce sync.Once
	closed    atomic.Bool
}

func (q *tcpQP) Endpoint() []byte {
	return endpoint{transport: transportTCP, rank: q.prov.proc.cfg.Rank, token: q.token, addr: q.prov.addr}.marshal()
}
func (q *tcpQP) CQ() CompletionQueue { return q.cq }
func (q *tcpQP) Outstanding() int    { return q.acct.outstanding() }
func (q *tcpQP) PeerRank() uint32    { return q.peerRank }

func (q *tcpQP) Connect(remote []byte) error {
	ep, err := parseEndpoint(remote, transportTCP)
	if err != nil {
		return err
	}
	if q.connected.Load() {
		return fmt.Errorf("%w: queue pair already connected", ErrBadEndpoint)
	}
	var c net.Conn
	if q.token < ep.token { // the lower token dials
		c, err = net.DialTimeout("tcp", ep.addr, q.prov.cfg.ConnectTimeout)
		if err != nil {
			return fmt.Errorf("%w: dialing %s: %v", ErrConnectionLost, ep.addr, err)
		}
		var h [helloSize]byte
		binary.LittleEndian.PutUint64(h[0:], ep.token)
		binary.LittleEndian.PutUint64(h[8:], q.token)
		if _, err := c.Write(h[:]); err != nil {
			c.Close()
			return fmt.Errorf("%w: hello to %s: %v", ErrConnectionLost, ep.addr, err)
		}
	} else {
		select {
		case c = <-q.incoming:
		case <-time.After(q.prov.cfg.ConnectTimeout):
			return fmt.Errorf("%w: peer rank %d did not connect within %v", ErrConnectionLost, ep.rank, q.prov.cfg.ConnectTimeout)
		}
		if q.peerToken.Load() != ep.token {
			c.Close()
			return fmt.Errorf("%w: connection from a queue pair other than the endpoint's", ErrBadEndpoint)
		}
	}
	if err := q.adopt(c); err != nil {
		return fmt.Errorf("%w: connection to rank %d: %v", ErrConnectionLost, ep.rank, err)
	}
	q.start(ep.rank)
	go q.engine()
	return nil
}

// start makes a connected queue pair live: its frames flow, and polling
// threads drive it.
func (q *tcpQP) start(peer uint32) {
	q.peerRank = peer
	q.rx.buf = make([]byte, tcpReadBuffer)
	q.connected.Store(true)
	q.prov.proc.progress.add(q)
}

// frameLink is what the frame engine moves bytes over when it is not a tcp
// socket (the ofi provider). Both calls are non-blocking.
type frameLink interface {
	// io reads into b or writes from b. It returns unix.EAGAIN when
	// nothing can move now, net.ErrClosed once shut, and never (0, nil).
	io(write bool, b []byte) (int, error)
	// kick asks whoever makes progress when no thread polls to look now.
	kick()
	// shut releases the link; it is called once, when the queue pair fails.
	shut()
}

// adopt takes the socket of c out of Go's network poller: it keeps a
// duplicate of the descriptor (non-blocking) and closes c, which removes
// c's descriptor from the poller's epoll set.
func (q *tcpQP) adopt(c net.Conn) error {
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true) // the coalescing is ours; Nagle would only add latency
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%T has no descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	fd := -1
	cerr := rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if err = errors.Join(cerr, err); err != nil {
		return err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return err
	}
	q.fd, q.efd = fd, efd
	return nil
}

// needsResponse: operations whose result comes back even when unsignaled.
func needsResponse(op Op, signaled bool) bool {
	return signaled || op == OpRead || op == OpFetchAdd || op == OpCompareSwap || op == OpCall
}

// tcpReadBuffer is the initial receive buffer of a connection; it grows to
// hold a whole frame whose payload is not streamed (sends, atomics).
const tcpReadBuffer = 256 << 10

// pollerReads bounds the reads one Progress call makes on a connection, so
// a polling thread returns to its own work under a steady stream; the
// reader goroutine, woken by the same data, takes over the rest.
const pollerReads = 4

// check refuses a work request the queue pair cannot post: closed, not
// connected, or invalid.
func (q *tcpQP) check(wr *WorkRequest) error {
	if q.closed.Load() {
		return ErrClosed
	}
	if !q.connected.Load() {
		return ErrNotConnected
	}
	return wr.validate(q.prov.proc.cfg.MaxTransfer, q.prov.proc.cfg.CallBytes)
}

func (q *tcpQP) Post(wr WorkRequest) error {
	if err := q.check(&wr); err != nil {
		return err
	}
	oneSided := wr.Op != OpSend && wr.Op != OpNop && wr.Op != OpCall
	snap, err := q.acct.post(wr.Signaled)
	if err != nil {
		return err
	}
	if oneSided && wr.Remote.Process != q.peerRank {
		// The peer would refuse it; say so without a round trip.
		q.cq.push(Completion{WRID: wr.WRID, Op: wr.Op, Status: StatusRemoteAccess, retire: snap, hasRet: wr.Signaled})
		return nil
	}
	f := frame{op: uint8(wr.Op), wrid: wr.WRID, region: wr.Remote.Region, imm: wr.Imm, off: wr.Remote.Offset, key: wr.Remote.Key, length: wr.Remote.Length, arg1: wr.Add, arg2: wr.Swap}
	if wr.Op == OpCompareSwap {
		f.arg1 = wr.Compare
	}
	if wr.Signaled {
		f.flags = flagSignaled
	}
	var payload []byte
	local := wr.Local
	switch wr.Op {
	case OpWrite, OpWriteImm, OpSend:
		payload = wr.Local.Bytes()
		f.payload = uint32(len(payload))
	case OpCall:
		// The request travels as the payload, the reply's capacity as the
		// length; the reply lands in Result.
		payload = wr.Local.Bytes()
		f.payload, f.length, f.region, f.off, f.key = uint32(len(payload)), uint64(wr.Result.Len()), 0, 0, 0
		local = wr.Result
	}
	q.mu.Lock()
	if q.lostErr != nil {
		err := q.lostErr
		q.mu.Unlock()
		return err
	}
	q.appendFrame(&f, payload)
	if needsResponse(wr.Op, wr.Signaled) {
		q.pending.push(pendingOp{wrid: wr.WRID, op: wr.Op, signaled: wr.Signaled, local: local, retire: snap})
	}
	q.mu.Unlock()
	// Nobody polls: have the engine write it, with whatever else is posted
	// until it wakes (one kick per wake-up, not per operation).
	q.kick()
	return nil
}

// fence queues a signaled Nop that completes no work request: its answer
// says the peer has applied every frame sent before it, unsignaled ones
// included (ofi's one-sided path waits for it before an fi_write or
// fi_read may overtake them).
func (q *tcpQP) fence() error {
	f := frame{op: uint8(OpNop), flags: flagSignaled}
	q.mu.Lock()
	if q.lostErr != nil {
		err := q.lostErr
		q.mu.Unlock()
		return err
	}
	q.appendFrame(&f, nil)
	q.pending.push(pendingOp{op: OpNop, signaled: true, internal: true})
	q.fences++
	q.mu.Unlock()
	q.kick()
	return nil
}

// unansweredFences returns the fences not yet answered.
func (q *tcpQP) unansweredFences() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.fences
}

// appendFrame queues a frame; q.mu is held.
func (q *tcpQP) appendFrame(f *frame, payload []byte) {
	n := len(q.out)
	q.out = append(q.out, make([]byte, frameHeader)...)
	f.put(q.out[n:])
	q.out = append(q.out, payload...)
	if n == 0 {
		// Stored on the first frame only: an atomic store per frame is a
		// locked instruction on the poster's path.
		q.queued.Store(true)
	}
}

// kick wakes the engine from poll(2) when it watches the socket.
func (q *tcpQP) kick() {
	if q.link != nil {
		q.link.kick()
		return
	}
	if !q.watching.Load() || q.kicked.Load() || q.kicked.Swap(true) {
		return // the load first: no locked instruction per post once kicked
	}
	var one [8]byte
	one[0] = 1
	q.fdmu.RLock()
	if !q.fdClosed {
		unix.Write(q.efd, one[:])
	}
	q.fdmu.RUnlock()
}

// takeOutput moves the queued frames to the writer's buffer when it is
// drained; wmu is held. It reports whether there is anything to write.
func (q *tcpQP) takeOutput() bool {
	if q.wpos < len(q.wbuf) {
		return true
	}
	q.mu.Lock()
	q.wbuf, q.out = q.out, q.wbuf[:0]
	q.queued.Store(false)
	q.mu.Unlock()
	q.wpos = 0
	return len(q.wbuf) > 0
}

// sysIO is one non-blocking write (or read) on the socket, which fdmu keeps
// from being closed under it.
func (q *tcpQP) sysIO(write bool, b []byte) (int, error) {
	if q.link != nil {
		return q.link.io(write, b)
	}
	q.fdmu.RLock()
	defer q.fdmu.RUnlock()
	switch {
	case q.fdClosed:
		return 0, net.ErrClosed
	case write:
		return unix.Write(q.fd, b)
	}
	return unix.Read(q.fd, b)
}

// pendingOutput reports whether frames wait to be written.
func (q *tcpQP) pendingOutput() bool { return q.queued.Load() || q.wleft.Load() > 0 }

// flush writes what is queued, without blocking, unless another thread is
// writing (that one looks again after it unlocks, so nothing is left
// behind). When the socket is full the engine is kicked to wait for room.
// It reports whether it wrote anything.
func (q *tcpQP) flush() bool {
	did := false
	for q.pendingOutput() && q.wmu.TryLock() {
		var err error
		for err == nil && q.takeOutput() {
			var n int
			n, err = q.sysIO(true, q.wbuf[q.wpos:])
			if n > 0 {
				q.wpos += n
				did = true
			}
			if err == unix.EINTR {
				err = nil
			}
		}
		q.wleft.Store(int64(len(q.wbuf) - q.wpos))
		q.wmu.Unlock()
		switch {
		case err == unix.EAGAIN:
			q.kick() // the engine waits for room if it watches; pollers retry
			return did
		case err != nil:
			q.fail(fmt.Errorf("%w: writing to rank %d: %v", ErrConnectionLost, q.peerRank, err))
			return true
		}
	}
	return did
}

// progress is the queue pair's progress engine (see progressor): read and
// apply what has arrived, then write what is queued, both without
// blocking and without waiting for a thread that is already doing either.
func (q *tcpQP) progress() bool {
	did := false
	if q.rx.mu.TryLock() {
		var err error
		did, err = q.drain(pollerReads)
		q.rx.mu.Unlock()
		if err != nil {
			q.fail(err)
			return true
		}
	}
	if q.flush() {
		did = true
	}
	return did
}

// readFD is the socket, or -1 for a queue pair over a link (ofi's frames).
func (q *tcpQP) readFD() int {
	if q.link != nil {
		return -1
	}
	return q.fd
}

func (q *tcpQP) idle() {
	select {
	case q.hint <- struct{}{}:
	default:
	}
}

// standBy is how long the engine waits between looks at whether threads
// of the process still poll; a timer sleep costs about 1 ms on our
// machines anyway. activeCalls is how many Progress calls in that time
// count as polling: a spinning poller makes thousands, a waiter that
// sleeps on a timer between polls one or two — not enough to leave the
// socket to it.
const (
	standBy     = time.Millisecond
	activeCalls = 32
)

// watchTimeout bounds the first poll(2) of a watching engine, and the
// first after anything happened, so that it notices pollers coming back
// soon; each empty wait doubles the bound up to watchTimeoutMax (see
// watch). A second at most: an idle connection costs one wake-up a second.
const (
	watchTimeout    = 20   // ms
	watchTimeoutMax = 1000 // ms
)

// engine makes progress on the queue pair when no thread of the process
// does: it stands by while Progress is called at a polling rate, and
// otherwise waits on the socket itself.
func (q *tcpQP) engine() {
	calls := &q.prov.proc.progress.calls
	timer := time.NewTimer(standBy)
	defer timer.Stop()
	pfd := []unix.PollFd{{Fd: int32(q.fd)}, {Fd: int32(q.efd), Events: unix.POLLIN}}
	var eb [8]byte
	for {
		if !standByWhilePolled(calls, timer, q.hint, q.done, nil) {
			return
		}
		// Watch: this goroutine is the progress engine now.
		q.watching.Store(true)
		w := newWatch(calls, q.watchMax)
		kicked := false // efd was readable when poll(2) last returned
		for {
			q.rx.mu.Lock()
			_, err := q.drain(0)
			q.rx.mu.Unlock()
			if err != nil {
				q.watching.Store(false)
				q.fail(err)
				return
			}
			q.flush() // what posters queued, and the responses drain queued
			q.fdmu.RLock()
			if q.fdClosed {
				q.fdmu.RUnlock()
				q.watching.Store(false)
				return
			}
			if kicked {
				// Re-armed only after the flush: a poster that queued while
				// this engine was awake found kicked set and made no system
				// call; the check below sees its frames (it queued before
				// it looked at kicked, which is before this store).
				unix.Read(q.efd, eb[:])
				q.kicked.Store(false)
				kicked = false
			}
			pfd[0].Events = unix.POLLIN
			if q.pendingOutput() {
				pfd[0].Events |= unix.POLLOUT
			}
			if q.watchWait != nil {
				q.watchWait(w.timeout)
			}
			var n int
			n, err = unix.Poll(pfd, w.timeout) // n < 0 on EINTR: counted as an event
			w.waited(n != 0)
			kicked = pfd[1].Revents != 0
			q.fdmu.RUnlock()
			select {
			case <-q.done:
				q.watching.Store(false)
				return
			default:
			}
			if err != nil && err != unix.EINTR {
				q.watching.Store(false)
				q.fail(fmt.Errorf("%w: rank %d: poll: %v", ErrConnectionLost, q.peerRank, err))
				return
			}
			if pfd[0].Revents&(unix.POLLHUP|unix.POLLERR) == 0 && w.pollersBack() {
				break // threads poll again: they make the progress
			}
		}
		q.watching.Store(false)
		if kicked {
			q.fdmu.RLock()
			if !q.fdClosed {
				unix.Read(q.efd, eb[:])
			}
			q.fdmu.RUnlock()
			q.kicked.Store(false)
		}
		// A poster that saw watching just before it cleared may have left
		// its frames to us.
		q.flush()
		timer.Reset(standBy)
	}
}

// tcpRx is the receiving half of a queue pair: bytes read and not yet
// applied, and the frame being applied, so that a frame resumes across
// reads and across threads. rx.mu is held by whoever reads.
type tcpRx struct {
	mu        sync.Mutex
	buf       []byte // buf[r:w] read and not yet applied
	r, w      int
	cur       frame // the frame whose payload is being streamed
	streaming bool
	dst       []byte // where the streamed payload goes (nil: discarded)
	got       int    // payload bytes of cur consumed so far
	word      [8]byte
	scratch   []byte
	need      int   // bytes wanted in buf[r:w] before the next frame can go on
	err       error // sticky: a broken stream is never read again
}

// drain reads from the socket until it would block (at most reads times
// when reads > 0) and applies every complete frame; rx.mu is held. It
// reports whether anything was read or applied.
func (q *tcpQP) drain(reads int) (bool, error) {
	rx := &q.rx
	if rx.err != nil {
		return false, rx.err
	}
	did := false
	for i := 0; ; i++ {
		applied, err := q.applyBuffered()
		if err != nil {
			rx.err = err
			return true, err
		}
		did = did || applied
		if reads > 0 && i >= reads {
			return did, nil
		}
		q.makeRoom()
		n, err := q.sysIO(false, rx.buf[rx.w:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return did, nil
		case err != nil:
			rx.err = fmt.Errorf("%w: rank %d: %v", ErrConnectionLost, q.peerRank, err)
			return true, rx.err
		case n == 0:
			rx.err = fmt.Errorf("%w: rank %d: %w", ErrConnectionLost, q.peerRank, io.EOF)
			return true, rx.err
		}
		rx.w += n
		did = true
	}
}

// makeRoom compacts the buffer and grows it so that the bytes the next
// frame needs fit.
func (q *tcpQP) makeRoom() {
	rx := &q.rx
	if rx.r == rx.w {
		rx.r, rx.w = 0, 0
	}
	want := rx.r + max(rx.need, 1)
	if want <= len(rx.buf) && len(rx.buf)-rx.w >= len(rx.buf)/4 {
		return
	}
	if rx.r > 0 {
		rx.w = copy(rx.buf, rx.buf[rx.r:rx.w])
		rx.r = 0
	}
	if rx.need > len(rx.buf) || rx.w == len(rx.buf) {
		nb := make([]byte, max(rx.need, 2*len(rx.buf)))
		copy(nb, rx.buf[:rx.w])
		rx.buf = nb
	}
}

// applyBuffered applies the frames in buf[r:w]. The payload of a write
// request or of a read response is streamed straight into its memory;
// other frames are applied once whole.
func (q *tcpQP) applyBuffered() (bool, error) {
	rx := &q.rx
	did := false
	for {
		if rx.streaming {
			k := min(rx.w-rx.r, int(rx.cur.payload)-rx.got)
			if rx.dst != nil && k > 0 {
				if q.applying != nil {
					q.applying()
				}
				streamCopy(rx.dst, rx.got, rx.buf[rx.r:rx.r+k], &rx.word)
			}
			rx.r += k
			rx.got += k
			if rx.got < int(rx.cur.payload) {
				rx.need = 1
				return did, nil
			}
			rx.streaming = false
			did = true
			if err := q.endStream(); err != nil {
				return did, err
			}
			continue
		}
		if rx.w-rx.r < frameHeader {
			rx.need = frameHeader
			return did, nil
		}
		f, err := parseFrame(rx.buf[rx.r:rx.r+frameHeader], q.prov.proc.cfg.MaxTransfer)
		if err != nil {
			q.prov.log.Error("dropping tcp connection", "peer", q.peerRank, "err", err)
			return did, fmt.Errorf("%w: rank %d sent a malformed frame: %w", ErrConnectionLost, q.peerRank, err)
		}
		resp := f.op&frameResp != 0
		op := Op(f.op &^ frameResp)
		if op == OpWrite && !resp || op == OpRead && resp && f.payload > 0 {
			if err := q.startStream(f); err != nil {
				return did, err
			}
			rx.r += frameHeader
			continue
		}
		size := frameHeader + int(f.payload)
		if rx.w-rx.r < size {
			rx.need = size
			return did, nil
		}
		body := rx.buf[rx.r+frameHeader : rx.r+size]
		rx.r += size
		did = true
		if resp {
			err = q.response(f, body)
		} else {
			err = q.request(f, body)
		}
		if err != nil {
			return did, err
		}
	}
}

// startStream prepares the destination of a streamed payload.
func (q *tcpQP) startStream(f frame) error {
	rx := &q.rx
	rx.cur, rx.streaming, rx.got, rx.dst = f, true, 0, nil
	if f.op&frameResp == 0 { // a write request
		if dst, ok := (localTarget{q.prov.proc}).mem(f.region, f.key, f.off, f.length); ok {
			rx.dst = dst
		}
		return nil
	}
	q.mu.Lock()
	p, ok := q.pending.peek()
	q.mu.Unlock()
	if !ok || p.wrid != f.wrid || p.op != OpRead {
		return fmt.Errorf("%w: rank %d answered an operation that was not pending", ErrConnectionLost, q.peerRank)
	}
	if dst := p.local.Bytes(); len(dst) != int(f.payload) {
		return fmt.Errorf("%w: rank %d answered %d bytes for a %d-byte buffer", ErrConnectionLost, q.peerRank, f.payload, len(dst))
	} else {
		rx.dst = dst
	}
	return nil
}

// endStream finishes a streamed frame: publish its last word, then answer
// (a write request) or complete (a read response).
func (q *tcpQP) endStream() error {
	rx := &q.rx
	f := rx.cur
	if rx.dst != nil {
		streamDone(rx.dst, &rx.word)
	}
	if f.op&frameResp != 0 {
		q.mu.Lock()
		p, _ := q.pending.peek()
		q.mu.Unlock()
		q.complete(Completion{WRID: p.wrid, Op: OpRead, Status: f.status, Bytes: int(f.length), retire: p.retire, hasRet: p.signaled}, true)
		return nil
	}
	st, n := StatusSuccess, len(rx.dst)
	if rx.dst == nil {
		st, n = StatusRemoteAccess, 0
	}
	q.respond(f, st, n, nil)
	return nil
}

// streamCopy copies src, the payload bytes from offset at on, into dst,
// keeping dst's last aligned word aside in w: streamDone stores it last,
// atomically, as publish does.
func streamCopy(dst []byte, at int, src []byte, w *[8]byte) {
	lim := len(dst)
	if publishesWord(dst) {
		lim -= 8
	}
	if at < lim {
		k := copy(dst[at:lim], src)
		at += k
		src = src[k:]
	}
	if len(src) > 0 {
		copy(w[at-lim:], src)
	}
}

func streamDone(dst []byte, w *[8]byte) {
	if publishesWord(dst) {
		Publish(dst[len(dst)-8:], w[:])
	}
}

// publishesWord reports whether dst ends in an aligned word, which publish
// stores last and atomically.
func publishesWord(dst []byte) bool {
	n := len(dst)
	return n >= 8 && (uintptr(unsafe.Pointer(&dst[0]))+uintptr(n))%8 == 0
}

// request applies one of the peer's whole (non-streamed) operations and
// queues its response.
func (q *tcpQP) request(f frame, in []byte) error {
	rx := &q.rx
	op := Op(f.op)
	loc := alloc.Locator{RegionRef: alloc.RegionRef{Process: q.prov.proc.cfg.Rank, Region: f.region}, Offset: f.off, Length: f.length, Key: f.key}
	need := 0
	switch op {
	case OpRead:
		if f.length <= uint64(q.prov.proc.cfg.MaxTransfer) {
			need = int(f.length)
		}
	case OpFetchAdd, OpCompareSwap:
		need = 8
	case OpCall:
		if f.length <= uint64(q.prov.proc.cfg.CallBytes) {
			need = int(f.length)
		}
	}
	if cap(rx.scratch) < need {
		rx.scratch = make([]byte, need)
	}
	out := rx.scratch[:need]
	var st Status
	var n int
	switch {
	case op == OpRead && uint64(len(out)) != f.length:
		st = StatusRemoteAccess
	case op == OpCall && uint64(len(out)) != f.length:
		st = StatusLength
	case op == OpCall:
		st, n = localTarget{q.prov.proc}.call(q.peerRank, in, out, nil)
	default:
		st, n = apply(localTarget{q.prov.proc}, op, loc, in, out, f.imm, f.arg1, f.arg2, q.peerRank)
	}
	var data []byte
	if st == StatusSuccess && (op == OpRead || op == OpFetchAdd || op == OpCompareSwap || op == OpCall) {
		data = out[:n]
	}
	q.respond(f, st, n, data)
	return nil
}

// respond queues the response to request f when one is due.
func (q *tcpQP) respond(f frame, st Status, n int, data []byte) {
	if !needsResponse(Op(f.op), f.flags&flagSignaled != 0) && st == StatusSuccess {
		return
	}
	r := frame{op: f.op | frameResp, flags: f.flags, status: st, wrid: f.wrid, length: uint64(n), payload: uint32(len(data))}
	q.mu.Lock()
	if q.lostErr == nil {
		q.appendFrame(&r, data)
	}
	q.mu.Unlock()
	// Whoever drained (a poller or the engine) flushes next.
}

// response completes this side's oldest operation awaiting one, or reports
// the failure of an unsignaled operation. data is the old value of an
// atomic.
func (q *tcpQP) response(f frame, data []byte) error {
	op := Op(f.op &^ frameResp)
	if !needsResponse(op, f.flags&flagSignaled != 0) {
		q.complete(Completion{WRID: f.wrid, Op: op, Status: f.status}, false)
		return nil
	}
	// Peek, not pop: until its completion is queued the operation stays
	// pending, so a concurrent fail reports it in order with the rest.
	q.mu.Lock()
	p, ok := q.pending.peek()
	q.mu.Unlock()
	if !ok || p.wrid != f.wrid || p.op != op {
		return fmt.Errorf("%w: rank %d answered an operation that was not pending", ErrConnectionLost, q.peerRank)
	}
	if p.internal {
		q.mu.Lock()
		if q.lostErr == nil {
			q.pending.pop()
			q.fences--
		}
		q.mu.Unlock()
		return nil
	}
	if len(data) > 0 {
		dst := p.local.Bytes()
		if op == OpCall && len(data) <= len(dst) {
			dst = dst[:len(data)] // a reply may be shorter than its buffer
		}
		if len(dst) != len(data) {
			return fmt.Errorf("%w: rank %d answered %d bytes for a %d-byte buffer", ErrConnectionLost, q.peerRank, len(data), len(dst))
		}
		Publish(dst, data)
	}
	q.complete(Completion{WRID: p.wrid, Op: op, Status: f.status, Bytes: int(f.length), retire: p.retire, hasRet: p.signaled}, true)
	return nil
}

// complete queues a completion unless the connection was declared lost
// (fail then reported every pending operation). pop removes the pending
// operation it answers.
func (q *tcpQP) complete(c Completion, pop bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lostErr != nil {
		return
	}
	if pop {
		q.pending.pop()
	}
	if c.hasRet || c.Status != StatusSuccess {
		q.cq.push(c)
	}
}

// fail marks the connection lost and completes every pending operation with
// StatusConnectionLost. It must not be called with rx.mu, wmu or fdmu held.
func (q *tcpQP) fail(err error) {
	q.mu.Lock()
	if q.lostErr != nil {
		q.mu.Unlock()
		return
	}
	q.lostErr = err
	var lost []pendingOp
	for {
		p, ok := q.pending.pop()
		if !ok {
			break
		}
		lost = append(lost, p)
	}
	q.mu.Unlock()
	q.closeOnce.Do(func() { close(q.done) })
	q.prov.proc.progress.remove(q)
	if q.link != nil {
		q.link.shut()
	}
	if q.fd >= 0 {
		q.kick() // out of poll(2), which a close does not end
		q.fdmu.Lock()
		if !q.fdClosed {
			q.fdClosed = true
			unix.Close(q.fd)
			unix.Close(q.efd)
		}
		q.fdmu.Unlock()
	}
	for _, p := range lost {
		if !p.internal {
			q.cq.push(Completion{WRID: p.wrid, Op: p.op, Status: StatusConnectionLost})
		}
	}
	switch {
	case q.closed.Load():
	case errors.Is(err, io.EOF):
		q.prov.log.Debug("peer closed its queue pair", "peer", q.peerRank)
	default:
		q.prov.log.Warn("queue pair lost its connection", "peer", q.peerRank, "err", err)
	}
}

func (q *tcpQP) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	q.prov.mu.Lock()
	delete(q.prov.qps, q.token)
	q.prov.mu.Unlock()
	q.fail(fmt.Errorf("%w: queue pair closed", ErrClosed))
	// A drain under way (the engine's or a polling thread's) may still be
	// applying a write into registered memory: wait for it, and make every
	// later one stop at once, so that the caller may release the memory
	// when Close returns (the process's Close unmapped it under the engine,
	// which faulted). Close must therefore not be called from an Operator.
	q.rx.mu.Lock()
	if q.rx.err == nil {
		q.rx.err = fmt.Errorf("%w: queue pair closed", ErrClosed)
	}
	q.rx.mu.Unlock()
	return nil
}
