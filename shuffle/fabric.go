package shuffle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// Wiring connects the endpoints of a dsfabric job: every process's send
// endpoints to every process's receive endpoints, over queue pairs of
// providers of their own (the transport dsfabric chose for each pair of
// processes, loop within a process). Make it before dsfabric.Start, in
// every process (it registers its handler), then call Connect in every
// process.
type Wiring struct {
	id   dsfabric.HandlerID
	mu   sync.Mutex
	cond *sync.Cond
	in   map[int][]wireMsg // by sending rank
	sets int               // connection sets made (Connect, Mesh): the next one's number
}

// NewWiring registers the wiring's handler in h.
func NewWiring(h *dsfabric.Handlers) (*Wiring, error) {
	w := &Wiring{in: make(map[int][]wireMsg)}
	w.cond = sync.NewCond(&w.mu)
	id, err := h.Register("shuffle.wire", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		m, err := parseWireMsg(args)
		if err != nil {
			return nil, err
		}
		rank := c.Fabric.Names().Rank(c.Src)
		w.mu.Lock()
		w.in[rank] = append(w.in[rank], m)
		w.cond.Broadcast()
		w.mu.Unlock()
		return nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("shuffle: %w", err)
	}
	w.id = id
	return w, nil
}

// Endpoints is one process's share of a wired shuffle: E send and E
// receive endpoints. Global endpoint indexes, the destinations and sources
// of every endpoint, are rank*E + e.
type Endpoints struct {
	Senders   []*Sender
	Receivers []*Receiver
	provs     []dtutils.Provider
	procs     []*dtutils.Process // SR: the endpoints' own processes
	set       *connSet           // Connect's connections, once wired
	closed    bool               // a second Close does nothing
}

// Close closes the receivers (waiting for their last credits to land),
// then, once every peer process has closed its endpoints of this set too
// (or died), the providers and processes Connect made; finish every
// Sender first (Sender.Close, or its Shuffles). ctx bounds the wait for
// the peers. A second Close does nothing.
func (e *Endpoints) Close(ctx context.Context) error {
	if e.closed {
		return nil
	}
	e.closed = true
	var errs []error
	for _, r := range e.Receivers {
		errs = append(errs, r.Close(ctx))
	}
	if e.set != nil {
		errs = append(errs, e.set.closing(ctx))
	}
	for _, p := range e.provs {
		errs = append(errs, p.Close())
	}
	for _, p := range e.procs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// receive waits for the next message of round from rank.
func (w *Wiring) receive(ctx context.Context, rank, round int) (wireMsg, error) {
	return w.receiveMatch(ctx, rank, func(m wireMsg) bool { return m.Round == round })
}

// receiveMatch waits for the next message from rank that match accepts.
func (w *Wiring) receiveMatch(ctx context.Context, rank int, match func(wireMsg) bool) (wireMsg, error) {
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for i, m := range w.in[rank] {
			if match(m) {
				w.in[rank] = append(w.in[rank][:i], w.in[rank][i+1:]...)
				return m, nil
			}
		}
		if err := ctx.Err(); err != nil {
			return wireMsg{}, err
		}
		w.cond.Wait()
	}
}

// Connect wires this process's share: endpoints send and receive
// endpoints (1: the single-endpoint configuration; the threads per
// process: multi-endpoint), each Sender shared by users SHUFFLE operators.
// Every process of the job calls it with the same arguments.
func (w *Wiring) Connect(ctx context.Context, f *dsfabric.Fabric, cfg Config, endpoints, users int) (*Endpoints, error) {
	return w.connect(ctx, f, cfg, endpoints, users, nil)
}

