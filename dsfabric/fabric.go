package dsfabric

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/numa"
)

// Fabric is one process's view of a job: its names, its connections to every
// other process, its service and worker threads.
type Fabric struct {
	cfg      Config
	names    Names
	rank     int
	log      *slog.Logger
	launch   launch
	handlers *Handlers

	proc  *dtutils.Process
	provs []dtutils.Provider
	peers []*peer
	recv  *alloc.Region

	shm        dtutils.Provider // nil when this rank offers no shm
	probe      []byte           // dtutils.SHMProbe of shm, published in the hello
	probes     [][]byte         // every rank's probe, from the table
	probeErrs  []error          // why a peer's probe failed (forced shm reports it)
	transports []string         // per peer rank: "shm", "tcp" or "loop" (self)

	coord  *coordinator // rank 0
	client *client      // other ranks

	workers  []*Worker
	rx       sync.Mutex   // held by the thread routing arrivals (recv.go)
	self     *Worker      // the worker routing for itself (routeFor), under rx
	life     sync.RWMutex // read-held by callers awaiting replies while they use proc; Close takes it
	procGone bool         // proc is closed (under life)
	rxCS     [16]dtutils.Completion
	rxInl    [16 * dtutils.InlineMax]byte // small messages routed from where they arrived (PollRecvInPlace)
	svc      inbox                        // service calls, broadcast forwarding, refusals
	svcBell  chan struct{}
	// svcLong is set while a service thread stands by for longer than
	// svcCheck (every worker has slept through its checks): a worker
	// leaving its sleep rings svcBell then, so that a handler it gets
	// stuck in is noticed at once, not at the end of a long interval.
	svcLong  atomic.Bool
	sends    *alloc.ZoneAllocator // send buffers
	pending  *xsync.MapOf[uint64, *pendingCall]
	syncs    *xsync.MapOf[uint64, *Synchronizer]
	nextID   atomic.Uint64
	dead     []atomic.Pointer[string]
	unknown  atomic.Int64
	barSeq   atomic.Uint32
	barMu    sync.Mutex
	barWait  map[uint32]chan struct{}
	closing  atomic.Bool
	sendHook atomic.Pointer[func()] // tests: runs in send, lock held, checks passed
	closeErr error
	once     sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	children []*exec.Cmd
	childErr []error
	childWG  sync.WaitGroup

	// afterCredit (tests only) runs after each credit return, inside the
	// routing round (rx held).
	afterCredit func()
}

type peer struct {
	rank  int
	qp    dtutils.QueuePair     // send-based calls (and the reads of CallBufferRead)
	calls *dtutils.Transmitter  // drives qp
	mu    sync.Mutex            // orders this process's messages to the peer; guards ring and sent
	ring  *alloc.LinearCircular // send buffers
	sent  uint64                // messages sent to the peer
	// creditWord is where the peer writes how many of them it consumed.
	creditWord alloc.Memory
	data       dtutils.QueuePair // one-sided traffic, driven by tx
	tx         *dtutils.Transmitter

	// The receive side, under Fabric.rx: where the peer wants its credits
	// (from its hello), the source word of that write, the messages
	// consumed from it and the count last written.
	creditAt           alloc.Locator
	creditSrc          alloc.Memory
	consumed, returned uint64
}

type pendingCall struct {
	rank int
	ch   chan callResult
}

type callResult struct {
	data []byte
	err  error
}

// Start joins (or, without a launcher, self-launches) the job and returns
// once every process is connected to every other. It is the one entry
// point for self-launch, mpirun, srun and PMI launchers.
func Start(ctx context.Context, cfg Config) (*Fabric, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	l, err := detectLaunch(cfg.Procs)
	if err != nil {
		return nil, err
	}
	f := &Fabric{cfg: cfg, rank: l.rank, launch: l, handlers: cfg.Handlers,
		log: cfg.Logger.With("rank", l.rank), svcBell: make(chan struct{}, 1),
		pending: xsync.NewMapOf[uint64, *pendingCall](), syncs: xsync.NewMapOf[uint64, *Synchronizer](),
		barWait: map[uint32]chan struct{}{}}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.names = Names{Size: l.size, ThreadsPerProcess: cfg.ThreadsPerProcess}
	f.dead = make([]atomic.Pointer[string], l.size)
	if err := f.bootstrap(ctx); err != nil {
		f.teardown()
		return nil, err
	}
	return f, nil
}

