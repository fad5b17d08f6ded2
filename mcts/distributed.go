package mcts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/riutils"
)

// Stats counts one worker thread's work over a job.
type Stats struct {
	Thread dsfabric.ThreadID
	// Playouts run, leaves evaluated, nodes created here, rollouts started
	// here, and calls received through the thread's messengers.
	Playouts, Leaves, Nodes, Rollouts, Calls uint64
	// SimulateNs is the time spent in playouts, IdleNs the time the loop
	// waited for work during searches (waits shorter than 20 ms).
	SimulateNs, IdleNs uint64
	// Stolen counts the leaves (of Leaves) this thread evaluated for a
	// thread of another process (Config.NoSteal).
	Stolen uint64
}

const numStats = 8

func (s *Stats) words() [numStats]uint64 {
	return [numStats]uint64{s.Playouts, s.Leaves, s.Nodes, s.Rollouts, s.Calls, s.SimulateNs, s.IdleNs, s.Stolen}
}

func statsOf(t uint32, w [numStats]uint64) Stats {
	return Stats{Thread: dsfabric.ThreadID(t), Playouts: w[0], Leaves: w[1], Nodes: w[2], Rollouts: w[3], Calls: w[4], SimulateNs: w[5], IdleNs: w[6], Stolen: w[7]}
}

// ErrClosed is returned by Search after Close.

// Distributed is the tree-parallel search of docs/design.md §7 over a job of
// processes. Every rank calls Start with the same arguments; rank 0 then
// calls Search for each move and Close at the end, the others call Serve,
// which returns once rank 0 has closed, then Close.
type Distributed struct {
	cfg     Config
	game    Game
	f       *dsfabric.Fabric
	log     *slog.Logger
	ids     [numKinds]dsfabric.HandlerID
	wakeID  dsfabric.HandlerID // mcts.wake: a send-based call that only rings a process's doorbell
	threads int                // per process
	solo    soloLocks          // one worker thread per process: node, queue and arena locks are skipped
	all     int                // in the job
	base    dsfabric.ThreadID
	workers []*worker
	ready   chan struct{}
	openCtx context.Context // Start's, while it waits for opened: the threads' Open honours it
	opened  sync.WaitGroup  // local threads whose messengers are set up (run)
	exited  sync.WaitGroup

	phase    atomic.Pointer[phase]
	requests chan request // rank 0: to thread 0
	errOnce  sync.Once
	err      atomic.Pointer[error]
	failed   chan struct{}
	stats    chan []Stats
	closed   atomic.Bool
}

// phase is one move's search, in the root's process.
type phase struct {
	epoch     uint32
	budget    atomic.Int64 // rollouts to start; 0 once the time limit passed
	deadline  time.Time    // the time limit (zero: none)
	timedOut  bool         // the limit passed (drive's thread only)
	inFlight  int64
	root      ref
	started   atomic.Int64
	completed atomic.Int64
	begun     time.Time
	reply     chan Result
	abandoned *atomic.Bool // the Search gave up (its context ended)
}

type request struct {
	state     State
	limit     time.Duration // the phase's time limit; 0: Budget alone
	reply     chan Result
	abandoned *atomic.Bool // set when the Search gives up
	stop      bool
}

// worker is one worker thread's side of the search.
type worker struct {
	d         *Distributed
	id        dsfabric.ThreadID
	m         *riutils.Messengers
	opened    int64 // messengers set up before Start returned (run)
	agg       *riutils.Aggregator
	rng       *rand.Rand
	arena     arena
	simMu     spinMutex
	sims      []simRequest
	queued    atomic.Int32 // len(sims), to look at without the lock
	todo      []action
	later     []action // actions on a node another thread held: next round
	dirty     []*node
	buf       []byte // a call's arguments, reused
	stateBuf  []byte // a child state's wire form, reused
	stats     Stats
	stop      bool
	stealing  bool      // a steal is out, its gave not yet back
	nextSteal time.Time // after a steal that got nothing: not before then
	epoch     uint32    // the newest phase this thread has seen a call of
	// thread 0 of rank 0 only
	gathered []Stats
	closing  chan []Stats
	epochs   uint32 // the last phase started
}

type simRequest struct {
	n     *node
	epoch uint32
}

