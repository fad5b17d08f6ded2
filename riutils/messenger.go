package riutils

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// Policy says what a call does when its messenger is full: the next chunk is
// not consumed yet and the messenger already has MaxChunks.
type Policy int

const (
	// Retry blocks until the destination consumes (default). While it
	// waits, the calling thread keeps polling its own incoming calls, so
	// two threads retrying towards each other do not deadlock.
	Retry Policy = iota
	// Fail returns ErrFull at once.
	Fail
	// RetryAsync keeps the call locally (a sealed record, at most
	// MaxAsyncBytes per thread) and returns at once; a helper goroutine
	// sends kept calls, in order, as room appears. While calls to a
	// destination are kept, new ones join them, so the order per sender
	// holds. Flush waits until everything kept is sent.
	RetryAsync
)

// Config configures the messengers of a process. DefaultConfig fills it.
type Config struct {
	// ChunkSize is the size of one chunk of the receiver's memory. Default
	// 2 MiB; a multiple of 4096, at least 8 KiB.
	ChunkSize int
	// ChunksPerAllocation is how many chunks one service call allocates.
	// Default 2.
	ChunksPerAllocation int
	// MaxChunks bounds the chunks of one direction of one messenger.
	// Default 8.
	MaxChunks int
	// Policy applies when a messenger is full. Default Retry.
	Policy Policy
	// MaxAsyncBytes bounds the calls RetryAsync keeps per thread; past it
	// calls fail with ErrFull. Default 64 MiB.
	MaxAsyncBytes int
	// NoMapping writes every call through the Transmitter, as over tcp,
	// also where the transport shares memory (shm, loop). By default a
	// messenger to such a destination maps its current chunk
	// (dtutils.MapRemote) and builds calls in place. For comparisons and
	// tests of the Transmitter path.
	NoMapping bool
	// Logger receives protocol errors. Default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns 2 MiB chunks, 2 per allocation, at most 8, Retry.
func DefaultConfig() Config {
	return Config{ChunkSize: 2 << 20, ChunksPerAllocation: 2, MaxChunks: 8, Policy: Retry, MaxAsyncBytes: 64 << 20}
}

// VerifyConfig checks c.
func (c Config) VerifyConfig() error {
	switch {
	case c.ChunkSize < 8<<10 || c.ChunkSize%4096 != 0 || c.ChunkSize > 1<<30:
		return fmt.Errorf("%w: ChunkSize %d", ErrBadConfig, c.ChunkSize)
	case c.ChunksPerAllocation < 1 || c.ChunksPerAllocation > c.MaxChunks:
		return fmt.Errorf("%w: ChunksPerAllocation %d with MaxChunks %d", ErrBadConfig, c.ChunksPerAllocation, c.MaxChunks)
	case c.MaxChunks < 2:
		return fmt.Errorf("%w: MaxChunks %d (at least 2)", ErrBadConfig, c.MaxChunks)
	case c.Policy != Retry && c.Policy != Fail && c.Policy != RetryAsync:
		return fmt.Errorf("%w: Policy %d", ErrBadConfig, c.Policy)
	case c.MaxAsyncBytes < 0:
		return fmt.Errorf("%w: MaxAsyncBytes %d", ErrBadConfig, c.MaxAsyncBytes)
	}
	return nil
}

// MaxPayload returns the largest arguments + buffer one call can carry.
func (c Config) MaxPayload() int {
	return c.ChunkSize - recordsStart - recordHeader - recordSeal
}

// Process is the riutils state of one process: the service that allocates
// chunks for senders, and the incoming-memory maps of its threads.
type Process struct {
	cfg      Config
	log      *slog.Logger
	handlers *dsfabric.Handlers
	f        atomic.Pointer[dsfabric.Fabric]
	zone     *alloc.ZoneAllocator
	zoneMu   sync.Mutex             // guards zone, free and byBase
	free     []alloc.Memory         // chunks of shut-down messengers
	byBase   map[*byte]alloc.Memory // every chunk, by its first byte
	inboxes  []*inbox               // by local thread rank
	msgrs    []*Messengers
	msgrsMu  sync.Mutex
	allocID  dsfabric.HandlerID
	bound    chan struct{} // closed by Bind
	// beforeMessengers, set by tests only, runs before Messengers(t)
	// makes them; an error makes it fail with that error.
	beforeMessengers func(t int) error
	// beforeAlloc, set by tests only, runs as an allocation request
	// arrives, before it is served.
	beforeAlloc func()
	// retryWaits, set by tests only (from a running thread, hence atomic),
	// runs when a call with policy Retry starts waiting for its
	// destination to consume.
	retryWaits atomic.Pointer[func()]
}

// bindWait bounds how long an allocation request waits for Bind: a peer may
// call as soon as its own Start returns, before this process has bound.
const bindWait = 30 * time.Second

// NewProcess registers riutils' service handler in h: call it before
// dsfabric.Start, in every process, then Bind.
func NewProcess(h *dsfabric.Handlers, cfg Config) (*Process, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxAsyncBytes == 0 {
		cfg.MaxAsyncBytes = 64 << 20
	}
	p := &Process{cfg: cfg, log: cfg.Logger, handlers: h, bound: make(chan struct{}), byBase: map[*byte]alloc.Memory{}}
	id, err := h.Register("riutils.alloc-chunks", p.allocChunks)
	if err != nil {
		return nil, err
	}
	p.allocID = id
	// Reserve the names of the records the receiver handles itself, so no
	// user handler takes their IDs.
	for _, name := range []string{batchHandlerName, returnHandlerName, extHandlerName} {
		if _, err := h.Register(name, func(*dsfabric.Call, []byte) ([]byte, error) {
			return nil, fmt.Errorf("%w: a riutils record, not a call", ErrProtocol)
		}); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Bind attaches the process to its started fabric.
func (p *Process) Bind(f *dsfabric.Fabric) error {
	z, err := alloc.NewZoneAllocator(f.Process().Registry(), alloc.ZoneConfig{
		SuperchunkSize: max(64<<20, 4*p.cfg.ChunkSize) / p.cfg.ChunkSize * p.cfg.ChunkSize,
		ChunkSize:      largestPow2Divisor(p.cfg.ChunkSize),
	})
	if err != nil {
		return err
	}
	p.zone = z
	p.msgrs = make([]*Messengers, f.Names().ThreadsPerProcess)
	p.inboxes = make([]*inbox, f.Names().ThreadsPerProcess)
	for i := range p.inboxes {
		p.inboxes[i] = &inbox{senders: xsync.NewMapOf[dsfabric.ThreadID, *incoming]()}
	}
	p.f.Store(f)
	close(p.bound)
	return nil
}

func largestPow2Divisor(n int) int {
	d := 4096
	for n%(2*d) == 0 && d < 2<<20 {
		d *= 2
	}
	return d
}

// inbox is a receiving thread's incoming-memory map: chunks allocated for
// each sender, waiting for the thread to take them.
type inbox struct {
	senders *xsync.MapOf[dsfabric.ThreadID, *incoming]
	fresh   atomic.Bool // a sender appeared since the thread last looked
}

// incoming holds the chunk batches allocated for one sender, in order.
type incoming struct {
	mu      sync.Mutex
	batches [][][]byte
	fb      alloc.Locator
	taken   bool // the receiving thread knows this sender
}

// allocChunks is the service call senders make on the receiver's process
// (the paper's no-setup allocation: the receiving thread takes no part).
func (p *Process) allocChunks(c *dsfabric.Call, args []byte) ([]byte, error) {
	if p.beforeAlloc != nil {
		p.beforeAlloc()
	}
	select {
	case <-p.bound:
	case <-time.After(bindWait):
		return nil, fmt.Errorf("%w within %v", ErrNotBound, bindWait)
	}
	f := p.f.Load()
	req, err := parseAllocReq(args)
	if err != nil {
		return nil, err
	}
	src, dst, count, size, fb := req.src, req.dst, req.count, req.size, req.feedback
	n := f.Names()
	if !n.Valid(dst) || n.Rank(dst) != f.Rank() || size != p.cfg.ChunkSize || count < 1 || count > p.cfg.MaxChunks {
		return nil, fmt.Errorf("%w: allocation of %d×%d bytes for thread %d", ErrProtocol, count, size, dst)
	}
	mems, recycled, err := p.chunks(count)
	if err != nil {
		return nil, err
	}
	batch := make([][]byte, count)
	out := appendAllocReply(nil, count)
	for i := range batch {
		cm := mems[i]
		b := cm.Bytes()
		if i < recycled {
			// A shut-down messenger's chunk may hold records. A fresh one
			// is zero already (a new memfd), and clearing it would fault
			// in every page here, in the setup the first call waits for:
			// 2 × 2 MiB took about 20 ms on the development VM.
			clear(b)
		}
		binary.LittleEndian.PutUint32(b[0:], uint32(src))
		binary.LittleEndian.PutUint32(b[4:], chunkMagic)
		fb.AppendBinary(b[offFeedback:offFeedback])
		batch[i] = b
		out, _ = cm.Locator().AppendBinary(out)
	}
	ib := p.inboxes[n.ThreadRank(dst)]
	// A new sender's entry goes into the map with its first batch: the
	// receiving thread may scan the map at any moment (another sender's
	// allocation set fresh), and an entry without chunks would become a
	// messenger that can never run a call.
	in, loaded := ib.senders.LoadOrCompute(src, func() *incoming { return &incoming{fb: fb, batches: [][][]byte{batch}} })
	if loaded {
		in.mu.Lock()
		in.batches = append(in.batches, batch)
		in.mu.Unlock()
	}
	ib.fresh.Store(true)
	return out, nil
}

// chunks returns count chunks: chunks of shut-down messengers first (the
// first recycled of them), then new ones from the zone, which are zero.
func (p *Process) chunks(count int) (out []alloc.Memory, recycled int, err error) {
	size := p.cfg.ChunkSize
	p.zoneMu.Lock()
	defer p.zoneMu.Unlock()
	for len(out) < count && len(p.free) > 0 {
		out = append(out, p.free[len(p.free)-1])
		p.free = p.free[:len(p.free)-1]
	}
	recycled = len(out)
	if need := count - len(out); need > 0 {
		m, err := p.zone.Alloc(need * size)
		if err != nil {
			p.free = append(p.free, out...)
			return nil, 0, err
		}
		// Fault the new chunks in here, in one madvise, rather than a page
		// at a time as the sender first writes them and again as this
		// side first reads them (a third of a 2×1 MCTS run's page faults,
		// about 10 µs each on the development VM); a sender sharing the
		// memory then maps them resident (mapChunk). Best effort: before
		// Linux 5.14 they fault in on first touch as before.
		_ = alloc.Populate(m.Bytes())
		for i := 0; i < need; i++ {
			cm, _ := m.Slice(i*size, size)
			p.byBase[&cm.Bytes()[0]] = cm
			out = append(out, cm)
		}
	}
	return out, recycled, nil
}

// release returns the chunks of a shut-down messenger for reuse.
func (p *Process) release(chunks [][]byte) {
	p.zoneMu.Lock()
	defer p.zoneMu.Unlock()
	for _, c := range chunks {
		if cm, ok := p.byBase[&c[0]]; ok {
			p.free = append(p.free, cm)
		}
	}
}

// take returns the next batch allocated for the sender, if any.
func (in *incoming) take() [][]byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.batches) == 0 {
		return nil
	}
	b := in.batches[0]
	in.batches = in.batches[1:]
	return b
}

// Messengers is one thread's set of messengers (the paper's
// RDMAMessengerGlobal): one per destination thread, created on first use,
// and the receiving side for every thread that sends to it. It belongs to
// that thread: no two goroutines may use one at once.
type Messengers struct {
	p         *Process
	f         *dsfabric.Fabric
	proc      *dtutils.Process // f's: Closed is checked before its memory is touched
	self      dsfabric.ThreadID
	out       map[dsfabric.ThreadID]*sender
	opening   map[dsfabric.ThreadID]*pendingOpen // allocations an Open stopped waiting for
	last      *sender                            // the sender used last: a stream of calls skips the map
	rx        rxState                            // the receiving side: polled by the thread or its Poller
	delegated bool                               // a Poller polls the receiving side
	inbox     *inbox
	ring      *alloc.LinearCircular // records being written
	small     *alloc.LinearCircular // records of at most smallRecord bytes
	fbReg     *alloc.Region         // feedback words, one per destination thread
	syncs     *syncSlots            // counters of this thread's Synchronizers
	stats     Stats
	closed    map[dsfabric.ThreadID]error // destinations that closed their messenger
	keeper    *keeper                     // RetryAsync: keeps and sends the calls that do not fit
	scratch   []byte                      // CallReturn's argument buffer, reused
	// afterFinish, set by tests only, runs after a receiver has finished a
	// chunk and given its feedback.
	afterFinish func(*receiver)
}

// Stats counts a thread's messenger activity.
type Stats struct {
	Calls, Received, Rotations, Grows, UnknownHandlers int64
	// Opened counts the messengers this thread set up (Open, or a first
	// call to a destination).
	Opened int64
}

// Messengers returns the messengers of local worker thread t, the same ones
// on every call. Use them from that thread only (a Poller may take over the
// receiving side).
func (p *Process) Messengers(t int) (*Messengers, error) {
	f := p.f.Load()
	if f == nil {
		return nil, ErrNotBound
	}
	self, err := f.Names().Thread(f.Rank(), t)
	if err != nil {
		return nil, err
	}
	p.msgrsMu.Lock()
	defer p.msgrsMu.Unlock()
	if m := p.msgrs[t]; m != nil {
		return m, nil
	}
	if p.beforeMessengers != nil {
		if err := p.beforeMessengers(t); err != nil {
			return nil, err
		}
	}
	z, err := alloc.NewZoneAllocator(f.Process().Registry(), alloc.ZoneConfig{SuperchunkSize: 16 << 20, ChunkSize: 1 << 20})
	if err != nil {
		return nil, err
	}
	ring, err := newRing(z, p.cfg.callUnit())
	if err != nil {
		return nil, err
	}
	small, err := newRing(z, smallUnit)
	if err != nil {
		return nil, err
	}
	// The receiving side writes feedback and replies from its own ring, so
	// that a Poller can run it while the thread sends.
	rxRing, err := newRing(z, 64<<10)
	if err != nil {
		return nil, err
	}
	fbReg, err := f.Process().Registry().NewRegion(8*f.Names().Threads(), alloc.RegionConfig{Name: "riutils-feedback"})
	if err != nil {
		return nil, err
	}
	m := &Messengers{p: p, f: f, proc: f.Process(), self: self, out: map[dsfabric.ThreadID]*sender{}, closed: map[dsfabric.ThreadID]error{},
		inbox: p.inboxes[t], ring: ring, small: small, fbReg: fbReg}
	m.rx.ring = rxRing
	if p.cfg.Policy == RetryAsync {
		if m.keeper, err = newKeeper(m, z); err != nil {
			return nil, err
		}
	}
	p.msgrs[t] = m
	return m, nil
}

// callUnit is the unit of the rings a thread's calls are built in (its
// own, and RetryAsync's helper's): any call a chunk holds fits one unit.
func (c Config) callUnit() int { return max(256<<10, c.ChunkSize) }

// newRing makes a ring that records are built in, its units populated as
// they are taken from the zone: otherwise the first lap through a unit
// faulted its pages in one by one under the record writes (putInner had
// 43 % of a 2×1 MCTS run's page faults; docs/benchmarks.md, 2026-11-29,
// late morning).
func newRing(z *alloc.ZoneAllocator, unit int) (*alloc.LinearCircular, error) {
	return alloc.NewLinearCircular(z, alloc.CircularConfig{UnitSize: unit, InitialUnits: 2, MaxUnits: 64, Growth: alloc.Linear, Align: 8, Populate: true})
}

// Flush waits until the calls RetryAsync keeps are sent (running this
// thread's own calls meanwhile). Without RetryAsync it does nothing:
// Messenger calls are written at once. Calls still kept when the fabric
// closes are lost: Flush then returns ErrClosed.
func (m *Messengers) Flush() error {
	if m.keeper == nil {
		return nil
	}
	w := m.replyWait()
	for {
		n, err := m.keeper.status()
		if err != nil || m.keeper.busy() == 0 {
			return err
		}
		if m.proc.Closed() {
			// The helper stopped at the close: what it kept stays.
			return fmt.Errorf("%w: %d bytes kept were not sent", errFabricClosed, n)
		}
		if m.Poll() > 0 {
			w.Reset()
		} else {
			if err := m.f.DeadErr(); err != nil {
				return fmt.Errorf("riutils: %d bytes kept: %w", n, err)
			}
			w.Wait()
		}
	}
}

// Kept returns the bytes of calls RetryAsync keeps locally.
func (m *Messengers) Kept() int {
	n, _ := m.keeper.status()
	return n
}

// ID returns the thread the messengers belong to.
func (m *Messengers) ID() dsfabric.ThreadID { return m.self }

// Stats returns the counters. With a Poller, Received and UnknownHandlers
// are the Poller's to report (Poller.Stats).
func (m *Messengers) Stats() Stats {
	s := m.stats
	if k := m.keeper; k != nil {
		k.mu.Lock()
		s.Calls += k.stats.Calls
		s.Rotations += k.stats.Rotations
		s.Grows += k.stats.Grows
		k.mu.Unlock()
	}
	if !m.delegated {
		s.Received, s.UnknownHandlers = m.rx.stats.Received, m.rx.stats.UnknownHandlers
	}
	return s
}

// alloc returns n bytes of registered memory for an outgoing write, making
// room by flushing when every unit is still in flight.
func (m *Messengers) alloc(tx *dtutils.Transmitter, n int) (alloc.Memory, error) {
	if n <= smallRecord {
		return allocFrom(m.small, tx, n)
	}
	return allocFrom(m.ring, tx, n)
}

// Small records come from their own ring of small units: a stream of small
// calls then cycles through 128 KiB that stay in cache, not through two
// chunk-sized units (4 MiB by default), where every new cache line of a
// record missed (measured: 40 % of an ovfl sender's time).
const (
	smallRecord = 4 << 10
	smallUnit   = 64 << 10
)

func allocFrom(ring *alloc.LinearCircular, tx *dtutils.Transmitter, n int) (alloc.Memory, error) {
	b, err := ring.Alloc(n)
	if errors.Is(err, alloc.ErrBusy) {
		if err := tx.Flush(context.Background()); err != nil {
			return alloc.Memory{}, err
		}
		b, err = ring.Alloc(n)
	}
	return b, err
}