func (f *Fabric) bootstrap(ctx context.Context) error {
	l := f.launch
	deadline := time.Now().Add(f.cfg.BootstrapTimeout)
	if err := f.prepare(); err != nil {
		return err
	}
	var peers []epEntry
	var table []member
	if l.rank == 0 {
		ln, err := listenCoord(l.coord)
		if err != nil {
			return err
		}
		f.coord = newCoordinator(f, ln, l.size)
		if l.kind == "self" {
			if err := f.spawn(); err != nil {
				return err
			}
		}
		if table, err = f.coord.gather(ctx, l, deadline); err != nil {
			return err
		}
		f.setTable(table)
		with, err := f.coord.plan(f.probePeers(), deadline)
		if err != nil {
			return err
		}
		own, err := f.connectSetup(with)
		if err != nil {
			return err
		}
		if peers, err = f.coord.exchange(own, deadline); err != nil {
			return err
		}
	} else {
		c, err := dialCoord(ctx, l, deadline)
		if err != nil {
			return err
		}
		f.client = &client{f: f, conn: c}
		if table, err = f.client.join(l, deadline); err != nil {
			return err
		}
		f.setTable(table)
		with, err := f.client.plan(f.probePeers(), l.size, deadline)
		if err != nil {
			return err
		}
		own, err := f.connectSetup(with)
		if err != nil {
			return err
		}
		if peers, err = f.client.exchange(own, l.size, deadline); err != nil {
			return err
		}
	}
	if err := f.connectPeers(peers); err != nil {
		return err
	}
	// Every Worker exists before anything is routed: routing indexes them.
	for t := 0; t < f.cfg.ThreadsPerProcess; t++ {
		id, _ := f.names.Thread(f.rank, t)
		f.workers = append(f.workers, &Worker{f: f, id: id})
	}
	if err := f.hello(); err != nil {
		return err
	}
	if f.coord != nil {
		f.coord.serve()
	} else {
		go f.client.serve()
	}
	f.startThreads()
	bctx, cancel := context.WithDeadline(ctx, deadline.Add(f.cfg.BootstrapTimeout))
	defer cancel()
	if err := f.Barrier(bctx); err != nil {
		return fmt.Errorf("%w: first barrier: %v", ErrBootstrap, err)
	}
	f.log.Debug("dsfabric: job formed", "size", l.size, "launcher", l.kind)
	return nil
}

// spawn re-executes this binary as ranks 1…size−1.
func (f *Fabric) spawn() error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	f.childErr = make([]error, f.launch.size)
	// exec copies the output of a child into a writer that is not a file
	// from a goroutine per child: share one lock among them.
	var outMu sync.Mutex
	stdout, stderr := lockedWriter(&outMu, f.cfg.Stdout), lockedWriter(&outMu, f.cfg.Stderr)
	for r := 1; r < f.launch.size; r++ {
		cmd := exec.Command(self, f.cfg.Args...)
		cmd.Env = append(os.Environ(), EnvRank+"="+strconv.Itoa(r), EnvSize+"="+strconv.Itoa(f.launch.size),
			EnvCoord+"="+f.launch.coord, EnvToken+"="+f.launch.token)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, stdout, stderr
		// A rank must not outlive the launcher.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("%w: starting rank %d: %v", ErrBootstrap, r, err)
		}
		f.children = append(f.children, cmd)
		f.childWG.Add(1)
		go func(r int, cmd *exec.Cmd) {
			defer f.childWG.Done()
			if err := cmd.Wait(); err != nil {
				f.childErr[r] = fmt.Errorf("rank %d (pid %d) %v", r, cmd.Process.Pid, err)
				f.markDead(r, "process "+err.Error()) // logs only when not closing
			}
		}(r, cmd)
	}
	return nil
}

