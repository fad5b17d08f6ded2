package rdmo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// Result is the outcome of an RDMO started with Start.
type Result struct {
	// Tag is Start's tag.
	Tag uint64
	// Code is the completion code (meaningful when Err is nil or an engine
	// code's error).
	Code Code
	// Output is the method's output (a copy the caller owns).
	Output []byte
	// Err is nil for OK and methods' own codes, the engine code's error
	// (ErrBadCapability, ...), or the transport's (ErrBusy, ErrNoEngine,
	// ErrTargetLost).
	Err error
}

// Client issues RDMOs over queue pairs it owns: it is the only poster and
// poller of their completion queues. Safe for concurrent use.
type Client struct {
	proc   *dtutils.Process
	cfg    ClientConfig
	region *alloc.Region
	conns  map[uint32]*conn
	slots  []slot
	free   chan int32
	closed atomic.Bool
	// unhold gives back the hold on proc's memory (Process.Hold): the
	// slots stay mapped until Close, even if proc closes first.
	unhold func()

	resMu   sync.Mutex
	results []Result

	types   typeSet // direct mode's types (Register)
	direct  *xsync.MapOf[Capability, *mapped]
	nEngine atomic.Uint64
	nDirect atomic.Uint64
}

// conn is one queue pair and its leader/follower polling: a waiter that
// takes pollMu polls the completion queue for everyone until its own
// answer arrives, then hands the role to another waiter.
type conn struct {
	c       *Client
	qp      dtutils.QueuePair
	pollMu  sync.Mutex
	wmu     sync.Mutex
	waiters map[*slot]struct{}
	buf     []dtutils.Completion // under pollMu
}

const (
	slotFree = iota
	slotPending
	slotDone
	slotAbandoned // its waiter gave up; the completion frees it
)

type slot struct {
	idx     int32
	in, out alloc.Memory
	state   atomic.Int32
	async   bool
	tag     uint64
	comp    dtutils.Completion
	wake    chan struct{}
}

// NewClient returns a client issuing RDMOs over qps (connected queue pairs
// of proc, at most one per target process, used by nothing else).
func NewClient(proc *dtutils.Process, cfg ClientConfig, qps ...dtutils.QueuePair) (*Client, error) {
	pc := proc.Config().CallBytes // NewProcess filled in the default
	if err := cfg.VerifyConfig(pc); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(pc)
	c := &Client{proc: proc, cfg: cfg, conns: make(map[uint32]*conn), free: make(chan int32, cfg.MaxInflight), direct: xsync.NewMapOf[Capability, *mapped]()}
	for _, qp := range qps {
		r := qp.PeerRank()
		if _, dup := c.conns[r]; dup {
			return nil, fmt.Errorf("%w: two queue pairs to process %d", ErrBadConfig, r)
		}
		c.conns[r] = &conn{c: c, qp: qp, waiters: make(map[*slot]struct{}), buf: make([]dtutils.Completion, 32)}
	}
	var err error
	if c.unhold, err = dtutils.HoldFor(proc, c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	region, err := proc.Registry().NewRegion(2*cfg.MaxInflight*cfg.CallBytes, alloc.RegionConfig{Name: "rdmo-client"})
	if err != nil {
		c.unhold()
		return nil, fmt.Errorf("rdmo: client buffers: %w", err)
	}
	c.region = region
	c.slots = make([]slot, cfg.MaxInflight)
	for i := range c.slots {
		s := &c.slots[i]
		s.idx, s.wake = int32(i), make(chan struct{}, 1)
		if s.in, err = region.Memory(2*i*cfg.CallBytes, cfg.CallBytes); err == nil {
			s.out, err = region.Memory((2*i+1)*cfg.CallBytes, cfg.CallBytes)
		}
		if err != nil {
			proc.Registry().Release(region)
			c.unhold()
			return nil, err
		}
		c.free <- int32(i)
	}
	return c, nil
}

// Close releases the client's buffers; RDMOs still in flight are lost.
// The queue pairs stay open (they are the caller's). If the process closes
// first, the client's calls fail with ErrClosed and its buffers stay mapped
// (it holds them, dtutils.Process.Hold) until Close.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	defer c.unhold()
	return c.proc.Registry().Release(c.region)
}