// Start starts the job described by fc (Handlers and Worker are set here;
// other fields are the caller's) and returns the search. Every process of
// the job runs the same call; each returns once every worker thread of the
// job has set up its messengers to the threads its searches call
// (riutils.Messengers.Open), so that no search pays for that set-up: the
// threads of the other processes, or every thread with cfg.NoShortcut
// (with the shortcut a thread works on its own process's nodes directly).
// That is T·(T−T/P) messengers for a job of P processes of T/P threads each
// (T² with NoShortcut; none for one process), each with cfg.Messaging's
// ChunksPerAllocation chunks in its destination's memory, faulted in at
// once: 8 MiB for 2×1 at the defaults (2 of 2 MiB), 512 MiB for 2×8, which
// a search reaches anyway once each thread has called each other thread a
// few MiB's worth; a large job sets smaller chunks
// (Config.Messaging.ChunkSize). ctx bounds the whole start, that set-up
// included: once it ends, Start returns its error and closes the fabric.
func Start(ctx context.Context, game Game, cfg Config, fc dsfabric.Config) (*Distributed, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultConfig().ProgressEvery
	}
	d := &Distributed{cfg: cfg, game: game, log: fc.Logger, ready: make(chan struct{}), requests: make(chan request, 1), failed: make(chan struct{}), stats: make(chan []Stats, 1)}
	if d.log == nil {
		d.log = slog.Default()
	}
	if fc.Handlers == nil {
		fc.Handlers = dsfabric.NewHandlers()
	}
	for k := uint8(0); k < numKinds; k++ {
		id, err := fc.Handlers.Register("mcts."+kindNames[k], d.handler(k))
		if err != nil {
			return nil, err
		}
		d.ids[k] = id
	}
	wakeID, err := fc.Handlers.Register("mcts.wake", func(*dsfabric.Call, []byte) ([]byte, error) { return nil, nil })
	if err != nil {
		return nil, err
	}
	d.wakeID = wakeID
	fc.Worker = nil
	rc := cfg.Messaging
	if rc == (riutils.Config{}) {
		rc = riutils.DefaultConfig()
	}
	job, err := riutils.Start(ctx, fc, rc, d.run)
	if err != nil {
		return nil, err
	}
	f := job.Fabric
	d.f = f
	names := f.Names()
	d.threads = names.ThreadsPerProcess
	d.all = names.Threads()
	d.base, _ = names.Thread(f.Rank(), 0)
	if d.cfg.InFlight == 0 {
		// Calls between processes take longer than local ones: more
		// rollouts in flight keep every thread busy (measured on 2×1:
		// 32 in flight gave 22 % more simulations/ms than 16).
		d.cfg.InFlight = 8 * d.all * names.Size
	}
	if d.cfg.Seed == 0 {
		d.cfg.Seed = uint64(time.Now().UnixNano())
	}
	d.solo = d.threads == 1
	d.workers = make([]*worker, d.threads)
	for i := range d.workers {
		id := d.base + dsfabric.ThreadID(i)
		d.workers[i] = &worker{d: d, id: id, rng: rand.New(rand.NewPCG(seedOf(d.cfg.Seed, uint64(id)), 2))}
		d.workers[i].arena.solo = d.solo
	}
	if f.Rank() == 0 {
		d.workers[0].closing = make(chan []Stats, 1)
	}
	d.exited.Add(d.threads)
	d.opened.Add(d.threads)
	openCtx, cancelOpen := context.WithCancel(ctx)
	defer cancelOpen() // every thread has opened (or failed to) by the time Start returns
	d.openCtx = openCtx
	close(d.ready)
	if err := d.awaitOpened(ctx); err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

// awaitOpened returns once every thread of the job has set up its
// messengers to every thread (run): each is a round trip to the
// destination's process, 0.5–4 ms on a 2-core machine, which the first
// rollouts of the first search paid otherwise (a traced 2×1 run spent
// 4.3 ms on rank 0's first call to rank 1).
func (d *Distributed) awaitOpened(ctx context.Context) error {
	d.opened.Wait()
	if err := d.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.failed: // a thread elsewhere in the job failed later
		case <-d.f.Done():
		case <-ctx.Done():
		}
		cancel()
	}()
	if err := d.f.Barrier(ctx); err != nil {
		if e := d.Err(); e != nil {
			return e
		}
		return fmt.Errorf("mcts: waiting for every process's messengers: %w", err)
	}
	return nil
}

// Fabric returns the job's fabric.
func (d *Distributed) Fabric() *dsfabric.Fabric { return d.f }

// Rank returns this process's rank; rank 0 drives the search.
func (d *Distributed) Rank() int { return d.f.Rank() }

// Config returns the configuration in use (defaults filled).
func (d *Distributed) Config() Config { return d.cfg }

func (d *Distributed) fail(err error) {
	d.errOnce.Do(func() {
		d.err.Store(&err)
		close(d.failed)
	})
}