// syncWriter serialises writes to a writer shared by several children.
type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// lockedWriter wraps w, unless it is a file (the child writes to it
// itself), so that writes hold mu: Stdout and Stderr may be one writer.
func lockedWriter(mu *sync.Mutex, w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok || w == nil {
		return w
	}
	return syncWriter{mu, w}
}

// prepare creates the process state and, unless tcp is forced, the shm
// provider whose probe the hello publishes.
func (f *Fabric) prepare() error {
	pc := dtutils.DefaultProcessConfig(uint32(f.rank))
	pc.ReceiveSlots = 2 // the smallest ring dtutils allows
	for pc.ReceiveSlots < f.recvCount() {
		pc.ReceiveSlots <<= 1
	}
	var err error
	if f.proc, err = dtutils.NewProcess(pc); err != nil {
		return err
	}
	if f.cfg.Transport == "tcp" || f.cfg.Transport == "ofi" || f.names.Size == 1 {
		return nil
	}
	shm, err := dtutils.NewSHM(f.proc, dtutils.SHMConfig{Logger: f.log})
	if err == nil {
		f.probe, err = dtutils.SHMProbe(shm)
		f.shm = shm
		f.provs = append(f.provs, shm)
	}
	if err != nil {
		if f.cfg.Transport == "shm" {
			return fmt.Errorf("%w: Transport is shm but this rank cannot offer shared memory: %v", ErrBootstrap, err)
		}
		f.log.Warn("dsfabric: no shared memory for this rank; peers will use tcp", "err", err)
		f.probe = nil
	}
	return nil
}

// setTable records the table rank 0 published.
func (f *Fabric) setTable(t []member) {
	f.names.Machines = make([]string, len(t))
	f.probes = make([][]byte, len(t))
	for r, m := range t {
		f.names.Machines[r], f.probes[r] = m.machine, m.probe
	}
}

// probeTimeout bounds one shm probe: a reachable socket answers in
// microseconds.
const probeTimeout = 2 * time.Second

// probePeers probes, in parallel, the shm provider of every peer that
// claims this machine and offers one, and returns the ranks that passed.
func (f *Fabric) probePeers() []int {
	size := f.names.Size
	f.probeErrs = make([]error, size)
	if f.shm == nil {
		return nil
	}
	var wg sync.WaitGroup
	for r := 0; r < size; r++ {
		switch {
		case r == f.rank:
			continue
		case len(f.probes[r]) == 0:
			f.probeErrs[r] = errors.New("it offers no shared memory")
			continue
		case !f.names.SameMachine(f.rank, r):
			f.probeErrs[r] = fmt.Errorf("it runs on another machine (%s, here %s)", f.names.Machines[r], f.names.Machines[f.rank])
			continue
		}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			f.probeErrs[r] = dtutils.ProbeSHM(f.probes[r], probeTimeout)
		}(r)
	}
	wg.Wait()
	var ok []int
	for r := 0; r < size; r++ {
		if r != f.rank && f.probeErrs[r] == nil {
			ok = append(ok, r)
		}
	}
	return ok
}