// MaxInput returns the largest input an RDMO of this client can carry.
func (c *Client) MaxInput() int { return c.cfg.CallBytes - requestHeader }

// Do runs method on the instance cap names and waits for its reply: the
// completion code, the output (a copy) and an error (nil for OK and the
// method's own codes; see Result.Err).
//
// ctx bounds the wait for room (MaxInflight) and for the reply over tcp
// and ofi. Over shm the request is answered inside the post itself: the
// wait is bounded by the method's declared cost at the target and ends
// with ErrTargetLost if the target dies, but ctx cannot cut it short (a
// stopped, not dead, target holds the caller).
func (c *Client) Do(ctx context.Context, cap Capability, method uint16, in []byte) (Code, []byte, error) {
	return c.DoInto(ctx, cap, method, in, nil)
}

// DoInto is Do appending the output to out, allocation-free when out has
// room (for the method's MaxOutput, in direct mode).
func (c *Client) DoInto(ctx context.Context, cap Capability, method uint16, in, out []byte) (Code, []byte, error) {
	if c.cfg.Direct && !c.closed.Load() && len(in) <= c.MaxInput() {
		if m := c.mapping(ctx, cap); m.typ != nil {
			if code, o, ok, err := c.runDirect(m, method, in, out); ok {
				return code, o, err
			}
		}
	}
	return c.engineDo(ctx, cap, method, in, out)
}

// engineDo runs an RDMO at the target's engine.
func (c *Client) engineDo(ctx context.Context, cap Capability, method uint16, in, out []byte) (Code, []byte, error) {
	cn, s, err := c.post(ctx, cap, method, in, false, 0)
	if err != nil {
		return 0, out, err
	}
	if err := cn.wait(ctx, s); err != nil {
		if s.state.CompareAndSwap(slotPending, slotAbandoned) {
			return 0, out, err
		}
		// Answered meanwhile: report it.
	}
	code, o, err := decode(s)
	out = append(out, o...)
	c.release(s)
	return code, out, err
}

// Start posts an RDMO without waiting; its Result, tagged tag, comes from
// Poll or Wait. It waits only for room (MaxInflight).
func (c *Client) Start(ctx context.Context, cap Capability, method uint16, in []byte, tag uint64) error {
	if c.cfg.Direct && !c.closed.Load() && len(in) <= c.MaxInput() {
		if m := c.mapping(ctx, cap); m.typ != nil {
			if code, o, ok, err := c.runDirect(m, method, in, nil); ok {
				c.resMu.Lock()
				c.results = append(c.results, Result{Tag: tag, Code: code, Output: o, Err: err})
				c.resMu.Unlock()
				return nil
			}
		}
	}
	_, _, err := c.post(ctx, cap, method, in, true, tag)
	return err
}

func (c *Client) post(ctx context.Context, cap Capability, method uint16, in []byte, async bool, tag uint64) (*conn, *slot, error) {
	if c.closed.Load() {
		return nil, nil, ErrClosed
	}
	if c.proc.Closed() {
		return nil, nil, errProcessClosed
	}
	cn, ok := c.conns[cap.Process]
	if !ok {
		return nil, nil, fmt.Errorf("%w: process %d", ErrNoRoute, cap.Process)
	}
	if len(in) > c.MaxInput() {
		return nil, nil, fmt.Errorf("%w: %d input bytes, the client's CallBytes allow %d", ErrInputTooLarge, len(in), c.MaxInput())
	}
	var i int32
	select {
	case i = <-c.free:
	default:
		select {
		case i = <-c.free:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	s := &c.slots[i]
	s.async, s.tag = async, tag
	s.state.Store(slotPending)
	n := putRequest(s.in.Bytes(), method, cap.ID, cap.Secret, in)
	req, _ := s.in.Slice(0, n)
	c.nEngine.Add(1)
	err := cn.qp.Post(dtutils.WorkRequest{Op: dtutils.OpCall, WRID: uint64(i), Signaled: true, Local: req, Result: s.out})
	if err != nil {
		c.release(s)
		return nil, nil, fmt.Errorf("%w: %w", transportErr(err), err)
	}
	return cn, s, nil
}

func (c *Client) release(s *slot) {
	s.state.Store(slotFree)
	select {
	case <-s.wake: // a stale hand-over
	default:
	}
	c.free <- s.idx
}

// transportErr maps a dtutils failure to this package's error.
func transportErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dtutils.ErrBusy):
		return ErrBusy
	case errors.Is(err, dtutils.ErrNoOperator):
		return ErrNoEngine
	case errors.Is(err, dtutils.ErrLength):
		return ErrInputTooLarge
	case errors.Is(err, dtutils.ErrConnectionLost), errors.Is(err, dtutils.ErrClosed), errors.Is(err, dtutils.ErrNotConnected):
		return ErrTargetLost
	}
	return ErrMalformed
}

