package dtutils

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
)

// TCPConfig configures the tcp provider.
type TCPConfig struct {
	// Listen is the address queue-pair connections are accepted on.
	// Default "127.0.0.1:0": loopback only, any port. Give a routable
	// address to reach other machines.
	Listen string
	// Advertise is the address written into endpoints; default the
	// listener's actual address.
	Advertise string
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

// tcp: one connection per queue pair. A writer goroutine sends everything
// posted since its last write in one syscall (a lone operation goes out at
// once; a burst goes out as one batch). A reader goroutine applies the
// peer's requests to this process's registered memory — after the key and
// bounds checks of alloc.Registry.Resolve — and matches the peer's responses
// to this side's operations, which complete in order.
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
	d := DefaultTCPConfig()
	if cfg.Listen == "" {
		cfg.Listen = d.Listen
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = d.ConnectTimeout
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
	q := &tcpQP{prov: p, token: randomToken(), incoming: make(chan net.Conn, 1), kick: make(chan struct{}, 1), done: make(chan struct{})}
	q.acct.max = uint64(p.proc.cfg.MaxUnsignaled)
	q.cq = newMemCQ(&q.acct)
	p.mu.Lock()
	p.qps[q.token] = q
	p.mu.Unlock()
	return q, nil
}

func (p *tcpProvider) Close() error {
	p.closed.Store(true)
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
	local    alloc.Memory
	retire   uint64
}

type tcpQP struct {
	prov      *tcpProvider
	token     uint64
	peerToken atomic.Uint64
	incoming  chan net.Conn
	conn      net.Conn
	peerRank  uint32
	connected atomic.Bool
	acct      sqAccount
	cq        *memCQ

	mu      sync.Mutex
	out     []byte // frames not yet written
	pending fifo[pendingOp]
	lostErr error

	word      [8]byte // reader goroutine's scratch for readPublish
	kick      chan struct{}
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
	q.conn, q.peerRank = c, ep.rank
	q.connected.Store(true)
	go q.writer()
	go q.reader()
	return nil
}

// needsResponse: operations whose result comes back even when unsignaled.
func needsResponse(op Op, signaled bool) bool {
	return signaled || op == OpRead || op == OpFetchAdd || op == OpCompareSwap
}

func (q *tcpQP) Post(wr WorkRequest) error {
	if q.closed.Load() {
		return ErrClosed
	}
	if !q.connected.Load() {
		return ErrNotConnected
	}
	if err := wr.validate(q.prov.proc.cfg.MaxTransfer); err != nil {
		return err
	}
	oneSided := wr.Op != OpSend && wr.Op != OpNop
	var snap uint64
	if wr.Signaled {
		snap = q.acct.snapshot()
	} else if err := q.acct.postUnsignaled(); err != nil {
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
	switch wr.Op {
	case OpWrite, OpWriteImm, OpSend:
		payload = wr.Local.Bytes()
		f.payload = uint32(len(payload))
	}
	q.mu.Lock()
	if q.lostErr != nil {
		err := q.lostErr
		q.mu.Unlock()
		return err
	}
	n := len(q.out)
	q.out = append(q.out, make([]byte, frameHeader)...)
	f.put(q.out[n:])
	q.out = append(q.out, payload...)
	if needsResponse(wr.Op, wr.Signaled) {
		q.pending.push(pendingOp{wrid: wr.WRID, op: wr.Op, signaled: wr.Signaled, local: wr.Local, retire: snap})
	}
	q.mu.Unlock()
	q.wake()
	return nil
}

func (q *tcpQP) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func (q *tcpQP) writer() {
	var spare []byte
	for {
		select {
		case <-q.kick:
		case <-q.done:
			return
		}
		for {
			q.mu.Lock()
			buf := q.out
			q.out = spare[:0]
			q.mu.Unlock()
			if len(buf) == 0 {
				spare = buf
				break
			}
			if _, err := q.conn.Write(buf); err != nil {
				q.fail(fmt.Errorf("%w: writing to rank %d: %v", ErrConnectionLost, q.peerRank, err))
				return
			}
			spare = buf
		}
	}
}

func (q *tcpQP) reader() {
	br := bufio.NewReaderSize(q.conn, 256<<10)
	var hdr [frameHeader]byte
	var scratch []byte
	local := localTarget{q.prov.proc}
	maxPayload := q.prov.proc.cfg.MaxTransfer
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			q.fail(fmt.Errorf("%w: rank %d: %w", ErrConnectionLost, q.peerRank, err))
			return
		}
		f, err := parseFrame(hdr[:], maxPayload)
		if err != nil {
			q.prov.log.Error("dropping tcp connection", "peer", q.peerRank, "err", err)
			q.fail(fmt.Errorf("%w: rank %d sent a malformed frame: %v", ErrConnectionLost, q.peerRank, err))
			return
		}
		if f.op&frameResp != 0 {
			err = q.response(br, f)
		} else {
			scratch, err = q.request(br, f, local, scratch)
		}
		if err != nil {
			q.fail(err)
			return
		}
	}
}