// TCPConfig says where the tcp transport listens and which address its
// endpoints advertise: one its peers can reach. Config.Listen (or
// SERIEMA_LISTEN) decides the listener; without it a job with a tcp
// coordinator listens on every interface and advertises the address this
// rank reached the coordinator from (rank 0: the address rank 1 reached it
// at), and a job on one machine (unix coordinator) uses loopback. Layers
// that make tcp providers of their own (package shuffle) use it to be
// reachable the same way.
func (f *Fabric) TCPConfig() dtutils.TCPConfig {
	tc := dtutils.DefaultTCPConfig()
	tc.Logger = f.log
	listen := f.cfg.Listen
	if listen == "" {
		listen = os.Getenv(EnvListen)
	}
	coordTCP := !strings.HasPrefix(f.launch.coord, "unix:")
	switch {
	case listen != "":
		tc.Listen = listen
	case coordTCP:
		tc.Listen = ":0"
	default:
		return tc // loopback: every rank shares this machine
	}
	host, _, err := net.SplitHostPort(tc.Listen)
	if ip := net.ParseIP(host); err == nil && (host == "" || ip != nil && ip.IsUnspecified()) {
		if h := f.reachableHost(); h != "" {
			tc.AdvertiseHost = h
		}
	}
	return tc
}

// OFIConfig is the configuration this fabric gives its ofi providers: the
// provider of Config.OFIProvider, the one-sided path of
// Config.OFIOneSided, and for tcp the address to bind, chosen as TCPConfig
// chooses what to advertise. Layers that make ofi providers of their own
// (package shuffle) use it to reach the peers the same way.
func (f *Fabric) OFIConfig() dtutils.OFIConfig {
	oc := dtutils.DefaultOFIConfig()
	oc.Logger = f.log
	if f.cfg.OFIProvider != "" {
		oc.Provider = f.cfg.OFIProvider
	}
	if f.cfg.OFIOneSided {
		oc.OneSided = true
	}
	if !strings.HasPrefix(oc.Provider, "tcp") && oc.Provider != "sockets" {
		return oc // fabrics with their own addressing (verbs, efa, cxi, shm)
	}
	tc := f.TCPConfig()
	switch host, _, err := net.SplitHostPort(tc.Listen); {
	case tc.AdvertiseHost != "":
		oc.Node = tc.AdvertiseHost
	case err == nil && host != "" && !net.ParseIP(host).IsUnspecified():
		oc.Node = host
	}
	return oc
}

// reachableHost returns an address of this rank that its peers reach: the
// local address of its coordinator connection (rank 0: of rank 1's).
func (f *Fabric) reachableHost() string {
	var c net.Conn
	if f.client != nil {
		c = f.client.conn
	} else if f.coord != nil && len(f.coord.conns) > 1 {
		c = f.coord.conn(1)
	}
	if c == nil {
		return ""
	}
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		return a.IP.String()
	}
	return ""
}