// connect wires a stage over queue pairs of its own, or over a mesh's.
func (w *Wiring) connect(ctx context.Context, f *dsfabric.Fabric, cfg Config, endpoints, users int, mesh *Mesh) (*Endpoints, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p, r, E := f.Size(), f.Rank(), endpoints
	if E < 1 || users < 1 {
		return nil, fmt.Errorf("%w: %d endpoints, %d users", ErrBadConfig, E, users)
	}
	out := &Endpoints{}
	fail := func(err error) (*Endpoints, error) {
		out.Close(ctx)
		return nil, err
	}
	var set *connSet
	if mesh == nil {
		set = w.newSet(f) // numbered alike in every process: Connect's calls come in one order
	}
	// The endpoints' processes: the fabric's, or for SR one each (an SR
	// endpoint takes its process's shared receive queue for itself).
	sendProc, recvProc := make([]*dtutils.Process, E), make([]*dtutils.Process, E)
	for e := 0; e < E; e++ {
		sendProc[e], recvProc[e] = f.Process(), f.Process()
		if cfg.Design == SR {
			for _, pp := range []**dtutils.Process{&sendProc[e], &recvProc[e]} {
				pc := dtutils.DefaultProcessConfig(uint32(r))
				for pc.ReceiveSlots < p*E*cfg.Depth {
					pc.ReceiveSlots *= 2
				}
				proc, err := dtutils.NewProcess(pc)
				if err != nil {
					return fail(fmt.Errorf("shuffle: an sr endpoint's process: %w", err))
				}
				*pp, out.procs = proc, append(out.procs, proc)
			}
		}
		s, err := NewSender(sendProc[e], cfg, p*E, users)
		if err != nil {
			return fail(err)
		}
		rc, err := NewReceiver(recvProc[e], cfg, p*E)
		if err != nil {
			return fail(err)
		}
		out.Senders, out.Receivers = append(out.Senders, s), append(out.Receivers, rc)
	}
	// Providers: per endpoint process, one per transport dsfabric uses to
	// the peers, and loop (one fabric) for this process's own endpoints.
	provider := newProviders(f, &out.provs).get
	// sendQP[q][a][b]: our sender a to q's receiver b; recvQP[q][b][a]:
	// q's sender a to our receiver b.
	sendQP := make([][][]dtutils.QueuePair, p)
	recvQP := make([][][]dtutils.QueuePair, p)
	for q := 0; q < p; q++ {
		sendQP[q], recvQP[q] = grid(E), grid(E)
		for a := 0; a < E; a++ {
			for b := 0; b < E; b++ {
				if mesh != nil {
					sendQP[q][a][b], recvQP[q][b][a] = mesh.send[q], mesh.recv[q]
					continue
				}
				ps, err := provider(sendProc[a], q)
				if err != nil {
					return fail(err)
				}
				pr, err := provider(recvProc[b], q)
				if err != nil {
					return fail(err)
				}
				if sendQP[q][a][b], err = ps.NewQueuePair(); err != nil {
					return fail(err)
				}
				if recvQP[q][b][a], err = pr.NewQueuePair(); err != nil {
					return fail(err)
				}
			}
		}
	}
	src := dsfabric.ThreadID(r * f.Names().ThreadsPerProcess)
	send := func(q int, m wireMsg) error {
		b, _ := json.Marshal(m)
		return f.CallService(src, q, w.id, b, nil)
	}
	// Round 1, to each peer q, entries [a*E+b]: Send, our end of our
	// sender a → q's receiver b; Recv, our end of q's sender a → our
	// receiver b; Offers, our receiver b's ring for q's sender a.
	for q := 0; q < p; q++ {
		m := wireMsg{Round: 1, Endpoints: E}
		for a := 0; a < E; a++ {
			for b := 0; b < E; b++ {
				if mesh == nil {
					m.Send = append(m.Send, sendQP[q][a][b].Endpoint())
					m.Recv = append(m.Recv, recvQP[q][b][a].Endpoint())
				}
				m.Offers = append(m.Offers, out.Receivers[b].Offer(q*E+a))
			}
		}
		if q == r {
			if err := wireSelf(out, m, sendQP[q], recvQP[q], E, r, mesh == nil); err != nil {
				return fail(err)
			}
			continue
		}
		if err := send(q, m); err != nil {
			return fail(err)
		}
	}
	// Connect to each peer's queue pairs, attach our senders, send round 2.
	for q := 0; q < p; q++ {
		if q == r {
			continue
		}
		m, err := w.receive(ctx, q, 1)
		if err != nil {
			return fail(err)
		}
		want := E * E
		if mesh != nil {
			want = 0
		}
		if m.Endpoints != E || len(m.Send) != want || len(m.Recv) != want || len(m.Offers) != E*E {
			return fail(fmt.Errorf("%w: rank %d wired %d endpoints (%d queue pairs), this rank %d (%d)", ErrBadOffer, q, m.Endpoints, len(m.Send), E, want))
		}
		if mesh == nil {
			var qps []dtutils.QueuePair
			var remote [][]byte
			for a := 0; a < E; a++ {
				for b := 0; b < E; b++ {
					// From q: Recv[a*E+b] is its end of our sender a → its
					// receiver b; Send[a*E+b] its end of its sender a → our
					// receiver b.
					qps = append(qps, sendQP[q][a][b], recvQP[q][b][a])
					remote = append(remote, m.Recv[a*E+b], m.Send[a*E+b])
				}
			}
			if err := dtutils.ConnectAll(qps, remote); err != nil {
				return fail(fmt.Errorf("shuffle: connecting to rank %d: %w", q, err))
			}
		}
		back := wireMsg{Round: 2, Endpoints: E}
		for a := 0; a < E; a++ {
			for b := 0; b < E; b++ {
				// Offers[a*E+b]: q's receiver b's ring for our sender a.
				o, err := out.Senders[a].Attach(q*E+b, sendQP[q][a][b], m.Offers[a*E+b])
				if err != nil {
					return fail(err)
				}
				back.Offers = append(back.Offers, o)
			}
		}
		if err := send(q, back); err != nil {
			return fail(err)
		}
	}
	// Round 2: the peers' senders' credit words for our receivers.
	for q := 0; q < p; q++ {
		if q == r {
			continue
		}
		m, err := w.receive(ctx, q, 2)
		if err != nil {
			return fail(err)
		}
		if len(m.Offers) != E*E {
			return fail(fmt.Errorf("%w: rank %d sent %d attachments", ErrBadOffer, q, len(m.Offers)))
		}
		for a := 0; a < E; a++ {
			for b := 0; b < E; b++ {
				if err := out.Receivers[b].Attach(q*E+a, recvQP[q][b][a], m.Offers[a*E+b]); err != nil {
					return fail(err)
				}
			}
		}
	}
	out.set = set
	return out, nil
}