// request applies one of the peer's operations and queues its response.
func (q *tcpQP) request(br *bufio.Reader, f frame, local localTarget, scratch []byte) ([]byte, error) {
	op := Op(f.op)
	loc := alloc.Locator{Process: q.prov.proc.cfg.Rank, Region: f.region, Offset: f.off, Length: f.length, Key: f.key}
	var st Status
	var n int
	var out []byte
	if op == OpWrite {
		// The hot path: straight from the socket buffer into the region.
		dst, ok := local.mem(f.region, f.key, f.off, f.length)
		if ok {
			if err := readPublish(br, dst, &q.word); err != nil {
				return scratch, fmt.Errorf("%w: rank %d: %v", ErrConnectionLost, q.peerRank, err)
			}
			st, n = StatusSuccess, len(dst)
		} else {
			if _, err := br.Discard(int(f.payload)); err != nil {
				return scratch, fmt.Errorf("%w: rank %d: %v", ErrConnectionLost, q.peerRank, err)
			}
			st = StatusRemoteAccess
		}
	} else {
		need := int(f.payload)
		if op == OpRead {
			need = 0
			if f.length <= uint64(q.prov.proc.cfg.MaxTransfer) {
				need = int(f.length)
			}
		} else if op == OpFetchAdd || op == OpCompareSwap {
			need = 8
		}
		if cap(scratch) < need {
			scratch = make([]byte, need)
		}
		buf := scratch[:need]
		var in []byte
		if f.payload > 0 {
			in = buf[:f.payload]
			if _, err := io.ReadFull(br, in); err != nil {
				return scratch, fmt.Errorf("%w: rank %d: %v", ErrConnectionLost, q.peerRank, err)
			}
		} else {
			out = buf
		}
		if op == OpRead && uint64(len(out)) != f.length {
			st = StatusRemoteAccess
		} else {
			st, n = apply(local, op, loc, in, out, f.imm, f.arg1, f.arg2, q.peerRank)
		}
	}
	signaled := f.flags&flagSignaled != 0
	if !needsResponse(op, signaled) && st == StatusSuccess {
		return scratch, nil
	}
	r := frame{op: f.op | frameResp, flags: f.flags, status: st, wrid: f.wrid, length: uint64(n)}
	var data []byte
	if st == StatusSuccess && (op == OpRead || op == OpFetchAdd || op == OpCompareSwap) {
		data = out[:n]
		r.payload = uint32(n)
	}
	q.mu.Lock()
	if q.lostErr == nil {
		k := len(q.out)
		q.out = append(q.out, make([]byte, frameHeader)...)
		r.put(q.out[k:])
		q.out = append(q.out, data...)
	}
	q.mu.Unlock()
	q.wake()
	return scratch, nil
}

// response completes this side's oldest operation awaiting one, or reports
// the failure of an unsignaled operation.
func (q *tcpQP) response(br *bufio.Reader, f frame) error {
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
	if f.payload > 0 {
		dst := p.local.Bytes()
		if len(dst) != int(f.payload) {
			return fmt.Errorf("%w: rank %d answered %d bytes for a %d-byte buffer", ErrConnectionLost, q.peerRank, f.payload, len(dst))
		}
		if err := readPublish(br, dst, &q.word); err != nil {
			return fmt.Errorf("%w: rank %d: %v", ErrConnectionLost, q.peerRank, err)
		}
	}
	c := Completion{WRID: p.wrid, Op: op, Status: f.status, Bytes: int(f.length), retire: p.retire, hasRet: p.signaled}
	q.complete(c, true)
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

// readPublish reads len(dst) bytes from r into dst with publish's
// visibility rule: the final aligned word is stored last, atomically.
// w is reader-owned scratch: a local array would escape through io.Reader
// and cost an allocation per operation.
func readPublish(r io.Reader, dst []byte, w *[8]byte) error {
	n := len(dst)
	if n >= 8 && (uintptr(unsafe.Pointer(&dst[0]))+uintptr(n))%8 == 0 {
		if _, err := io.ReadFull(r, dst[:n-8]); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, w[:]); err != nil {
			return err
		}
		publish(dst[n-8:], w[:])
		return nil
	}
	_, err := io.ReadFull(r, dst)
	return err
}

// fail marks the connection lost and completes every pending operation with
// StatusConnectionLost.
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
	if q.conn != nil {
		q.conn.Close()
	}
	for _, p := range lost {
		q.cq.push(Completion{WRID: p.wrid, Op: p.op, Status: StatusConnectionLost})
	}
	switch {
	case q.closed.Load():
	case errors.Is(err, io.EOF):
		q.prov.log.Info("peer closed its queue pair", "peer", q.peerRank)
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
	return nil
}