// connectSetup creates one queue pair per peer — over shm for the peers in
// with (both probes passed), tcp for the others — and returns the
// endpoints to publish.
func (f *Fabric) connectSetup(with []int) ([]epEntry, error) {
	size := f.names.Size
	shmWith := make([]bool, size)
	for _, r := range with {
		shmWith[r] = true
	}
	var err error
	var tcp, ofi dtutils.Provider
	f.peers = make([]*peer, size)
	f.transports = make([]string, size)
	f.transports[f.rank] = "loop"
	var own []epEntry
	for r := 0; r < size; r++ {
		if r == f.rank {
			continue
		}
		if f.cfg.Transport == "shm" && !shmWith[r] {
			why := f.probeErrs[r]
			if why == nil {
				why = errors.New("its probe of this rank failed")
			}
			return nil, fmt.Errorf("%w: Transport is shm but rank %d is not reachable through shared memory: %v", ErrBootstrap, r, why)
		}
		var prov dtutils.Provider
		switch {
		case f.cfg.Transport == "ofi":
			if ofi == nil {
				if ofi, err = dtutils.NewOFI(f.proc, f.OFIConfig()); err != nil {
					return nil, err
				}
				f.provs = append(f.provs, ofi)
			}
			prov = ofi
			f.transports[r] = "ofi"
		case !shmWith[r]:
			if tcp == nil {
				if tcp, err = dtutils.NewTCP(f.proc, f.TCPConfig()); err != nil {
					return nil, err
				}
				f.provs = append(f.provs, tcp)
			}
			prov = tcp
			f.transports[r] = "tcp"
		default:
			prov = f.shm
			f.transports[r] = "shm"
		}
		// Two queue pairs per peer, published in this order: calls, then data.
		qp, err := prov.NewQueuePair()
		if err != nil {
			return nil, err
		}
		data, err := prov.NewQueuePair()
		if err != nil {
			return nil, err
		}
		f.peers[r] = &peer{rank: r, qp: qp, data: data}
		own = append(own, epEntry{peer: uint32(r), ep: qp.Endpoint()}, epEntry{peer: uint32(r), ep: data.Endpoint()})
	}
	// Calls to this process's own threads take the same path, over loop.
	lf := dtutils.NewLoopFabric()
	lp := lf.NewProvider(f.proc)
	f.provs = append(f.provs, lp)
	a, _ := lp.NewQueuePair()
	b, _ := lp.NewQueuePair()
	c, _ := lp.NewQueuePair()
	d, _ := lp.NewQueuePair()
	if err := errors.Join(a.Connect(b.Endpoint()), b.Connect(a.Endpoint()), c.Connect(d.Endpoint()), d.Connect(c.Endpoint())); err != nil {
		return nil, err
	}
	f.peers[f.rank] = &peer{rank: f.rank, qp: a, data: c}
	// Credit words (those peers write, then the sources of ours) and the
	// posted receive buffers. Send buffers come from rings (connectPeers).
	region, err := f.proc.Registry().NewRegion(f.recvBase()+f.recvStride()*f.recvCount(), alloc.RegionConfig{Name: "fabric"})
	if err != nil {
		return nil, err
	}
	f.recv = region
	for r := 0; r < size; r++ {
		f.peers[r].creditWord, _ = region.Memory(8*r, 8)
		f.peers[r].creditSrc, _ = region.Memory(8*(size+r), 8)
	}
	for i := 0; i < f.recvCount(); i++ {
		if err := f.proc.PostRecv(f.recvBuf(i), uint64(i)); err != nil {
			return nil, err
		}
	}
	return own, nil
}

func (f *Fabric) recvBuf(i int) alloc.Memory {
	m, _ := f.recv.Memory(f.recvBase()+i*f.recvStride(), f.cfg.MaxMessage)
	return m
}

// recvBase is where the receive buffers start in the fabric region, past
// the credit words, on a cache line.
func (f *Fabric) recvBase() int { return (16*f.names.Size + 63) &^ 63 }

// recvStride is the distance between receive buffers: MaxMessage on whole
// cache lines, plus one line, so that the buffers' first lines (all that a
// small message touches) fall in different cache sets. With a stride of
// 64 KiB they all shared one set of L1 and L2.
func (f *Fabric) recvStride() int { return (f.cfg.MaxMessage+63)&^63 + 64 }