// connSet is a set of connections between the job's processes that
// closes together (a Connect's, a Mesh's): set numbers it among its
// wiring's.
type connSet struct {
	w   *Wiring
	f   *dsfabric.Fabric
	set int
}

func (w *Wiring) newSet(f *dsfabric.Fabric) *connSet {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sets++
	return &connSet{w: w, f: f, set: w.sets}
}

// closingPoll is how often closing looks whether a peer it waits for died.
const closingPoll = 20 * time.Millisecond

// closing is the close handshake: it tells every peer process that this
// process's endpoints on the set are closed, then waits until each has
// said the same or died. Closing a connection on which the peer still
// posts (a probe, a last credit, the answer to one) fails the peer's
// operation: over tcp a rank that finished its stage first made the other
// fail with ErrPeerLost (TestShuffleSmoke, 1 run in about 30 under load).
// Not Fabric.Barrier: barriers match by count, so two sets closed in
// different orders by two processes would release each other's.
func (c *connSet) closing(ctx context.Context) error {
	f := c.f
	p, r := f.Size(), f.Rank()
	b, _ := json.Marshal(wireMsg{Round: 4, Endpoints: 1, Set: c.set})
	src := dsfabric.ThreadID(r * f.Names().ThreadsPerProcess)
	told := make([]bool, p)
	for q := 0; q < p; q++ {
		// A peer that cannot be told has died: nothing to wait for.
		told[q] = q != r && f.CallService(src, q, c.w.id, b, nil) == nil
	}
	mine := func(m wireMsg) bool { return m.Round == 4 && m.Set == c.set }
	for q := 0; q < p; q++ {
		for told[q] {
			wctx, cancel := context.WithTimeout(ctx, closingPoll)
			_, err := c.w.receiveMatch(wctx, q, mine)
			cancel()
			switch _, dead := f.DeadRanks()[q]; {
			case err == nil || dead:
				told[q] = false
			case ctx.Err() != nil:
				return fmt.Errorf("shuffle: waiting for process %d to close its endpoints: %w", q, ctx.Err())
			}
		}
	}
	return nil
}

// wireSelf connects this process's senders to its own receivers (loop),
// connecting their queue pairs first unless they are a mesh's.
func wireSelf(out *Endpoints, m wireMsg, send, recv [][]dtutils.QueuePair, E, r int, connect bool) error {
	for a := 0; a < E; a++ {
		for b := 0; b < E; b++ {
			if connect {
				if err := dtutils.ConnectAll([]dtutils.QueuePair{send[a][b], recv[b][a]}, [][]byte{recv[b][a].Endpoint(), send[a][b].Endpoint()}); err != nil {
					return err
				}
			}
			back, err := out.Senders[a].Attach(r*E+b, send[a][b], m.Offers[a*E+b])
			if err != nil {
				return err
			}
			if err := out.Receivers[b].Attach(r*E+a, recv[b][a], back); err != nil {
				return err
			}
		}
	}
	return nil
}

// Mesh is a dsfabric job's connections for the shuffles of a plan: one
// queue pair per pair of processes (a loop pair within each), shared by
// every stage wired over it (seed 000's multiplexing). Each stage keeps
// its own endpoints, rings, credits and end of stream. Make it with
// Wiring.Mesh in every process, then wire the stages with Mesh.Stage, in
// the same order in every process.
type Mesh struct {
	w          *Wiring
	f          *dsfabric.Fabric
	send, recv []dtutils.QueuePair // by peer: the ends our senders and receivers attach to (Share)
	provs      []dtutils.Provider
	set        *connSet // once wired
	closed     bool     // a second Close does nothing
}