// decode reads slot s's answer.
func decode(s *slot) (Code, []byte, error) {
	if st := s.comp.Status; st != dtutils.StatusSuccess {
		return 0, nil, fmt.Errorf("%w: %w", transportErr(st.Err()), st.Err())
	}
	code, out, err := parseReply(s.out.Bytes()[:s.comp.Bytes])
	if err != nil {
		return 0, nil, err
	}
	return code, out, code.Err()
}

// dispatch hands a completion to its slot.
func (c *Client) dispatch(comp dtutils.Completion) {
	if comp.WRID >= uint64(len(c.slots)) {
		return // not ours; cannot happen on queue pairs the client owns
	}
	s := &c.slots[comp.WRID]
	s.comp = comp
	if s.async {
		code, out, err := decode(s)
		r := Result{Tag: s.tag, Code: code, Output: append([]byte(nil), out...), Err: err}
		c.release(s)
		c.resMu.Lock()
		c.results = append(c.results, r)
		c.resMu.Unlock()
		return
	}
	if s.state.CompareAndSwap(slotPending, slotDone) {
		select {
		case s.wake <- struct{}{}:
		default:
		}
		return
	}
	c.release(s) // abandoned by its waiter
}

// wait returns once s is answered or ctx ends.
func (cn *conn) wait(ctx context.Context, s *slot) error {
	cn.wmu.Lock()
	cn.waiters[s] = struct{}{}
	cn.wmu.Unlock()
	defer func() {
		cn.wmu.Lock()
		delete(cn.waiters, s)
		cn.wmu.Unlock()
	}()
	for s.state.Load() == slotPending {
		if cn.pollMu.TryLock() {
			err := cn.lead(ctx, s)
			cn.pollMu.Unlock()
			cn.handOver(s)
			return err
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// lead polls for everyone until s is answered; pollMu is held.
func (cn *conn) lead(ctx context.Context, s *slot) error {
	for s.state.Load() == slotPending {
		n, err := cn.qp.CQ().Wait(ctx, cn.buf)
		for _, comp := range cn.buf[:n] {
			cn.c.dispatch(comp)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// handOver wakes a waiter still waiting, to take over polling.
func (cn *conn) handOver(self *slot) {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	for w := range cn.waiters {
		if w != self && w.state.Load() == slotPending {
			select {
			case w.wake <- struct{}{}:
			default:
			}
			return
		}
	}
}

// Poll collects finished RDMOs started with Start (polling the queue pairs
// no waiter polls) into dst and returns how many.
func (c *Client) Poll(dst []Result) int {
	for _, cn := range c.conns {
		if cn.pollMu.TryLock() {
			n := cn.qp.CQ().Poll(cn.buf)
			for _, comp := range cn.buf[:n] {
				c.dispatch(comp)
			}
			cn.pollMu.Unlock()
		}
	}
	c.resMu.Lock()
	n := copy(dst, c.results)
	c.results = c.results[:copy(c.results, c.results[n:])]
	c.resMu.Unlock()
	return n
}

// Wait is Poll that waits for at least one result or ctx's end; its polls
// back off to sleeping when nothing comes.
func (c *Client) Wait(ctx context.Context, dst []Result) (int, error) {
	b := dtutils.Backoff{Idle: c.proc.Idle}
	for {
		if n := c.Poll(dst); n > 0 || len(dst) == 0 {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if c.proc.Closed() {
			return 0, errProcessClosed
		}
		b.Wait()
	}
}