func (f *Fabric) connectPeers(es []epEntry) error {
	if len(es) != 2*(f.names.Size-1) {
		return fmt.Errorf("%w: got %d peer endpoints, want %d", ErrBootstrap, len(es), 2*(f.names.Size-1))
	}
	lane := make([]int, f.names.Size) // the k-th endpoint from a rank joins our k-th queue pair to it
	errs := make(chan error, len(es))
	for _, e := range es {
		p := f.peers[e.peer]
		if p == nil || e.peer == uint32(f.rank) || lane[e.peer] > 1 {
			return fmt.Errorf("%w: unexpected endpoint from rank %d", ErrBootstrap, e.peer)
		}
		qp := p.qp
		if lane[e.peer] == 1 {
			qp = p.data
		}
		lane[e.peer]++
		go func(r int, qp dtutils.QueuePair, ep []byte) {
			if err := qp.Connect(ep); err != nil {
				errs <- fmt.Errorf("%w: connecting to rank %d: %v", ErrBootstrap, r, err)
				return
			}
			errs <- nil
		}(p.rank, qp, e.ep)
	}
	var all []error
	for range es {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	unit := (f.cfg.MaxMessage + sendChunk - 1) &^ (sendChunk - 1)
	var err error
	if f.sends, err = alloc.NewZoneAllocator(f.proc.Registry(), alloc.ZoneConfig{SuperchunkSize: max(16<<20, 2*unit), ChunkSize: sendChunk, Region: alloc.RegionConfig{Name: "fabric-send"}}); err != nil {
		return err
	}
	maxUnsig := f.proc.Config().MaxUnsignaled
	for _, p := range f.peers {
		if p.tx, err = dtutils.NewTransmitter(p.data, maxUnsig, dtutils.TransmitterConfig{}); err != nil {
			return err
		}
		if p.calls, err = dtutils.NewTransmitter(p.qp, maxUnsig, dtutils.TransmitterConfig{}); err != nil {
			return err
		}
		if p.ring, err = alloc.NewLinearCircular(f.sends, alloc.CircularConfig{UnitSize: unit, InitialUnits: 2, MaxUnits: 16, Growth: alloc.Linear, Align: 8}); err != nil {
			return err
		}
	}
	return nil
}

// sendChunk is the granule of send buffers: a ring unit is MaxMessage
// rounded up to it.
const sendChunk = 64 << 10

// hello tells every rank, this one included, where to write its receive
// credits for this process's messages: the first message on each queue
// pair, so that it arrives before any other.
func (f *Fabric) hello() error {
	for _, p := range f.peers {
		loc, _ := p.creditWord.Locator().MarshalBinary()
		if err := f.send(p.rank, callHdr{kind: kindCredit}, loc, nil, nil); err != nil {
			return fmt.Errorf("%w: credit hello to rank %d: %v", ErrBootstrap, p.rank, err)
		}
	}
	return nil
}

// Transmitter returns the transmitter of the one-sided queue pair to rank
// (this process's own rank included, over loop). Package riutils writes
// through it; any goroutine may use it.
func (f *Fabric) Transmitter(rank int) (*dtutils.Transmitter, error) {
	if rank < 0 || rank >= f.names.Size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrBadThread, rank, f.names.Size)
	}
	if err := f.deadErr(rank); err != nil {
		return nil, err
	}
	if f.closing.Load() {
		return nil, ErrClosed
	}
	return f.peers[rank].tx, nil
}

// startThreads starts service and worker threads.
func (f *Fabric) startThreads() {
	for i := 0; i < f.cfg.ServiceThreads; i++ {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.serveRecv()
		}()
	}
	localIndex := 0 // this process's index among the ranks of its machine
	for r := 0; r < f.rank; r++ {
		if f.names.SameMachine(r, f.rank) {
			localIndex++
		}
	}
	var topo *numa.Topology
	if f.cfg.Pin {
		if t, err := numa.Load(""); err == nil {
			if cpus, err := numa.Affinity(); err == nil {
				t = t.Restrict(cpus)
			}
			topo = t
		} else {
			f.log.Warn("dsfabric: no topology, workers not pinned", "err", err)
		}
	}
	body := f.cfg.Worker
	if body == nil {
		body = func(w *Worker) { w.Serve(f.ctx) }
	}
	for t, w := range f.workers {
		f.wg.Add(1)
		go func(t int, w *Worker) {
			defer f.wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if topo != nil {
				cpu, _, err := topo.Place(f.cfg.Placement, localIndex*f.cfg.ThreadsPerProcess+t)
				if err == nil {
					err = numa.Pin(cpu)
				}
				if err != nil {
					f.log.Warn("dsfabric: pinning a worker failed", "thread", t, "err", err)
				}
			}
			body(w)
		}(t, w)
	}
}

// Rank returns this process's rank.
func (f *Fabric) Rank() int { return f.rank }

// Logger returns the fabric's logger (Config.Logger), for layers that make
// transports of their own.
func (f *Fabric) Logger() *slog.Logger { return f.log }

// Size returns the number of processes.
func (f *Fabric) Size() int { return f.names.Size }