// Mesh connects this process to every other with one queue pair (over the
// transport dsfabric uses to it). Every process of the job calls it.
func (w *Wiring) Mesh(ctx context.Context, f *dsfabric.Fabric) (*Mesh, error) {
	p, r := f.Size(), f.Rank()
	m := &Mesh{w: w, f: f, send: make([]dtutils.QueuePair, p), recv: make([]dtutils.QueuePair, p)}
	fail := func(err error) (*Mesh, error) {
		m.Close(ctx)
		return nil, err
	}
	set := w.newSet(f)
	provs := newProviders(f, &m.provs)
	qps := make([]dtutils.QueuePair, p)
	for q := 0; q < p; q++ {
		pr, err := provs.get(f.Process(), q)
		if err != nil {
			return fail(err)
		}
		if q == r {
			qa, qb, err := dtutils.ConnectPair(pr, pr)
			if err != nil {
				return fail(err)
			}
			m.send[q], m.recv[q] = Share(qa), Share(qb)
			continue
		}
		if qps[q], err = pr.NewQueuePair(); err != nil {
			return fail(err)
		}
		b, _ := json.Marshal(wireMsg{Round: 3, Endpoints: 1, Send: [][]byte{qps[q].Endpoint()}})
		if err := f.CallService(dsfabric.ThreadID(r*f.Names().ThreadsPerProcess), q, w.id, b, nil); err != nil {
			return fail(err)
		}
	}
	var peers []dtutils.QueuePair
	var remote [][]byte
	for q := 0; q < p; q++ {
		if q == r {
			continue
		}
		msg, err := w.receive(ctx, q, 3)
		if err != nil {
			return fail(err)
		}
		peers, remote = append(peers, qps[q]), append(remote, msg.Send[0])
	}
	if err := dtutils.ConnectAll(peers, remote); err != nil {
		return fail(fmt.Errorf("shuffle: mesh: %w", err))
	}
	for q := 0; q < p; q++ {
		if q != r {
			m.send[q] = Share(qps[q])
			m.recv[q] = m.send[q]
		}
	}
	m.set = set
	return m, nil
}

// Stage wires a stage of the plan over the mesh's connections, as
// Wiring.Connect does over connections of its own. Designs WR and RD; SR
// endpoints need processes of their own, so SR stages use Connect. After
// the mesh's Close it fails with ErrClosed.
func (m *Mesh) Stage(ctx context.Context, cfg Config, endpoints, users int) (*Endpoints, error) {
	if m.closed {
		// Its connections are closed: the stage would wire nothing.
		return nil, fmt.Errorf("%w: the mesh was closed", ErrClosed)
	}
	if cfg.withDefaults().Design == SR {
		return nil, fmt.Errorf("%w: an sr stage needs processes of its own; wire it with Wiring.Connect", ErrBadConfig)
	}
	return m.w.connect(ctx, m.f, cfg, endpoints, users, m)
}

// Close closes the mesh's connections once every peer process has closed
// its mesh too (or died); close every stage's Endpoints first. ctx bounds
// the wait for the peers. A second Close does nothing.
func (m *Mesh) Close(ctx context.Context) error {
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	if m.set != nil {
		errs = append(errs, m.set.closing(ctx))
	}
	for _, p := range m.provs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// providers makes and keeps a wiring's providers: per process and
// transport, the one dsfabric uses to each peer, and loop (one fabric)
// within this process; each new one is appended to *all.
type providers struct {
	f    *dsfabric.Fabric
	loop *dtutils.LoopFabric
	by   map[provKey]dtutils.Provider
	all  *[]dtutils.Provider
}

type provKey struct {
	proc *dtutils.Process
	t    string
}

func newProviders(f *dsfabric.Fabric, all *[]dtutils.Provider) *providers {
	return &providers{f: f, loop: dtutils.NewLoopFabric(), by: map[provKey]dtutils.Provider{}, all: all}
}

// get returns proc's provider towards process q.
func (ps *providers) get(proc *dtutils.Process, q int) (dtutils.Provider, error) {
	t := ps.f.Transport(q)
	if q == ps.f.Rank() {
		t = "loop"
	}
	if pr, ok := ps.by[provKey{proc, t}]; ok {
		return pr, nil
	}
	var pr dtutils.Provider
	var err error
	switch t {
	case "loop":
		pr = ps.loop.NewProvider(proc)
	case "shm":
		pr, err = dtutils.NewSHM(proc, dtutils.SHMConfig{Logger: ps.f.Logger()})
	case "tcp":
		pr, err = dtutils.NewTCP(proc, ps.f.TCPConfig())
	case "ofi":
		pr, err = dtutils.NewOFI(proc, ps.f.OFIConfig())
	default:
		err = fmt.Errorf("%w: no shuffle over transport %q yet", ErrBadConfig, t)
	}
	if err != nil {
		return nil, err
	}
	ps.by[provKey{proc, t}] = pr
	*ps.all = append(*ps.all, pr)
	return pr, nil
}

func grid(n int) [][]dtutils.QueuePair {
	g := make([][]dtutils.QueuePair, n)
	for i := range g {
		g[i] = make([]dtutils.QueuePair, n)
	}
	return g
}