// Err returns the error that stopped the search, if any.
func (d *Distributed) Err() error {
	if p := d.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Search runs one phase from state on rank 0: cfg.Budget rollouts started
// by the threads of rank 0 (where the root lives) and backpropagated to the
// root, or fewer when cfg.MoveTime runs out first, and returns the most
// visited child. When ctx ends first, Search returns its error and the phase
// ends without waiting for the rollouts under way.
func (d *Distributed) Search(ctx context.Context, state State) (Result, error) {
	return d.SearchTime(ctx, state, d.cfg.MoveTime)
}

// SearchTime is Search with its own time limit instead of cfg.MoveTime (0:
// Budget alone; negative: ErrBadConfig, as for MoveTime): a GUI's clock
// gives each move a different one. At least one rollout comes back before
// the limit can end the phase.
func (d *Distributed) SearchTime(ctx context.Context, state State, limit time.Duration) (Result, error) {
	if d.f.Rank() != 0 {
		return Result{}, fmt.Errorf("%w (this is rank %d)", ErrNotRoot, d.f.Rank())
	}
	if limit < 0 {
		return Result{}, fmt.Errorf("%w: time limit %v (want ≥ 0)", ErrBadConfig, limit)
	}
	if d.closed.Load() {
		return Result{}, ErrClosed
	}
	if state.Winner() >= 0 {
		return Result{}, ErrGameOver
	}
	req := request{state: state.Clone(), limit: limit, reply: make(chan Result, 1), abandoned: new(atomic.Bool)}
	select {
	case d.requests <- req:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-d.failed:
		return Result{}, d.Err()
	}
	select {
	case r := <-req.reply:
		return r, nil
	case <-ctx.Done():
		// The phase ends without waiting for its budget, so that the next
		// Search or Close need not wait for it either.
		req.abandoned.Store(true)
		return Result{}, ctx.Err()
	case <-d.failed:
		return Result{}, d.Err()
	}
}

// Serve waits, on ranks other than 0, until rank 0 closes the search (or the
// job fails).
func (d *Distributed) Serve(ctx context.Context) error {
	done := make(chan struct{})
	go func() { d.exited.Wait(); close(done) }()
	select {
	case <-done:
		return d.Err()
	case <-ctx.Done():
		return ctx.Err()
	case <-d.failed:
		return d.Err()
	}
}

// Close ends the search. On rank 0 it stops every worker thread of the job
// and returns their statistics (in thread order); then, on every rank, it
// closes the fabric.
func (d *Distributed) Close() ([]Stats, error) {
	var stats []Stats
	var err error
	if d.f.Rank() == 0 && d.closed.CompareAndSwap(false, true) && d.Err() == nil {
		req := request{stop: true}
		d.requests <- req
		select {
		case stats = <-d.workers[0].closing:
		case <-d.failed:
			err = d.Err()
		case <-time.After(30 * time.Second):
			err = errors.New("mcts: worker threads did not report their statistics")
		}
	}
	if cerr := d.f.Close(); err == nil {
		err = cerr
	}
	return stats, err
}

// handler returns the handler of calls of kind: it decodes the call and
// queues it for the thread it runs on (handlers never send).
func (d *Distributed) handler(kind uint8) dsfabric.HandlerFunc {
	return func(c *dsfabric.Call, args []byte) ([]byte, error) {
		a, err := decode(kind, args)
		if err != nil {
			return nil, err
		}
		w := d.local(c.Dst)
		if w == nil {
			return nil, fmt.Errorf("%w: thread %d is not in this process", ErrMessage, c.Dst)
		}
		a.owner = uint32(c.Dst)
		if kind == kindCreate || kind == kindEval {
			if a.state, err = d.game.Decode(c.Buffer); err != nil {
				return nil, fmt.Errorf("%w: %s state: %w", ErrMessage, kindNames[kind], err)
			}
		}
		w.todo = append(w.todo, a)
		return nil, nil
	}
}

// called returns the threads that a worker of this process calls during a
// search (send): every thread of the job with NoShortcut, else those of
// the other processes.
func (d *Distributed) called() []dsfabric.ThreadID {
	var ts []dsfabric.ThreadID
	for i := range d.all {
		if t := dsfabric.ThreadID(i); d.cfg.NoShortcut || d.local(t) == nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// local returns the worker of thread t if it is in this process.
func (d *Distributed) local(t dsfabric.ThreadID) *worker {
	i := int(t) - int(d.base)
	if i < 0 || i >= len(d.workers) {
		return nil
	}
	return d.workers[i]
}

// run is the body of every worker thread.
func (d *Distributed) run(fw *dsfabric.Worker, m *riutils.Messengers) {
	<-d.ready // the search's own state, set up once Start returns
	w := d.local(fw.ID())
	defer d.exited.Done()
	w.m = m
	var err error
	w.agg, err = m.Aggregator(riutils.AggregatorConfig{Mode: d.cfg.Mode})
	if err == nil {
		// Set up now, outside any search, the messengers to every thread
		// whose nodes this one works on by calls (send): those of other
		// processes, all with NoShortcut. Calls within the process then
		// come only at Close (stop, stats), set up lazily.
		ctx := d.openCtx
		if d.cfg.beforeOpen != nil {
			d.cfg.beforeOpen(ctx)
		}
		err = m.Open(ctx, d.called()...)
		w.opened = m.Stats().Opened
	}
	d.opened.Done()
	if err != nil {
		d.fail(fmt.Errorf("mcts: thread %d: %w", fw.ID(), err))
		return
	}
	// Stay awake polling for hotWindow after the last work: a search is on
	// and the next call is microseconds away, a timer sleep would cost a
	// millisecond here, and yielding a locked thread hands the processor
	// over through futexes. Then back off.
	idle := dtutils.HotWait{Spin: hotWindow, Yield: hotWindow}
	var lastProgress time.Time
	for round := 0; !w.stop; round++ {
		w.resume()
		n := m.Poll() + fw.Poll()
		n += w.runTodo()
		for i := 0; i < simsPerRound && w.simulate(); i++ {
			n++
		}
		if w.id == 0 {
			n += w.drive(&lastProgress)
		}
		n += w.startRollouts()
		n += w.runTodo()
		if n == 0 && idle.Hot() {
			// Within a search (work came less than hotWindow ago):
			// between searches nobody has leaves to give.
			w.askForLeaves()
		}
		w.flushDirty()
		if err := w.agg.Flush(); err != nil {
			d.fail(fmt.Errorf("mcts: thread %d: %w", w.id, err))
		}
		if err := m.Err(); err != nil {
			d.fail(err)
		}
		if round%64 == 0 || n == 0 {
			// A select locks both channels: not on every busy round,
			// where threads of one process would contend for them.
			select {
			case <-d.f.Done():
				return
			case <-d.failed:
				return
			default:
			}
			if err := d.f.DeadErr(); err != nil {
				d.fail(fmt.Errorf("mcts: %w", err))
				return
			}
		}
		if n == 0 {
			if idle.Hot() {
				idle.Wait()
			} else {
				// Asleep between searches: on the process's doorbell, which
				// the next phase's wake call rings (wakeJob), so that the
				// search does not start with this thread out for a timer
				// sleep (a millisecond here: in one traced search the
				// root's process ran 200 rollouts before its first create
				// reached a sleeping rank 1).
				d.f.Process().AwaitRecv(context.Background(), 0, time.Millisecond, nil)
			}
			continue
		}
		if idle.Waiting() {
			// Count waits within a search, not the gaps between searches.
			if d := idle.Waited(); d < hotWindow {
				w.stats.IdleNs += uint64(d)
			}
			idle.Reset()
		}
	}
	_ = w.agg.Flush()
}

// A round of the worker loop runs up to simsPerRound leaf evaluations, then
// flushes the aggregator: a batch holds a round's calls.
const simsPerRound = 2

// hotWindow is how long a worker thread stays awake after its last work
// before its loop backs off to sleeping: long enough to bridge the gaps of a
// running search, short enough that an idle job costs nothing.
const hotWindow = 20 * time.Millisecond

// runTodo does the queued actions (more may be queued meanwhile).
func (w *worker) runTodo() int {
	n := 0
	for i := 0; i < len(w.todo); i++ {
		a := w.todo[i]
		w.todo[i].state = nil
		w.epoch = max(w.epoch, a.epoch())
		if w.do(&a) {
			n++
		}
	}
	w.todo = w.todo[:0]
	return n
}

// send hands an action to the thread owning its node: done here when that
// thread shares this process and shortcuts are on, else sent as a call.
func (w *worker) send(dst dsfabric.ThreadID, a action) {
	a.owner = uint32(dst)
	if !w.d.cfg.NoShortcut && w.d.local(dst) != nil && a.kind != kindStop && a.kind != kindStats {
		w.todo = append(w.todo, a)
		return
	}
	w.buf = a.encode(w.buf[:0])
	var err error
	if a.kind == kindCreate || a.kind == kindEval {
		st, eerr := a.state.AppendBinary(w.stateBuf[:0])
		if eerr != nil {
			w.d.fail(fmt.Errorf("mcts: encoding a state: %w", eerr))
			return
		}
		w.stateBuf = st
		err = w.agg.CallBuffer(dst, w.d.ids[a.kind], w.buf, st)
	} else {
		err = w.agg.Call(dst, w.d.ids[a.kind], w.buf)
	}
	if err != nil {
		w.d.fail(fmt.Errorf("mcts: thread %d calling thread %d: %w", w.id, dst, err))
	}
}

// lookup returns node r of epoch e, resetting the owner's arena on a newer
// epoch; nil for a stale call.
func (w *worker) lookup(r ref, e uint32) *node {
	o := w.d.local(dsfabric.ThreadID(r.owner))
	if o == nil {
		return nil
	}
	return o.arena.get(e, r.idx)
}

// add puts n in thread owner's arena for epoch e and returns its name.
func (w *worker) add(owner uint32, e uint32, n *node) (ref, bool) {
	idx, ok := w.d.local(dsfabric.ThreadID(owner)).arena.add(e, n)
	return ref{owner: owner, idx: idx}, ok
}

// do runs an action: one method per kind of call. A switch and not a table
// of methods: through an indirect call every action would escape to the
// heap (measured: 8 % fewer simulations/ms on the demo, from the GC).
// It reports whether the action was work: a steal that got nothing, or
// gave nothing, is not (idle threads ask each other while they wait).
func (w *worker) do(a *action) bool {
	switch a.kind {
	case kindSteal:
		return w.giveLeaves(a)
	case kindEval:
		w.takeLeaf(a)
	case kindGave:
		w.stealing = false
		if a.gave() == 0 {
			w.nextSteal = time.Now().Add(stealPause)
			return false
		}
		return true
	case kindDescend:
		return w.descend(a)
	case kindCreate:
		w.create(a)
	case kindCreated:
		return w.created(a)
	case kindBackprop:
		return w.backprop(a)
	case kindStop:
		w.stopCall(a)
	case kindStats:
		w.gatherStats(a)
	}
	return true
}

// descend selects down from a node of this thread, count times: a finished
// game simulates again, an unexpanded slot is expanded (its child created
// on a random thread), a slot whose child is on its way waits (deferred),
// and a created child gets the rollout. It reports false when it put
// the rest off (postpone).
//
// Up to descendBatch selections are made under one hold of the node's lock,
// and selections of one created child go on as one call with their count:
// every rollout passes the root, and with 16 threads its lock was taken a
// thousand times a millisecond and waiters parked their threads (1×16
// profile on the lent 16-core machine: 40 % of the cores' time off-CPU).
func (w *worker) descend(a *action) (done bool) {
	d, e := w.d, a.epoch()
	idx, count := a.descend()
	at := ref{a.owner, idx}
	n := w.lookup(at, e)
	if n == nil {
		return true
	}
	playouts := uint32(d.cfg.Playouts)
	var ps picks
	for count > 0 {
		ps.n = 0
		sims := 0
		if !w.d.solo.tryLock(&n.mu) {
			rest := descendCall(e, idx, count)
			rest.owner = a.owner
			return w.postpone(rest)
		}
		for ; count > 0 && ps.n < descendBatch; count-- {
			if n.winner >= 0 {
				sims++
				continue
			}
			i, expand := n.choose(d.cfg.C, playouts, w.rng)
			s := &n.slots[i]
			switch {
			case expand:
				ps.a[ps.n] = pick{slot: uint32(i), move: s.move, expand: true, count: 1}
				ps.n++
			case s.created:
				ps.follow(s.child)
			default:
				s.deferred++
			}
		}
		w.d.solo.unlock(&n.mu)
		for ; sims > 0; sims-- {
			w.queueSim(n, e)
		}
		for _, p := range ps.a[:ps.n] {
			if !p.expand {
				w.send(dsfabric.ThreadID(p.child.owner), descendCall(e, p.child.idx, p.count))
				continue
			}
			child := n.state.Clone()
			if err := child.Play(p.move); err != nil {
				d.fail(fmt.Errorf("mcts: the game refused its own move: %w", err))
				return true
			}
			w.send(w.place(n.depth+1), createCall(e, at, p.slot, n.depth+1, child))
		}
	}
	return true
}

// postpone puts off an action whose node another thread of the process
// holds to this thread's next round, which does queued leaves meanwhile,
// and reports false: a postponed action is no work done. Waiting
// for the lock instead was most of what a 1×2 search spent over 1×1 on
// the same leaves (profile of 6 moves at 200 000 rollouts: 13.97 s of CPU
// against 11.80 s, spinMutex.Lock 0.98 s of it, 0.67 s under descend and
// backprop polling the root's lock; postponed: 12.17 s).
func (w *worker) postpone(a action) bool {
	w.later = append(w.later, a)
	return false
}

// resume queues the actions postponed in the last round.
func (w *worker) resume() {
	w.todo, w.later = append(w.todo, w.later...), w.later[:0]
}

// descendBatch is how many selections descend makes under one hold of a
// node's lock.
const descendBatch = 16

// pick is one outcome of a selection in descend: a slot to expand, or a
// created child that count rollouts go on to.
type pick struct {
	child  ref
	slot   uint32
	move   Move
	count  uint32
	expand bool
}

// picks are the outcomes of one hold of a node's lock.
type picks struct {
	a [descendBatch]pick
	n int
}

// follow counts one more rollout to child: a pick of the same child takes
// it, else a new one.
func (ps *picks) follow(child ref) {
	for i := range ps.a[:ps.n] {
		if p := &ps.a[i]; !p.expand && p.child == child {
			p.count++
			return
		}
	}
	ps.a[ps.n] = pick{child: child, count: 1}
	ps.n++
}

// place chooses the thread that will own a new node depth moves below the
// root (Config.SpreadDepth): any thread of the job near the root, a thread
// of this process (the parent's) below. The creator runs on the parent's
// process, so "this process" is the parent's.
func (w *worker) place(depth uint32) dsfabric.ThreadID {
	d := w.d
	if s := d.cfg.SpreadDepth; s > 0 && depth > uint32(s) {
		return d.base + dsfabric.ThreadID(w.rng.IntN(d.threads))
	}
	return dsfabric.ThreadID(w.rng.IntN(d.all))
}

// create makes a node on this thread, tells its parent where it is, and
// simulates from it.
func (w *worker) create(a *action) {
	e := a.epoch()
	parent, slot, depth := a.create()
	n := newNode(a.state, parent, slot, false, w.rng)
	n.epoch, n.depth = e, depth
	at, ok := w.add(a.owner, e, n)
	if !ok {
		return
	}
	w.stats.Nodes++
	w.send(dsfabric.ThreadID(parent.owner), createdCall(e, parent.idx, slot, at))
	w.queueSim(n, e)
}

// created records a slot's new child and sends on the rollouts that waited
// for it; false when it was put off (postpone).
func (w *worker) created(a *action) (done bool) {
	e := a.epoch()
	idx, slot, child := a.created()
	n := w.lookup(ref{a.owner, idx}, e)
	if n == nil {
		return true
	}
	if !w.d.solo.tryLock(&n.mu) {
		return w.postpone(*a)
	}
	if int(slot) >= len(n.slots) {
		w.d.solo.unlock(&n.mu)
		return true
	}
	s := &n.slots[slot]
	s.child, s.created = child, true
	k := s.deferred
	s.deferred = 0
	w.d.solo.unlock(&n.mu)
	if k > 0 {
		w.send(dsfabric.ThreadID(child.owner), descendCall(e, child.idx, k))
	}
	return true
}

// backprop adds results through a node's slot; at the root it counts the
// phase's rollouts, elsewhere it combines them for the parent (sent when
// the thread next flushes its dirty nodes); false when it was put off.
func (w *worker) backprop(a *action) (done bool) {
	e := a.epoch()
	idx, slot, wins, cnt, rollouts := a.backprop()
	n := w.lookup(ref{a.owner, idx}, e)
	if n == nil {
		return true
	}
	if !w.d.solo.tryLock(&n.mu) {
		return w.postpone(*a)
	}
	if int(slot) >= len(n.slots) || wins > cnt {
		w.d.solo.unlock(&n.mu)
		return true
	}
	n.addWins(int(slot), wins, cnt)
	if n.root {
		w.d.solo.unlock(&n.mu)
		if p := w.d.phase.Load(); p != nil && p.epoch == e {
			p.completed.Add(int64(rollouts))
		}
		return true
	}
	n.upWins += cnt - wins
	n.upN += cnt
	n.upRollouts += rollouts
	if !n.dirty {
		n.dirty = true
		w.dirty = append(w.dirty, n)
	}
	w.d.solo.unlock(&n.mu)
	return true
}

// stopCall ends the search on this thread: it reports its statistics to
// thread 0 of rank 0, which stops once every thread's are in.
func (w *worker) stopCall(a *action) {
	w.stop = w.closing == nil
	st := w.stats
	st.Calls = uint64(w.m.Stats().Received)
	w.send(0, statsCall(a.epoch(), uint32(w.id), st.words()))
}

// gatherStats collects a thread's statistics (thread 0 of rank 0).
func (w *worker) gatherStats(a *action) {
	w.gathered = append(w.gathered, statsOf(a.statsFrom(), a.stats))
	if len(w.gathered) == w.d.all && w.closing != nil {
		out := make([]Stats, w.d.all)
		for _, s := range w.gathered {
			if int(s.Thread) < len(out) {
				out[s.Thread] = s
			}
		}
		w.closing <- out
		w.stop = true
	}
}

// askForLeaves sends, from a thread with nothing to do, a steal to a
// random thread of another process, unless one is out already (work
// stealing, Config.NoSteal): only the root's process starts rollouts, and
// a process whose share of the tree has no leaf waiting sits idle while
// another's queue holds several.
func (w *worker) askForLeaves() {
	d := w.d
	if d.cfg.NoSteal || w.stealing || d.all == d.threads {
		return
	}
	if !w.nextSteal.IsZero() {
		if time.Now().Before(w.nextSteal) {
			return
		}
		w.nextSteal = time.Time{}
	}
	t := w.rng.IntN(d.all - d.threads)
	if t >= int(d.base) {
		t += d.threads
	}
	w.stealing = true
	w.send(dsfabric.ThreadID(t), stealCall(w.epoch, uint32(w.id)))
}

// stealPause is how long a thread whose steal got nothing waits before it
// asks again, so that two processes both short of work do not keep a
// stream of empty steals and answers going.
const stealPause = 50 * time.Microsecond

// giveLeaves answers a steal: half of the leaves this process has queued
// (rounded up), the newest first, go to the thief with their states; a
// gave call follows. Leaves that are won already (nothing to play) or were
// stolen themselves stay: passing stolen leaves on let two idle processes
// bounce them between each other (measured: a fifth of the simulations/ms
// when every queued leaf was given). It reports whether it gave any.
func (w *worker) giveLeaves(a *action) bool {
	d := w.d
	thief := dsfabric.ThreadID(a.steal())
	if int(thief) >= d.all || d.local(thief) != nil {
		d.log.Warn("mcts: a steal names no thread of another process", "thief", thief)
		return false
	}
	queued := 0
	for _, o := range d.workers {
		queued += int(o.queued.Load())
	}
	give := (queued + 1) / 2
	gave := uint32(0)
	for i := 0; i < len(d.workers) && int(gave) < give; i++ {
		o := d.workers[(int(w.id-d.base)+i)%len(d.workers)]
		w.d.solo.lock(&o.simMu)
		for k := len(o.sims) - 1; k >= 0 && int(gave) < give; k-- {
			r := o.sims[k]
			if r.n.winner >= 0 || r.n.stolen {
				continue
			}
			o.sims = append(o.sims[:k], o.sims[k+1:]...)
			o.queued.Store(int32(len(o.sims)))
			w.d.solo.unlock(&o.simMu)
			w.send(thief, evalCall(r.epoch, r.n.parent, r.n.parentSlot, r.n.state))
			gave++
			w.d.solo.lock(&o.simMu)
			k = min(k, len(o.sims))
		}
		w.d.solo.unlock(&o.simMu)
	}
	w.send(thief, gaveCall(a.epoch(), gave))
	return gave > 0
}

// takeLeaf queues a leaf given by another process's thread for evaluation
// here; its results go straight to its parent.
func (w *worker) takeLeaf(a *action) {
	parent, slot := a.eval()
	if int(parent.owner) >= w.d.all {
		w.d.log.Warn("mcts: an eval names no thread", "owner", parent.owner)
		return
	}
	n := &node{state: a.state, parent: parent, parentSlot: slot, winner: a.state.Winner(), toMove: a.state.ToMove(), stolen: true}
	w.stats.Stolen++
	w.pushSim(simRequest{n: n, epoch: a.epoch()})
}

// pushSim queues a leaf for evaluation on w's thread.
func (w *worker) pushSim(r simRequest) {
	w.d.solo.lock(&w.simMu)
	w.sims = append(w.sims, r)
	w.queued.Store(int32(len(w.sims)))
	w.d.solo.unlock(&w.simMu)
}

// popSim takes the oldest leaf queued on w's thread. An empty queue is
// seen without the lock: idle threads look through every neighbour's
// queue each round, and locking each one made them a third of the lock
// waits in the 1×16 profile.
func (w *worker) popSim() (simRequest, bool) {
	if w.queued.Load() == 0 {
		return simRequest{}, false
	}
	w.d.solo.lock(&w.simMu)
	defer w.d.solo.unlock(&w.simMu)
	if len(w.sims) == 0 {
		return simRequest{}, false
	}
	r := w.sims[0]
	w.sims[0] = simRequest{}
	w.sims = w.sims[1:]
	w.queued.Store(int32(len(w.sims)))
	return r, true
}

// queueSim queues leaf n on this thread, the node's owner: its playouts and
// its first backpropagation then run where the node already is in cache,
// and an idle neighbour takes from the queue (simulate). Handing leaves to
// a random thread of the process put half of the queue operations on
// another core's lock and queue (1×2 profile: lock polling 7.7 % of the
// samples, pushSim and popSim 40 % of it).
func (w *worker) queueSim(n *node, e uint32) {
	w.pushSim(simRequest{n: n, epoch: e})
}

// simulate evaluates one queued leaf and starts its backpropagation; false
// when none is queued.
// A thread whose own queue is empty takes from another local thread's
// (work stealing: leaves are queued where their node is, and one thread's
// part of the tree may have a backlog while another's has none).
func (w *worker) simulate() bool {
	r, ok := w.popSim()
	for i := 1; !ok && i < len(w.d.workers); i++ {
		r, ok = w.d.workers[(int(w.id-w.d.base)+i)%len(w.d.workers)].popSim()
	}
	if !ok {
		return false
	}
	n := r.n
	t0 := time.Now()
	wins := evaluate(n.state, n.winner, n.toMove, w.d.cfg.Playouts, w.rng.Uint64())
	w.stats.SimulateNs += uint64(time.Since(t0))
	w.stats.Leaves++
	if n.winner < 0 {
		w.stats.Playouts += uint64(w.d.cfg.Playouts)
	}
	w.send(dsfabric.ThreadID(n.parent.owner), backpropCall(r.epoch, n.parent.idx, n.parentSlot, wins, uint32(w.d.cfg.Playouts), 1))
	return true
}

// flushDirty sends each node's combined results on to its parent.
func (w *worker) flushDirty() {
	for i, n := range w.dirty {
		w.d.solo.lock(&n.mu)
		wins, cnt, r := n.upWins, n.upN, n.upRollouts
		n.upWins, n.upN, n.upRollouts, n.dirty = 0, 0, 0, false
		w.d.solo.unlock(&n.mu)
		w.dirty[i] = nil
		w.send(dsfabric.ThreadID(n.parent.owner), backpropCall(n.epoch, n.parent.idx, n.parentSlot, wins, cnt, r))
	}
	w.dirty = w.dirty[:0]
}

// startRollouts starts rollouts at the root while the phase has budget and
// fewer than InFlight are under way (threads of the root's process only).
func (w *worker) startRollouts() int {
	p := w.d.phase.Load()
	if p == nil {
		return 0
	}
	for {
		s := p.started.Load()
		k := min(startBatch, p.budget.Load()-s, p.inFlight-(s-p.completed.Load()))
		if k <= 0 {
			return 0
		}
		if p.started.CompareAndSwap(s, s+k) {
			w.stats.Rollouts += uint64(k)
			w.send(dsfabric.ThreadID(p.root.owner), descendCall(p.epoch, p.root.idx, uint32(k)))
			return int(k)
		}
	}
}

// startBatch is how many rollouts a thread starts at once, in one descend
// of the root.
const startBatch = 4

// wakeJob wakes the worker threads asleep between searches: a send-based
// call to the first thread of every other process rings its doorbell (the
// one-sided calls of the search do not), and this process's own is rung
// directly.
func (w *worker) wakeJob() {
	d := w.d
	d.f.Process().WakeRecv()
	names := d.f.Names()
	for r := 1; r < names.Size; r++ {
		t, _ := names.Thread(r, 0)
		if err := d.f.Call(w.id, t, d.wakeID, nil, nil); err != nil {
			d.log.Debug("mcts: waking a process", "rank", r, "err", err)
		}
	}
}

// drive runs on thread 0 of rank 0: it starts phases, reports progress,
// ends phases when the budget is back at the root, and stops the job.
func (w *worker) drive(lastProgress *time.Time) int {
	d := w.d
	if p := d.phase.Load(); p != nil {
		if p.abandoned.Load() {
			// Nobody waits for the result: end the phase now. Rollouts
			// under way belong to its epoch, and every thread drops the
			// calls of an epoch that is over.
			p.budget.Store(0)
			d.phase.Store(nil)
			return 1
		}
		done := p.completed.Load()
		if !p.timedOut && !p.deadline.IsZero() && done > 0 && time.Now().After(p.deadline) {
			// Out of time: start no more rollouts and end once those under
			// way are back (one started meanwhile by a thread that read the
			// old budget ends in a later epoch and is ignored there).
			p.timedOut = true
			p.budget.Store(0)
		}
		if !p.timedOut && done >= p.budget.Load() || p.timedOut && done >= p.started.Load() {
			root := w.lookup(p.root, p.epoch)
			w.d.solo.lock(&root.mu)
			r := root.result(int(done), d.cfg.Playouts)
			w.d.solo.unlock(&root.mu)
			r.Elapsed = time.Since(p.begun)
			d.phase.Store(nil)
			p.reply <- r
			// The reply readied the Search's caller on this thread's P.
			// Where the worker threads hold every P (1×2 on two cores),
			// it waited there for the scheduler to preempt a spinning
			// worker, 1.4–36 ms a move (about 13), before it could ask for
			// the next search; with a P to spare it waited for a futex
			// wake-up of another thread, about 0.3 ms here. Yielding once
			// lets it run now (BenchmarkSearchHandover: 18 ms an op
			// before, 0.6–0.8 ms after).
			runtime.Gosched()
			return 1
		}
		if d.cfg.Progress != nil && time.Since(*lastProgress) >= d.cfg.ProgressEvery {
			*lastProgress = time.Now()
			d.cfg.Progress(int(done), d.cfg.Budget)
		}
		return 0
	}
	select {
	case req := <-d.requests:
		w.epochs++
		epoch := w.epochs
		if req.stop {
			for t := 0; t < d.all; t++ {
				w.send(dsfabric.ThreadID(t), stopCall(epoch))
			}
			return 1
		}
		root := newNode(req.state, ref{}, 0, true, w.rng)
		root.epoch = epoch
		at, _ := w.add(uint32(w.id), epoch, root)
		p := &phase{epoch: epoch, inFlight: int64(d.cfg.InFlight), root: at, begun: time.Now(), reply: req.reply, abandoned: req.abandoned}
		p.budget.Store(int64(d.cfg.Budget))
		if req.limit > 0 {
			p.deadline = p.begun.Add(req.limit)
		}
		*lastProgress = time.Now()
		d.phase.Store(p)
		w.wakeJob()
		return 1
	default:
	}
	return 0
}