// Names returns the job's names.
func (f *Fabric) Names() Names { return f.names }

// Handlers returns the handler set.
func (f *Fabric) Handlers() *Handlers { return f.handlers }

// Process returns the dtutils process state (registered memory).
func (f *Fabric) Process() *dtutils.Process { return f.proc }

// Transport returns the transport this process uses to reach rank: "shm",
// "tcp", "ofi", or "loop" for itself (see Config.Transport for how it is chosen).
func (f *Fabric) Transport(rank int) string {
	if rank < 0 || rank >= len(f.transports) {
		return ""
	}
	return f.transports[rank]
}

// Transports summarises the transports this process uses to its peers:
// "shm", "tcp", "shm+tcp", "ofi", or "loop" in a job of one process.
func (f *Fabric) Transports() string {
	seen := map[string]bool{}
	for r, t := range f.transports {
		if r != f.rank {
			seen[t] = true
		}
	}
	switch {
	case seen["ofi"]:
		return "ofi"
	case seen["shm"] && seen["tcp"]:
		return "shm+tcp"
	case seen["tcp"]:
		return "tcp"
	case seen["shm"]:
		return "shm"
	}
	return "loop"
}

// Worker returns local worker thread t.
func (f *Fabric) Worker(t int) *Worker { return f.workers[t] }

// Launcher names how the job was started: "self", "child", "mpirun", "srun" or "pmi".
func (f *Fabric) Launcher() string { return f.launch.kind }

// UnknownHandlerCalls counts fire-and-forget calls that named no handler.
func (f *Fabric) UnknownHandlerCalls() int64 { return f.unknown.Load() }

// Done is closed when the fabric closes; custom worker bodies return then.
func (f *Fabric) Done() <-chan struct{} { return f.ctx.Done() }

func (f *Fabric) isDead(r int) bool { return f.dead[r].Load() != nil }

// DeadRanks returns the ranks known dead, with the reason.
func (f *Fabric) DeadRanks() map[int]string {
	m := map[int]string{}
	for r := range f.dead {
		if p := f.dead[r].Load(); p != nil {
			m[r] = *p
		}
	}
	return m
}

// DeadErr returns an error naming the first rank known dead (wrapping
// ErrRankDead), or nil. It is cheap enough for a poll loop.
func (f *Fabric) DeadErr() error {
	for r := range f.dead {
		if f.dead[r].Load() != nil {
			return f.deadErr(r)
		}
	}
	return nil
}

func (f *Fabric) deadErr(r int) error {
	if p := f.dead[r].Load(); p != nil {
		return fmt.Errorf("%w: rank %d: %s", ErrRankDead, r, *p)
	}
	return nil
}

// markDead records that rank r died, fails calls waiting for it and, at
// rank 0, tells every other rank.
func (f *Fabric) markDead(r int, reason string) {
	if r == f.rank || !f.dead[r].CompareAndSwap(nil, &reason) {
		return
	}
	if !f.closing.Load() {
		f.log.Error("dsfabric: rank died", "dead", r, "reason", reason)
	}
	f.pending.Range(func(id uint64, p *pendingCall) bool {
		if p.rank == r {
			if _, ok := f.pending.LoadAndDelete(id); ok {
				p.ch <- callResult{err: f.deadErr(r)}
			}
		}
		return true
	})
	if f.proc != nil {
		f.wakeFromOutside() // callers awaiting those replies
	}
	if f.coord != nil {
		go f.coord.announce(r, reason)
	}
}

// Barrier returns once every live rank called Barrier as often.
func (f *Fabric) Barrier(ctx context.Context) error {
	if f.closing.Load() {
		// Close's own barrier ran before this is set; a later one would
		// wait for ranks that left (the coordinator) or report one dead.
		return fmt.Errorf("%w: barrier after Close", ErrClosed)
	}
	seq := f.barSeq.Add(1)
	f.barMu.Lock()
	ch, ok := f.barWait[seq]
	if !ok {
		ch = make(chan struct{})
		f.barWait[seq] = ch
	}
	f.barMu.Unlock()
	if f.coord != nil {
		f.coord.arrive(0, seq)
	} else if err := f.client.send(control{typ: msgBarrier, seq: seq}.encode()); err != nil {
		return fmt.Errorf("%w: barrier: %v", ErrRankDead, f.deadErrOr(0, err))
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *Fabric) deadErrOr(r int, err error) error {
	if d := f.deadErr(r); d != nil {
		return d
	}
	return err
}

// released is called when barrier seq completes.
func (f *Fabric) released(seq uint32) {
	f.barMu.Lock()
	ch, ok := f.barWait[seq]
	if !ok {
		ch = make(chan struct{})
		f.barWait[seq] = ch
	}
	delete(f.barWait, seq)
	f.barMu.Unlock()
	close(ch)
}

// Close waits (at most 30 s) until every live rank calls Close, then stops
// the threads and releases everything. At a self-launch's rank 0 it also
// waits for the other ranks to exit and reports those that failed, by rank.
func (f *Fabric) Close() error {
	f.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := f.Barrier(ctx); err != nil {
			f.log.Warn("dsfabric: closing without the other ranks", "err", err)
		}
		f.closing.Store(true)
		if f.client != nil {
			f.client.send(control{typ: msgBye}.encode())
		} else if f.coord != nil {
			live := 0
			for r := 1; r < f.names.Size; r++ {
				if !f.isDead(r) {
					live++
				}
			}
			timeout := time.After(10 * time.Second)
			for i := 0; i < live; i++ {
				select {
				case <-f.coord.left:
				case <-timeout:
					i = live
				}
			}
		}
		f.closeErr = f.teardown()
	})
	return f.closeErr
}

// fenceSenders waits for callers of send already past its checks to leave
// (they hold their peer's lock while they fill and post its send buffers,
// which teardown unmaps); later ones find the context cancelled under the
// lock and return ErrClosed. A sender stuck longer than senderFence (a post that never
// completes) is not waited for.
func (f *Fabric) fenceSenders() {
	deadline := time.Now().Add(senderFence)
	for _, p := range f.peers {
		if p == nil {
			continue
		}
		b := dtutils.Backoff{}
		for !p.mu.TryLock() {
			if time.Now().After(deadline) {
				f.log.Warn("dsfabric: closing while a call to a peer is still being posted", "rank", p.rank)
				return
			}
			b.Wait()
		}
		p.mu.Unlock()
	}
}

// senderFence bounds how long Close waits for calls being posted.
const senderFence = 2 * time.Second

func (f *Fabric) teardown() error {
	f.closing.Store(true)
	f.cancel()
	if f.proc != nil {
		f.proc.WakeRecv() // workers and service threads asleep on it
	}
	f.fenceSenders()
	f.wg.Wait()
	for _, p := range f.provs {
		p.Close()
	}
	if f.proc != nil {
		// Callers of CallReturn route and sleep on the receive queue
		// themselves; they leave (woken above, seeing ctx cancelled)
		// before its memory goes.
		f.life.Lock()
		f.procGone = true
		f.proc.Close()
		f.life.Unlock()
	}
	if f.client != nil {
		f.client.conn.Close()
	}
	if f.coord != nil {
		f.coord.ln.Close()
		for _, c := range f.coord.conns {
			if c != nil {
				c.Close()
			}
		}
	}
	var errs []error
	if len(f.children) > 0 {
		done := make(chan struct{})
		go func() { f.childWG.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			for _, c := range f.children {
				c.Process.Kill()
			}
			<-done
		}
		for _, e := range f.childErr {
			if e != nil {
				errs = append(errs, e)
			}
		}
	}
	if f.launch.ownDir != "" {
		os.RemoveAll(f.launch.ownDir)
	}
	if len(errs) > 0 {
		return fmt.Errorf("dsfabric: %w", errors.Join(errs...))
	}
	return nil
}
