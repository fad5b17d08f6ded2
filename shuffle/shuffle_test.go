package shuffle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testTransport makes the providers of one transport for the suite.
type testTransport struct {
	name string
	make func(f *dtutils.LoopFabric, p *dtutils.Process) (dtutils.Provider, error)
}

// transports are the providers the suite runs over (between processes;
// a process reaches its own endpoints over loop); builds with -tags ofi
// add ofi (transports_ofi_test.go).
var transports = []testTransport{
	{"loop", func(f *dtutils.LoopFabric, p *dtutils.Process) (dtutils.Provider, error) {
		return f.NewProvider(p), nil
	}},
	{"shm", func(_ *dtutils.LoopFabric, p *dtutils.Process) (dtutils.Provider, error) {
		return dtutils.NewSHM(p, dtutils.SHMConfig{Logger: quietLog})
	}},
	{"tcp", func(_ *dtutils.LoopFabric, p *dtutils.Process) (dtutils.Provider, error) {
		cfg := dtutils.DefaultTCPConfig()
		cfg.Logger = quietLog
		return dtutils.NewTCP(p, cfg)
	}},
}

// job is P processes with E send and E receive endpoints each (E = 1:
// single endpoint, E = T: one per thread), every send endpoint connected
// to every receive endpoint. Destination and source indexes are
// process*E + endpoint. Design SR gives every endpoint a dtutils.Process
// of its own (of the same rank), as it needs.
type job struct {
	nodes     [][]*node // per rank: one process, or SR's 2E (senders', then receivers')
	senders   [][]*Sender
	receivers [][]*Receiver
	e         int
}

// node is a dtutils process with its providers: the transport (between
// ranks) and loop (within a rank, shared by the rank's processes).
type node struct {
	proc       *dtutils.Process
	prov, self dtutils.Provider
}

func newJob(t *testing.T, mk func(*dtutils.LoopFabric, *dtutils.Process) (dtutils.Provider, error), p, e, threads int, cfg Config) *job {
	t.Helper()
	j := &job{e: e}
	f := dtutils.NewLoopFabric()
	cfg = cfg.withDefaults()
	per, slots := 1, 16
	if cfg.Design == SR {
		per, slots = 2*e, 2
		for slots < p*e*cfg.Depth {
			slots *= 2
		}
	}
	for r := 0; r < p; r++ {
		selfFabric := dtutils.NewLoopFabric()
		var ns []*node
		for k := 0; k < per; k++ {
			pc := dtutils.DefaultProcessConfig(uint32(r))
			pc.ReceiveSlots = slots
			proc, err := dtutils.NewProcess(pc)
			if err != nil {
				t.Fatal(err)
			}
			prov, err := mk(f, proc)
			if err != nil {
				t.Fatal(err)
			}
			self := selfFabric.NewProvider(proc)
			t.Cleanup(func() { prov.Close(); self.Close(); proc.Close() })
			ns = append(ns, &node{proc: proc, prov: prov, self: self})
		}
		j.nodes = append(j.nodes, ns)
	}
	j.wire(t, cfg, threads, func(ra, ea, rb, eb int) (dtutils.QueuePair, dtutils.QueuePair) {
		return j.connect(t, ra, ea, rb, eb)
	})
	return j
}

// wire makes the job's endpoints and attaches every sender (ra, ea) to
// every receiver (rb, eb) over the queue pairs qps gives for them.
func (j *job) wire(t *testing.T, cfg Config, threads int, qps func(ra, ea, rb, eb int) (dtutils.QueuePair, dtutils.QueuePair)) {
	t.Helper()
	p, e := len(j.nodes), j.e
	for r := 0; r < p; r++ {
		var ss []*Sender
		var rs []*Receiver
		for k := 0; k < e; k++ {
			s, err := NewSender(j.sendNode(r, k).proc, cfg, p*e, threads/e)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := NewReceiver(j.recvNode(r, k).proc, cfg, p*e)
			if err != nil {
				t.Fatal(err)
			}
			ss, rs = append(ss, s), append(rs, rc)
		}
		j.senders, j.receivers = append(j.senders, ss), append(j.receivers, rs)
	}
	for ra := 0; ra < p; ra++ {
		for ea := 0; ea < e; ea++ {
			for rb := 0; rb < p; rb++ {
				for eb := 0; eb < e; eb++ {
					qa, qb := qps(ra, ea, rb, eb)
					s, rc := j.senders[ra][ea], j.receivers[rb][eb]
					src, dst := ra*e+ea, rb*e+eb
					back, err := s.Attach(dst, qa, rc.Offer(src))
					if err != nil {
						t.Fatal(err)
					}
					if err := rc.Attach(src, qb, back); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

func (j *job) sendNode(r, k int) *node {
	if len(j.nodes[r]) == 1 {
		return j.nodes[r][0]
	}
	return j.nodes[r][k]
}

func (j *job) recvNode(r, k int) *node {
	if len(j.nodes[r]) == 1 {
		return j.nodes[r][0]
	}
	return j.nodes[r][j.e+k]
}

// kill closes rank r's transport providers: to its peers, it died.
func (j *job) kill(r int) {
	for _, n := range j.nodes[r] {
		n.prov.Close()
	}
}

// connect joins a queue pair of rank a's sender ea to one of rank b's
// receiver eb.
func (j *job) connect(t *testing.T, a, ea, b, eb int) (dtutils.QueuePair, dtutils.QueuePair) {
	t.Helper()
	na, nb := j.sendNode(a, ea), j.recvNode(b, eb)
	pa, pb := na.prov, nb.prov
	if a == b {
		pa, pb = na.self, nb.self
	}
	qa, qb, err := dtutils.ConnectPair(pa, pb)
	if err != nil {
		t.Fatal(err)
	}
	return qa, qb
}

// tally is what arrived at (or was meant for) one receive endpoint: the
// count and an order-independent checksum of the records.
type tally struct {
	n   int
	sum uint64
}

func (t *tally) add(rec []byte) {
	h := fnv.New64a()
	h.Write(rec)
	t.n++
	t.sum += h.Sum64()
}

// record makes thread (proc, th)'s i-th record for destination d: its
// origin, index and destination, then filler of a length that varies.
func record(proc, th, i, d int) []byte {
	b := make([]byte, 16+(i*7+th)%200)
	binary.LittleEndian.PutUint32(b, uint32(proc))
	binary.LittleEndian.PutUint32(b[4:], uint32(th))
	binary.LittleEndian.PutUint32(b[8:], uint32(i))
	binary.LittleEndian.PutUint32(b[12:], uint32(d))
	for k := 16; k < len(b); k++ {
		b[k] = byte(k * (i + 1))
	}
	return b
}

type runSpec struct {
	threads int
	records func(proc, th int) int           // records per sending thread
	dest    func(proc, th, i, ndest int) int // a record's group
	groups  func(ndest int) [][]int
	slow    time.Duration // receiver's pause per record
}

// run shuffles every thread's records and checks every receive endpoint
// got exactly what was meant for it.
func (j *job) run(t *testing.T, ctx context.Context, spec runSpec) {
	t.Helper()
	j.start(ctx, spec)(t)
}

// start starts run's threads; the function it returns waits for them and
// checks.
func (j *job) start(ctx context.Context, spec runSpec) func(t *testing.T) {
	p, e, T := len(j.nodes), j.e, spec.threads
	ndest := p * e
	groups := spec.groups(ndest)
	want := make([]tally, ndest)
	var wantMu sync.Mutex
	got := make([]tally, ndest)
	var gotMu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 2*p*T)
	for r := 0; r < p; r++ {
		for th := 0; th < T; th++ {
			wg.Add(2)
			go func() { // a sending thread
				defer wg.Done()
				sh, err := j.senders[r][th%e].NewShuffle(groups)
				if err != nil {
					errs <- err
					return
				}
				for i := 0; i < spec.records(r, th); i++ {
					g := spec.dest(r, th, i, len(groups))
					rec := record(r, th, i, g)
					if err := sh.Put(ctx, g, rec); err != nil {
						errs <- fmt.Errorf("process %d thread %d record %d: %w", r, th, i, err)
						sh.Close(ctx)
						return
					}
					wantMu.Lock()
					for _, d := range groups[g] {
						want[d].add(rec)
					}
					wantMu.Unlock()
				}
				if err := sh.Close(ctx); err != nil {
					errs <- fmt.Errorf("process %d thread %d closing: %w", r, th, err)
				}
			}()
			go func() { // a receiving thread
				defer wg.Done()
				ep := r*e + th%e
				err := j.receivers[r][th%e].NewReceive().Each(ctx, func(rec []byte) error {
					g := int(binary.LittleEndian.Uint32(rec[12:]))
					if !containsInt(groups[g], ep) {
						return fmt.Errorf("got a record of group %d %v", g, groups[g])
					}
					gotMu.Lock()
					got[ep].add(rec)
					gotMu.Unlock()
					if spec.slow > 0 {
						time.Sleep(spec.slow)
					}
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("receiver %d: %w", ep, err)
				}
			}()
		}
	}
	return func(t *testing.T) {
		t.Helper()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for d := range want {
			if got[d] != want[d] {
				t.Errorf("receive endpoint %d: %d records (sum %x), want %d (sum %x)", d, got[d].n, got[d].sum, want[d].n, want[d].sum)
			}
		}
	}
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// hashDest spreads records over the groups.
func hashDest(proc, th, i, n int) int { return (i*31 + th*7 + proc*13) % n }

// TestSection4_Operators (seed 004 §4.3, §5): every design in the single-
// and multi-endpoint configurations, over every transport, moves a
// generated data set by repartition and by broadcast: each receive
// endpoint gets exactly the records meant for it (counts and checksums),
// and the stream ends (Depleted) everywhere.
func TestSection4_Operators(t *testing.T) {
	for _, tr := range transports {
		for _, d := range []Design{WR, RD, SR} {
			for _, me := range []bool{false, true} {
				cname := "se"
				e := 1
				if me {
					cname, e = "me", 2
				}
				t.Run(fmt.Sprintf("%s/%v/%s", tr.name, d, cname), func(t *testing.T) {
					cfg := Config{Design: d, BufferBytes: 1024, Depth: 4}
					for _, pattern := range []struct {
						name   string
						groups func(int) [][]int
					}{{"repartition", Repartition}, {"broadcast", Broadcast}} {
						j := newJob(t, tr.make, 2, e, 2, cfg)
						j.run(t, testCtx(t), runSpec{threads: 2, records: func(int, int) int { return 300 }, dest: hashDest, groups: pattern.groups})
					}
				})
			}
		}
	}
}

// TestPutRecordSize: a record fits a buffer with its 4-byte length or is
// refused with ErrTooLarge; one that would not fit is never dropped.
func TestPutRecordSize(t *testing.T) {
	const buffer = 256
	j := newJob(t, transports[0].make, 1, 1, 1, Config{Design: WR, BufferBytes: buffer, Depth: 2})
	ctx := testCtx(t)
	got := make(chan [2]int, 1)
	go func() {
		n, bytes := 0, 0
		err := j.receivers[0][0].NewReceive().Each(ctx, func(rec []byte) error { n, bytes = n+1, bytes+len(rec); return nil })
		if err != nil {
			n = -1
		}
		got <- [2]int{n, bytes}
	}()
	sh, err := j.senders[0][0].NewShuffle(Repartition(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{buffer - recordHeader + 1, buffer - 1, buffer} {
		if err := sh.Put(ctx, 0, make([]byte, n)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("a %d-byte record in %d-byte buffers: %v, want ErrTooLarge", n, buffer, err)
		}
	}
	if err := sh.Put(ctx, 0, make([]byte, buffer-recordHeader)); err != nil {
		t.Fatalf("a record that fills a buffer: %v", err)
	}
	if err := sh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != [2]int{1, buffer - recordHeader} {
		t.Fatalf("the receiver got %d records of %d bytes in all, want the one of %d", g[0], g[1], buffer-recordHeader)
	}
}

// TestEmptyStreams: senders with nothing to send, and partitions nobody
// sends to, still end every receiver's stream.
func TestEmptyStreams(t *testing.T) {
	for _, d := range []Design{WR, RD, SR} {
		t.Run(d.String(), func(t *testing.T) {
			j := newJob(t, transports[1].make, 3, 1, 2, Config{Design: d, BufferBytes: 256, Depth: 2})
			j.run(t, testCtx(t), runSpec{
				threads: 2,
				records: func(proc, th int) int {
					if proc == 1 || th == 1 {
						return 0 // these send nothing at all
					}
					return 50
				},
				dest:   func(proc, th, i, n int) int { return 0 }, // only destination 0 gets data
				groups: Repartition,
			})
		})
	}
}

// TestSlowReceiver: a receiver slower than its senders holds them back
// (Depth buffers per connection in flight, nothing dropped or spilled).
func TestSlowReceiver(t *testing.T) {
	for _, tr := range transports[1:] {
		for _, d := range []Design{WR, RD, SR} {
			t.Run(fmt.Sprintf("%s/%v", tr.name, d), func(t *testing.T) {
				j := newJob(t, tr.make, 2, 1, 1, Config{Design: d, BufferBytes: 512, Depth: 2})
				j.run(t, testCtx(t), runSpec{threads: 1, records: func(int, int) int { return 200 }, dest: hashDest, groups: Repartition, slow: 200 * time.Microsecond})
			})
		}
	}
}

// TestDeadPeer: when a peer process goes away mid-stream, the senders
// waiting on it and the receivers waiting for it fail with ErrPeerLost
// instead of hanging.
func TestDeadPeer(t *testing.T) {
	for _, tr := range transports[1:] {
		for _, d := range []Design{WR, RD, SR} {
			t.Run(fmt.Sprintf("%s/%v", tr.name, d), func(t *testing.T) {
				j := newJob(t, tr.make, 2, 1, 1, Config{Design: d, BufferBytes: 512, Depth: 2})
				ctx := testCtx(t)
				// Process 1 never receives: process 0's sends to it fill the
				// ring, then it dies.
				sh, err := j.senders[0][0].NewShuffle(Repartition(2))
				if err != nil {
					t.Fatal(err)
				}
				sendErr := make(chan error, 1)
				go func() {
					for i := 0; ; i++ {
						if err := sh.Put(ctx, 1, record(0, 0, i, 1)); err != nil {
							sendErr <- err
							return
						}
					}
				}()
				recvErr := make(chan error, 1)
				go func() { // process 0 waits for data from process 1 that never comes
					_, err := j.receivers[0][0].GetData(ctx)
					for err == nil {
						_, err = j.receivers[0][0].GetData(ctx)
					}
					recvErr <- err
				}()
				time.Sleep(50 * time.Millisecond)
				j.kill(1)
				for name, c := range map[string]chan error{"sender": sendErr, "receiver": recvErr} {
					select {
					case err := <-c:
						if !errors.Is(err, ErrPeerLost) {
							t.Errorf("%s: %v, want ErrPeerLost", name, err)
						}
					case <-time.After(20 * time.Second):
						t.Fatalf("%s still waiting 20 s after its peer died", name)
					}
				}
			})
		}
	}
}

// TestProcessClosedUnderEndpoints: closing the processes (and their
// providers) under open endpoints makes every call, the blocked ones
// included, return ErrClosed, and a buffer GetData handed out stays
// readable (the endpoints hold the memory, Process.Hold) until the
// endpoints close, which unmaps it.
func TestProcessClosedUnderEndpoints(t *testing.T) {
	for _, tr := range transports {
		for _, d := range []Design{WR, RD, SR} {
			t.Run(fmt.Sprintf("%s/%v", tr.name, d), func(t *testing.T) {
				j := newJob(t, tr.make, 2, 1, 1, Config{Design: d, BufferBytes: 256, Depth: 2})
				ctx := testCtx(t)
				s, r := j.senders[0][0], j.receivers[1][0]
				// Two buffers to process 1 fill its window.
				for _, c := range []byte("ab") {
					b, err := s.Acquire(ctx)
					if err != nil {
						t.Fatal(err)
					}
					b.Data = append(b.Data, 1, 0, 0, 0, c)
					if err := s.PutData(ctx, b, []int{1}, false); err != nil {
						t.Fatal(err)
					}
				}
				in, err := r.GetData(ctx)
				if err != nil || string(in.Data) != "\x01\x00\x00\x00a" {
					t.Fatalf("GetData: %q, %v", in.Data, err)
				}
				// Blocked: a third buffer to process 1 (its window is full
				// until in is released) and process 0's receiver, which
				// gets nothing.
				b, err := s.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				b.Data = append(b.Data, 1, 0, 0, 0, 'c')
				putErr, getErr := make(chan error, 1), make(chan error, 1)
				go func() { putErr <- s.PutData(ctx, b, []int{1}, false) }()
				go func() { _, err := j.receivers[0][0].GetData(ctx); getErr <- err }()
				time.Sleep(20 * time.Millisecond)
				select {
				case err := <-putErr:
					t.Fatalf("PutData past the window returned %v before the close", err)
				case err := <-getErr:
					t.Fatalf("GetData with nothing sent returned %v before the close", err)
				default:
				}
				for _, ns := range j.nodes {
					for _, n := range ns {
						n.prov.Close()
						n.self.Close()
						if err := n.proc.Close(); err != nil {
							t.Fatal(err)
						}
					}
				}
				for name, c := range map[string]chan error{"PutData": putErr, "GetData": getErr} {
					select {
					case err := <-c:
						// Its queue pairs closed first (ErrPeerLost), or
						// its process (ErrClosed).
						if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrPeerLost) {
							t.Errorf("blocked %s: %v, want ErrClosed or ErrPeerLost", name, err)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("blocked %s still waiting 10 s after its process closed", name)
					}
				}
				if string(in.Data) != "\x01\x00\x00\x00a" {
					t.Errorf("a buffer handed out before the close reads %q", in.Data)
				}
				if _, err := s.Acquire(ctx); !errors.Is(err, ErrClosed) {
					t.Errorf("Acquire after the close: %v, want ErrClosed", err)
				}
				if err := r.Release(in); !errors.Is(err, ErrClosed) {
					t.Errorf("Release after the close: %v, want ErrClosed", err)
				}
				if _, err := r.GetData(ctx); !errors.Is(err, ErrClosed) {
					t.Errorf("GetData after the close: %v, want ErrClosed", err)
				}
				held := 0
				for _, st := range r.proc.Registry().Stats() {
					held += int(st.Regions)
				}
				if held == 0 {
					t.Error("the receiver's process unmapped its memory while the receiver held it")
				}
				// Neither sender nor receiver finished its stream.
				for r := range j.senders {
					if err := j.senders[r][0].Close(ctx); !errors.Is(err, ErrClosed) {
						t.Errorf("sender %d's Close: %v, want ErrClosed", r, err)
					}
					if err := j.receivers[r][0].Close(ctx); !errors.Is(err, ErrClosed) {
						t.Errorf("receiver %d's Close: %v, want ErrClosed", r, err)
					}
					if err := j.senders[r][0].Close(ctx); err != nil {
						t.Errorf("sender %d's second Close: %v", r, err)
					}
				}
				for r, ns := range j.nodes {
					for _, n := range ns {
						for _, st := range n.proc.Registry().Stats() {
							if st.Regions != 0 {
								t.Errorf("rank %d: %d regions still mapped on rung %v once every endpoint closed", r, st.Regions, st.Rung)
							}
						}
					}
				}
			})
		}
	}
}

// TestDroppedEndpointsReleaseMemory: endpoints dropped without Close
// give their hold on the process back when the garbage collector finds
// them, so that a closed process's memory (its memfds included) is
// unmapped rather than kept for good.
func TestDroppedEndpointsReleaseMemory(t *testing.T) {
	j := newJob(t, transports[1].make, 2, 1, 1, Config{BufferBytes: 256, Depth: 2})
	var procs []*dtutils.Process
	for _, ns := range j.nodes {
		for _, n := range ns {
			n.prov.Close()
			n.self.Close()
			n.proc.Close()
			procs = append(procs, n.proc)
		}
	}
	regions := func() (n int64) {
		for _, p := range procs {
			for _, st := range p.Registry().Stats() {
				n += st.Regions
			}
		}
		return n
	}
	if regions() == 0 {
		t.Fatal("the processes unmapped memory their open endpoints held")
	}
	j.senders, j.receivers = nil, nil // dropped, never closed
	deadline := time.Now().Add(10 * time.Second)
	for regions() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d regions still mapped 10 s after the endpoints were dropped", regions())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConfigAndOffers: bad configurations and mismatched offers are
// refused.
func TestConfigAndOffers(t *testing.T) {
	for _, c := range []Config{{Design: 9}, {BufferBytes: 8}, {BufferBytes: 100}, {Depth: -1}, {Depth: 5000}} {
		if err := c.VerifyConfig(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want ErrBadConfig", c, err)
		}
	}
	j := newJob(t, transports[0].make, 1, 1, 1, Config{})
	o := j.receivers[0][0].Offer(0)
	if _, err := parseOffer(o, Config{Depth: 9}.withDefaults()); !errors.Is(err, ErrBadOffer) {
		t.Errorf("offer for another depth: %v", err)
	}
	if _, err := parseOffer(o[:10], DefaultConfig()); !errors.Is(err, ErrBadOffer) {
		t.Errorf("short offer: %v", err)
	}
	cfg := Config{}.withDefaults()
	if _, err := parseOffer(o, cfg); err != nil {
		t.Fatalf("the offer itself: %v", err)
	}
	// One field changed at a time (FuzzOffer's seeds are well-formed).
	for name, edit := range map[string]func(b []byte){
		"another version":         func(b []byte) { b[0]++ },
		"a window past its depth": func(b []byte) { binary.LittleEndian.PutUint32(b[12:], uint32(cfg.Depth+1)) },
		"another buffer size":     func(b []byte) { binary.LittleEndian.PutUint32(b[8:], uint32(cfg.BufferBytes*2)) },
	} {
		b := append([]byte(nil), o...)
		edit(b)
		if _, err := parseOffer(b, cfg); !errors.Is(err, ErrBadOffer) {
			t.Errorf("offer with %s: %v, want ErrBadOffer", name, err)
		}
	}
	if _, err := j.senders[0][0].NewShuffle([][]int{{3}}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("group naming a missing destination: %v", err)
	}
}

// TestDefaultDepth: the default depth keeps DefaultWindowBytes in flight
// per connection whatever the buffer size, within Depth's bounds, and a
// depth the caller sets stays.
func TestDefaultDepth(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		depth int
	}{
		{Config{}, DefaultWindowBytes / (16 << 10)},
		{Config{BufferBytes: 64 << 10}, DefaultWindowBytes / (64 << 10)},
		{Config{BufferBytes: 16 << 20}, 2},
		{Config{BufferBytes: 64}, 4096},
		{Config{BufferBytes: 64 << 10, Depth: 3}, 3},
	} {
		got := c.cfg.withDefaults()
		if got.Depth != c.depth {
			t.Errorf("%+v: Depth %d, want %d", c.cfg, got.Depth, c.depth)
		}
		if err := got.VerifyConfig(); err != nil {
			t.Errorf("%+v: the default does not verify: %v", c.cfg, err)
		}
	}
	if d := DefaultConfig().Depth; d*DefaultConfig().BufferBytes != DefaultWindowBytes {
		t.Errorf("default Depth %d × BufferBytes %d is not DefaultWindowBytes", d, DefaultConfig().BufferBytes)
	}
}

// TestManyHeldBuffers: threads sharing one endpoint hold an output buffer
// per group each, more than the pool's Depth per destination; the sender
// grows its pool instead of waiting for buffers that will not come back.
func TestManyHeldBuffers(t *testing.T) {
	// A pool that cannot grow hangs (30 s is plenty for 400 records).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j := newJob(t, transports[0].make, 2, 1, 4, Config{BufferBytes: 256, Depth: 1})
	// Four threads, eight multicast groups over two destinations: up to 32
	// buffers held at once, with a pool of Depth×2+1 = 3.
	groups := [][]int{{0}, {1}, {0, 1}, {1, 0}, {0}, {1}, {0, 1}, {1}}
	j.run(t, ctx, runSpec{threads: 4, records: func(int, int) int { return 100 }, dest: hashDest, groups: func(int) [][]int { return groups }})
}

// TestEndpointMisuse: what a caller can get wrong with the endpoints is
// refused with its error and loses nothing: a buffer grown past
// BufferBytes (ErrTooLarge), a destination that does not exist
// (ErrBadConfig), a Release naming no source (ErrBadBuffer), Acquire and
// PutData after Close (ErrClosed); closing a Receiver again does nothing.
// The stream still ends normally afterwards.
func TestEndpointMisuse(t *testing.T) {
	ctx := testCtx(t)
	j := newJob(t, transports[0].make, 2, 1, 1, Config{BufferBytes: 256, Depth: 2})
	s, r := j.senders[0][0], j.receivers[1][0]
	b, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Data = append(b.Data, make([]byte, 257)...)
	if err := s.PutData(ctx, b, []int{1}, false); !errors.Is(err, ErrTooLarge) {
		t.Errorf("PutData of 257 bytes in a 256-byte buffer: %v, want ErrTooLarge", err)
	}
	// Given back once: a second PutData or Discard of the same buffer, or
	// a buffer of another Sender, would hand one buffer out twice.
	if err := s.PutData(ctx, b, []int{1}, false); !errors.Is(err, ErrBadBuffer) {
		t.Errorf("PutData of a buffer given back already: %v, want ErrBadBuffer", err)
	}
	s.Discard(b)
	foreign, err := j.senders[1][0].Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutData(ctx, foreign, []int{1}, false); !errors.Is(err, ErrBadBuffer) {
		t.Errorf("PutData of another Sender's buffer: %v, want ErrBadBuffer", err)
	}
	j.senders[1][0].Discard(foreign)
	held := map[int]bool{}
	var bs []*OutBuffer
	for range 5 { // the pool: Depth × 2 destinations + 1
		b, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if held[b.idx] {
			t.Fatalf("buffer %d handed out twice", b.idx)
		}
		held[b.idx] = true
		bs = append(bs, b)
	}
	for _, b := range bs {
		s.Discard(b)
	}
	for _, d := range []int{-1, 2} {
		b, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutData(ctx, b, []int{d}, false); !errors.Is(err, ErrBadConfig) {
			t.Errorf("PutData to destination %d of 2: %v, want ErrBadConfig", d, err)
		}
	}
	for _, src := range []int{-1, 2} {
		if err := r.Release(In{Src: src}); !errors.Is(err, ErrBadBuffer) {
			t.Errorf("Release of a buffer from source %d of 2: %v, want ErrBadBuffer", src, err)
		}
	}
	// One record still goes through, then every stream ends.
	b, err = s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Data = append(b.Data, "kept"...)
	if err := s.PutData(ctx, b, []int{1}, false); err != nil {
		t.Fatal(err)
	}
	late, err := s.Acquire(ctx) // held across Close
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	go func() { errs <- s.Close(ctx) }()
	go func() { errs <- j.senders[1][0].Close(ctx) }()
	go func() { errs <- j.receivers[0][0].NewReceive().Each(ctx, func([]byte) error { return nil }) }()
	var got []string
	takeAll(t, ctx, r, func(in In) {
		if len(in.Data) > 0 {
			got = append(got, string(in.Data))
		}
	})
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0] != "kept" {
		t.Fatalf("received %q, want the one buffer sent", got)
	}
	if _, err := s.Acquire(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	if err := s.PutData(ctx, late, []int{1}, false); !errors.Is(err, ErrClosed) {
		t.Errorf("PutData after Close: %v, want ErrClosed", err)
	}
	for i := range 2 {
		if err := r.Close(ctx); err != nil {
			t.Errorf("Receiver.Close, time %d: %v", i+1, err)
		}
	}
	// A closed receiver's rings are given back: reading them would fault.
	if _, err := r.GetData(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("GetData after Close: %v, want ErrClosed", err)
	}
	if err := r.Release(In{Src: 0}); !errors.Is(err, ErrClosed) {
		t.Errorf("Release after Close: %v, want ErrClosed", err)
	}
}

// TestReceiverClosedMidStream: a Receiver closed while its sources still
// send gives its rings back; GetData and Release then fail with ErrClosed
// instead of reading memory that is no longer the receiver's. Every design.
func TestReceiverClosedMidStream(t *testing.T) {
	for _, d := range []Design{WR, RD, SR} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := testCtx(t)
			j := newJob(t, transports[0].make, 2, 1, 1, Config{Design: d, BufferBytes: 256, Depth: 2})
			s, r := j.senders[0][0], j.receivers[1][0]
			b, err := s.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b.Data = append(b.Data, "first"...)
			if err := s.PutData(ctx, b, []int{1}, false); err != nil {
				t.Fatal(err)
			}
			in, err := r.GetData(ctx)
			if err != nil || string(in.Data) != "first" {
				t.Fatalf("the buffer sent: %q, %v", in.Data, err)
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			r.Close(cctx) // mid-stream: what it returns is not this test's concern
			if _, err := r.GetData(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("GetData after Close mid-stream: %v, want ErrClosed", err)
			}
			if err := r.Release(in); !errors.Is(err, ErrClosed) {
				t.Errorf("Release after Close mid-stream: %v, want ErrClosed", err)
			}
		})
	}
}

// TestSection6_AdaptiveWindow (seed 004 §6): an adaptive receiver widens
// a source's window while its consumer keeps waiting for buffers the
// window held back, and narrows it once buffers pile up (the consumer
// paused, then slower than the sender); nothing is lost either way.
func TestSection6_AdaptiveWindow(t *testing.T) {
	for _, tr := range transports[1:] {
		for _, d := range []Design{WR, RD, SR} {
			t.Run(fmt.Sprintf("%s/%v", tr.name, d), func(t *testing.T) {
				cfg := Config{Design: d, BufferBytes: 256, Depth: 32, Adaptive: true}
				j := newJob(t, tr.make, 2, 1, 1, cfg)
				ctx := testCtx(t)
				const fast, slow = 4000, 100
				sendErr := make(chan error, 1)
				go func() {
					s := j.senders[0][0]
					for i := 0; i < fast+slow; i++ {
						b, err := s.Acquire(ctx)
						if err == nil {
							b.Data = binary.LittleEndian.AppendUint64(b.Data, uint64(i))
							err = s.PutData(ctx, b, []int{1}, false)
						}
						if err != nil {
							sendErr <- err
							return
						}
					}
					sendErr <- s.Close(ctx)
				}()
				// Process 1's sender sends nothing; process 0's receiver gets
				// only the two Depleted buffers.
				otherErr := make(chan error, 2)
				go func() { otherErr <- j.senders[1][0].Close(ctx) }()
				go func() { otherErr <- j.receivers[0][0].NewReceive().Each(ctx, func([]byte) error { return nil }) }()
				r := j.receivers[1][0]
				take := func(i int) {
					in, err := r.GetData(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if in.Src == 1 && in.Depleted && len(in.Data) == 0 { // process 1's end
						r.Release(in)
						if in, err = r.GetData(ctx); err != nil {
							t.Fatal(err)
						}
					}
					if in.Src != 0 || len(in.Data) != 8 || binary.LittleEndian.Uint64(in.Data) != uint64(i) {
						t.Fatalf("buffer %d: source %d, %d bytes %x", i, in.Src, len(in.Data), in.Data)
					}
					if err := r.Release(in); err != nil {
						t.Fatal(err)
					}
				}
				for i := 0; i < fast; i++ {
					take(i)
				}
				grown := r.Stats()
				if grown.Grows == 0 || grown.MaxWindow <= initialWindow {
					t.Errorf("a consumer waiting on its sender: %d grows, largest window %d (starts at %d)", grown.Grows, grown.MaxWindow, initialWindow)
				}
				time.Sleep(20 * time.Millisecond) // the sender fills the window
				least := grown.Windows[0]
				for i := fast; i < fast+slow; i++ {
					take(i)
					least = min(least, r.Stats().Windows[0])
					time.Sleep(time.Millisecond)
				}
				slowed := r.Stats()
				// Above initialWindow in the fast phase, down to its floor
				// (one more than the largest window that starved the
				// consumer) or below while the consumer is slow (a
				// scheduling hiccup may grow it again for a while: the
				// least is what is checked).
				// A floor at the largest window means a window one
				// smaller starved the consumer: nothing may shrink then
				// (TestSection6_AdaptiveFloor checks the rule itself).
				want := max(initialWindow, slowed.Floors[0])
				if least > want || want < grown.MaxWindow && (slowed.Shrinks == 0 || least >= grown.MaxWindow) {
					t.Errorf("a consumer slower than its sender: window down to %d after %d shrinks, want ≤ %d and < %d", least, slowed.Shrinks, want, grown.MaxWindow)
				}
				t.Logf("fast: %d grows, %d shrinks, window up to %d; slow: window down to %d (floor %d), %d shrinks", grown.Grows, grown.Shrinks, grown.MaxWindow, least, slowed.Floors[0], slowed.Shrinks)
				// The stream still ends.
				for {
					in, err := r.GetData(ctx)
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					if len(in.Data) > 0 || !in.Depleted {
						t.Fatalf("a buffer past the last: %x", in.Data)
					}
					r.Release(in)
				}
				for _, c := range []chan error{sendErr, otherErr, otherErr} {
					if err := <-c; err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// TestSection6_AdaptiveFloor (seed 004 §6): a window that starved its
// consumer is not shrunk back to that size, however many buffers wait;
// one that never starved it shrinks to one spare.
func TestSection6_AdaptiveFloor(t *testing.T) {
	r := &Receiver{cfg: Config{Depth: 32, Adaptive: true}}
	s := &recvSrc{window: initialWindow}
	epoch := func(spare int) {
		for n := s.window; n > 0; n-- {
			r.adapt(s, false, spare)
		}
	}
	r.adapt(s, true, 0) // 2 starved: 4
	r.adapt(s, true, 0) // 4 starved: 8
	if s.window != 8 || s.floor != 5 {
		t.Fatalf("after two starvations: window %d, floor %d; want 8 and 5", s.window, s.floor)
	}
	epoch(7) // seven waiting beyond the one taken throughout
	if s.window != 5 {
		t.Errorf("a surplus epoch shrank the window to %d, want its floor 5", s.window)
	}
	epoch(4)
	if s.window != 5 {
		t.Errorf("the window went below its floor: %d", s.window)
	}
	r.adapt(s, true, 0) // 5 starved: 10, floor 6
	epoch(9)
	if s.window != 6 || s.floor != 6 {
		t.Errorf("after starving at 5: window %d, floor %d; want 6 and 6", s.window, s.floor)
	}
	fresh := &recvSrc{window: 16}
	s = fresh
	epoch(15)
	if s.window != 2 {
		t.Errorf("a window that never starved shrank to %d, want 2 (one spare)", s.window)
	}
}

// TestSection6_AdaptiveSpareLoadedOnce (seed 004 §6): the adaptive
// receiver counts the buffers waiting beyond the one it takes (the spare
// its window shrinks by) without loading each waiting buffer's header again
// at every take: a buffer found in its slot stays there until taken. Loaded
// again, a deep window of small buffers cost hundreds of loads per buffer
// (1 KiB buffers, Depth 2048: 360–600, the adaptive window at a third of
// the fixed one's rate; docs/benchmarks.md, 2026-12-07).
func TestSection6_AdaptiveSpareLoadedOnce(t *testing.T) {
	const depth, waiting = 64, 40
	cfg := Config{Design: WR, BufferBytes: 64, Depth: depth, Adaptive: true}
	s := &recvSrc{window: depth, next: 1, ring: make([]byte, depth*slotBytes(cfg))}
	s.qp = struct{ dtutils.QueuePair }{} // attached; a WR take makes no call on it
	r := &Receiver{cfg: cfg, srcs: []*recvSrc{s}, live: 1}
	header := func(slotOf, seq uint64) {
		at := int((slotOf-1)%depth)*slotBytes(cfg) + cfg.BufferBytes
		putHeader(s.ring[at:], seq, 8, 0)
	}
	for seq := uint64(1); seq <= waiting; seq++ {
		header(seq, seq)
	}
	take := func(want uint64) {
		t.Helper()
		in, ok, err := r.take(testCtx(t), false)
		if err != nil || !ok || in.seq != want {
			t.Fatalf("take: buffer %d, %v, %v; want buffer %d", in.seq, ok, err, want)
		}
	}
	take(1)
	if s.minSpare != waiting-1 {
		t.Fatalf("taking buffer 1 of %d: %d spare, want %d", waiting, s.minSpare, waiting-1)
	}
	// Buffers 3… were seen in their slots; a load of their headers now
	// would find them gone.
	for seq := uint64(3); seq <= waiting; seq++ {
		header(seq, 0)
	}
	take(2)
	if s.minSpare != waiting-2 {
		t.Errorf("taking buffer 2: %d spare, want %d (the headers counted at the last take were loaded again)", s.minSpare, waiting-2)
	}
	// Past those, the count goes on where the last one stopped.
	for seq := uint64(3); seq <= waiting+5; seq++ {
		header(seq, seq)
	}
	take(3)
	if s.minSpare != waiting-2 {
		t.Errorf("after 5 more arrived: fewest spare %d, want %d", s.minSpare, waiting-2)
	}
	if s.arrivedAhead != waiting+5-4 {
		t.Errorf("after taking buffer 3 of %d: %d known in their slots after buffer 4, want %d", waiting+5, s.arrivedAhead, waiting+5-4)
	}
}

// TestSRArrivalsInOrder: the SR receiver hands out the arrivals it polled
// in the order they landed, however many wait (a lagging receiver holds up
// to Depth per source), and keeps each source's count of those still
// waiting, the spare of its adaptive window (seed 004 §6).
func TestSRArrivalsInOrder(t *testing.T) {
	proc, err := dtutils.NewProcess(dtutils.DefaultProcessConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Close() })
	r := &Receiver{proc: proc, cfg: Config{Design: SR, BufferBytes: 64, Depth: 64, Adaptive: true}, bufs: make([]alloc.Memory, 100)}
	for range 2 {
		r.srcs = append(r.srcs, &recvSrc{window: 64})
	}
	var order []srArrival
	for i := range 100 {
		a := srArrival{src: i % 3 % 2, buf: i} // sources 0, 1, 0, 0, 1, 0, …
		order = append(order, a)
		r.landed = append(r.landed, a)
		r.srcs[a.src].landed++
	}
	for k, want := range order {
		in, ok, err := r.takeSR(false)
		if err != nil || !ok || in.Src != want.src || in.seq != uint64(want.buf)+1 {
			t.Fatalf("take %d: source %d, buffer %d, %v, %v; want source %d, buffer %d", k, in.Src, in.seq-1, ok, err, want.src, want.buf)
		}
		waiting := [2]int{}
		for _, a := range order[k+1:] {
			waiting[a.src]++
		}
		for src, s := range r.srcs {
			if s.landed != waiting[src] {
				t.Fatalf("after take %d: source %d has %d arrivals counted waiting, want %d", k, src, s.landed, waiting[src])
			}
		}
		if k == 0 && r.srcs[0].minSpare != waiting[0] {
			t.Errorf("the first take's spare: %d, want %d", r.srcs[0].minSpare, waiting[0])
		}
	}
	if _, ok, err := r.takeSR(false); ok || err != nil {
		t.Fatalf("a take after the last arrival: %v, %v", ok, err)
	}
	if len(r.landed) > 0 {
		t.Errorf("%d arrivals kept after every one was handed out", len(r.landed))
	}
}

// TestSRForgedSource: an SR buffer whose immediate names a source that is
// not the connection it came from (another process's sender) fails the
// receiver with ErrBadBuffer instead of being counted as that source's.
func TestSRForgedSource(t *testing.T) {
	j := newJob(t, transports[1].make, 2, 1, 1, Config{Design: SR, BufferBytes: 256, Depth: 2})
	s := j.senders[0][0]
	c := s.conns[1] // process 0's sender → process 1's receiver
	src, _ := s.bufs[0].Slice(0, 8)
	// Source index 1 is process 1's own sender at that receiver.
	if err := c.qp.Post(dtutils.WorkRequest{Op: dtutils.OpSend, Local: src, Imm: srImm(1, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.receivers[1][0].GetData(testCtx(t)); !errors.Is(err, ErrBadBuffer) {
		t.Fatalf("a buffer naming another process's source: %v, want ErrBadBuffer", err)
	}
}

// TestSRForgedCredit: an SR credit names the destination it is for by
// index; one from another process (here process 2, naming process 1's
// connection, to widen that window) is ignored, and the genuine credit
// that follows it counts.
func TestSRForgedCredit(t *testing.T) {
	j := newJob(t, transports[1].make, 3, 1, 1, Config{Design: SR, BufferBytes: 256, Depth: 4})
	s := j.senders[0][0]
	send := func(from int, consumed uint64) {
		t.Helper()
		src := j.receivers[from][0].srcs[0] // its connection from process 0's sender
		w, _ := src.words.Slice(0, creditBytes)
		binary.LittleEndian.PutUint64(w.Bytes(), packCredit(consumed, 4))
		if err := src.qp.Post(dtutils.WorkRequest{Op: dtutils.OpSend, Local: w, Imm: srImm(1, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	send(2, 1000) // forged: process 2 speaks for destination 1
	send(1, 1)    // genuine
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		s.pollCredits()
		consumed, _ := unpackCredit(s.conns[1].credit.Load())
		s.mu.Unlock()
		if consumed == 1 {
			return
		}
		if consumed != 0 || time.Now().After(deadline) {
			t.Fatalf("destination 1's credit counts %d consumed, want the genuine 1 (the forged one said 1000)", consumed)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMalformedRecords: a buffer whose records do not parse (a sender
// that wrote its buffer by hand) fails Next with ErrBadBuffer after the
// records before the damage, and the stream goes on with the next buffer;
// Each stops with the error.
func TestMalformedRecords(t *testing.T) {
	// send writes the two buffers and closes the sender in the background;
	// the returned channel gives Close's error once every buffer was
	// consumed (the test waits for it: a Close still running after the
	// test would touch the job's memory after its cleanup unmapped it).
	send := func(t *testing.T, j *job) (closed <-chan error, stop func()) {
		ctx, stop := context.WithCancel(testCtx(t))
		t.Cleanup(stop)
		s := j.senders[0][0]
		for _, data := range [][]byte{{1, 0, 0, 0, 'a', 9, 0, 0, 0, 'x'}, {1, 0, 0, 0, 'b'}} {
			b, err := s.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b.Data = append(b.Data, data...)
			if err := s.PutData(ctx, b, []int{0}, false); err != nil {
				t.Fatal(err)
			}
		}
		c := make(chan error, 1)
		go func() { c <- s.Close(ctx) }()
		return c, stop
	}
	t.Run("Next", func(t *testing.T) {
		j := newJob(t, transports[0].make, 1, 1, 1, Config{BufferBytes: 256, Depth: 4})
		closed, stop := send(t, j)
		rc := j.receivers[0][0].NewReceive()
		ctx := testCtx(t)
		var got []string
		for {
			rec, err := rc.Next(ctx)
			if err == io.EOF {
				break
			}
			if errors.Is(err, ErrBadBuffer) {
				got = append(got, "bad")
				continue
			}
			if err != nil {
				t.Error(err)
				break
			}
			got = append(got, string(rec))
		}
		if strings.Join(got, ",") != "a,bad,b" {
			t.Errorf("records %q, want a, the error, b", got)
			stop() // b may be unconsumed: Close would wait for it
		}
		if err := <-closed; err != nil && !t.Failed() {
			t.Errorf("sender's Close: %v", err)
		}
	})
	t.Run("Each", func(t *testing.T) {
		j := newJob(t, transports[0].make, 1, 1, 1, Config{BufferBytes: 256, Depth: 4})
		closed, stop := send(t, j)
		var got []string
		each := func(rec []byte) error {
			got = append(got, string(rec))
			return nil
		}
		err := j.receivers[0][0].NewReceive().Each(testCtx(t), each)
		if !errors.Is(err, ErrBadBuffer) || strings.Join(got, ",") != "a" {
			t.Errorf("Each: %v after %q, want ErrBadBuffer after a", err, got)
		}
		// A new operator takes the stream from the next buffer.
		if t.Failed() {
			stop()
		} else if err := j.receivers[0][0].NewReceive().Each(testCtx(t), each); err != nil || strings.Join(got, ",") != "a,b" {
			t.Errorf("Each after the damaged buffer: %v, records %q, want a, b", err, got)
		}
		if err := <-closed; err != nil && !t.Failed() {
			t.Errorf("sender's Close: %v", err)
		}
	})
}

// TestLastCredits: receivers batch credits (a quarter of the window
// each), but a buffer released after its source's Depleted one (another
// thread still held it) is credited at once: the sender's Close waits for
// exactly that credit, and no GetData is left to flush it.
func TestLastCredits(t *testing.T) {
	for _, d := range []Design{SR, WR, RD} {
		t.Run(d.String(), func(t *testing.T) { testLastCredits(t, d) })
	}
}

func testLastCredits(t *testing.T, d Design) {
	j := newJob(t, transports[1].make, 2, 1, 1, Config{Design: d, BufferBytes: 256, Depth: 32})
	ctx := testCtx(t)
	errc := make(chan error, 3)
	go func() { errc <- j.receivers[0][0].NewReceive().Each(ctx, func([]byte) error { return nil }) }()
	go func() { errc <- j.senders[1][0].Close(ctx) }()
	s := j.senders[0][0]
	b, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Data = append(b.Data, "data"...)
	if err := s.PutData(ctx, b, []int{1}, false); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	r := j.receivers[1][0]
	var data, end In
	for data.Data == nil || !end.Depleted {
		in, err := r.GetData(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case in.Src == 1: // process 1's own end
			r.Release(in)
		case in.Depleted:
			end = in
		default:
			data = in
		}
	}
	if err := r.Release(end); err != nil { // the end first, as a second thread might
		t.Fatal(err)
	}
	if err := r.Release(data); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sender's Close still waits for the credit of a buffer released after its end")
	}
	for { // process 1's end, if it has not come yet
		in, err := r.GetData(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		r.Release(in)
	}
	for i := 0; i < 2; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// takeAll takes r's buffers until every source is depleted, handing each
// to fn before releasing it.
func takeAll(t *testing.T, ctx context.Context, r *Receiver, fn func(In)) {
	t.Helper()
	for {
		in, err := r.GetData(ctx)
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(in)
		if err := r.Release(in); err != nil {
			t.Fatal(err)
		}
	}
}

// putBuffers sends n buffers from s to destination dest, buffer i holding
// fill(i).
func putBuffers(t *testing.T, ctx context.Context, s *Sender, dest, n int, fill func(i int) []byte) {
	t.Helper()
	for i := 0; i < n; i++ {
		b, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Data = append(b.Data, fill(i)...)
		if err := s.PutData(ctx, b, []int{dest}, false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCreditsBatched: a receiver that finds a window's buffers waiting
// sends a credit per quarter of the window it consumes, not one per
// buffer (over tcp each is a frame and its answer), and the stream still
// ends with every buffer credited.
func TestCreditsBatched(t *testing.T) {
	for _, tr := range transports {
		for _, d := range []Design{SR, WR, RD} {
			t.Run(tr.name+"/"+d.String(), func(t *testing.T) {
				const depth, n = 32, 32
				j := newJob(t, tr.make, 2, 1, 1, Config{Design: d, BufferBytes: 256, Depth: depth})
				ctx := testCtx(t)
				s := j.senders[0][0]
				// The whole window, before anyone consumes.
				putBuffers(t, ctx, s, 1, n, func(i int) []byte { return []byte{byte(i)} })
				errc := make(chan error, 3)
				go func() { errc <- s.Close(ctx) }()
				go func() { errc <- j.senders[1][0].Close(ctx) }()
				go func() { errc <- j.receivers[0][0].NewReceive().Each(ctx, func([]byte) error { return nil }) }()
				r := j.receivers[1][0]
				got := 0
				takeAll(t, ctx, r, func(in In) {
					if in.Src == 0 && !in.Depleted {
						if len(in.Data) != 1 || int(in.Data[0]) != got {
							t.Fatalf("buffer %d of source 0 holds %v", got, in.Data)
						}
						got++
					}
				})
				for i := 0; i < 3; i++ {
					if err := <-errc; err != nil {
						t.Fatal(err)
					}
				}
				if got != n {
					t.Fatalf("received %d buffers of %d", got, n)
				}
				// n/(depth/4) while the window's buffers wait, one for each
				// source's end, and a few flushed when the receiver waited
				// for an end; one per buffer would be n+2.
				if c := r.Stats().Credits; c < 2 || c > n/(depth/4)+6 {
					t.Fatalf("%d credits for %d buffers in a window of %d", c, n+2, depth)
				}
			})
		}
	}
}

// mesh is P processes joined by one shared queue pair per pair of them
// (Share; a loop pair within each), for stages to attach to.
type mesh struct {
	nodes [][]*node
	qps   [][]dtutils.QueuePair // [a][b]: rank a's end towards b; [a][a] a's senders' end of its loop pair
	self  []dtutils.QueuePair   // rank a's receivers' end of its loop pair
}

func newMesh(t *testing.T, mk func(*dtutils.LoopFabric, *dtutils.Process) (dtutils.Provider, error), p int) *mesh {
	t.Helper()
	base := newJob(t, mk, p, 1, 1, Config{Depth: 1, BufferBytes: 64}) // just its processes
	m := &mesh{nodes: base.nodes, self: make([]dtutils.QueuePair, p)}
	for a := 0; a < p; a++ {
		m.qps = append(m.qps, make([]dtutils.QueuePair, p))
	}
	for a := 0; a < p; a++ {
		for b := a; b < p; b++ {
			qa, qb := base.connect(t, a, 0, b, 0)
			if a == b {
				m.qps[a][a], m.self[a] = Share(qa), Share(qb)
			} else {
				m.qps[a][b], m.qps[b][a] = Share(qa), Share(qb)
			}
		}
	}
	return m
}

// stage wires a stage's endpoints (E per process) over the mesh's
// connections.
func (m *mesh) stage(t *testing.T, e, threads int, cfg Config) *job {
	t.Helper()
	j := &job{nodes: m.nodes, e: e}
	j.wire(t, cfg, threads, func(ra, _, rb, _ int) (dtutils.QueuePair, dtutils.QueuePair) {
		if ra == rb {
			return m.qps[ra][ra], m.self[ra]
		}
		return m.qps[ra][rb], m.qps[rb][ra]
	})
	return j
}

// TestSeed000_MultiStage (seed 000): several shuffles of one plan live at
// once over one connection per pair of processes: a repartition (WR,
// single endpoint), a broadcast (RD, one endpoint per thread) and a small
// repartition that ends long before the others (adaptive WR), all
// multiplexed on the same queue pairs; each stage gets exactly its
// records and its own end of stream.
func TestSeed000_MultiStage(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			m := newMesh(t, tr.make, 3)
			ctx := testCtx(t)
			stages := []struct {
				j    *job
				spec runSpec
			}{
				{m.stage(t, 1, 2, Config{Design: WR, BufferBytes: 512, Depth: 4}),
					runSpec{threads: 2, records: func(int, int) int { return 400 }, dest: hashDest, groups: Repartition}},
				{m.stage(t, 2, 2, Config{Design: RD, BufferBytes: 1024, Depth: 2}),
					runSpec{threads: 2, records: func(int, int) int { return 200 }, dest: hashDest, groups: Broadcast}},
				{m.stage(t, 1, 1, Config{Design: WR, BufferBytes: 256, Depth: 8, Adaptive: true}),
					runSpec{threads: 1, records: func(int, int) int { return 5 }, dest: hashDest, groups: Repartition}},
			}
			var checks []func(*testing.T)
			for _, st := range stages {
				checks = append(checks, st.j.start(ctx, st.spec))
			}
			for _, check := range checks {
				check(t)
			}
			// One queue pair per pair of processes carried all three: at
			// rank a's end towards b, a link per (a's sender, b's receiver)
			// and per (b's sender, a's receiver) of each stage, 1+4+1 each
			// way (within a process, the senders' end has only the first).
			for a := range m.qps {
				for b, qp := range m.qps[a] {
					want := 12
					if a == b {
						want = 6
					}
					if got := len(qp.(*sharedQP).c.links); got != want {
						t.Errorf("connection %d→%d carries %d links, want %d", a, b, got, want)
					}
				}
			}
		})
	}
}

// TestSection5_RDInPlace: over shared memory an RD receiver reads the
// sender's buffer where it lies (the one-sided read without the copy):
// what the sender's memory holds is what GetData's In shows until the
// buffer is released. With Config.NoMap, and over tcp, it is a copy.
func TestSection5_RDInPlace(t *testing.T) {
	for _, c := range []struct {
		tr      testTransport
		noMap   bool
		inPlace bool
	}{{transports[0], false, true}, {transports[1], false, true}, {transports[1], true, false}, {transports[2], false, false}} {
		t.Run(fmt.Sprintf("%s/nomap=%v", c.tr.name, c.noMap), func(t *testing.T) {
			j := newJob(t, c.tr.make, 2, 1, 1, Config{Design: RD, BufferBytes: 256, Depth: 2, NoMap: c.noMap})
			ctx := testCtx(t)
			s := j.senders[0][0]
			b, err := s.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b.AppendRecord([]byte("sent as it was"))
			mem := s.bufs[b.idx].Bytes()
			if err := s.PutData(ctx, b, []int{1}, false); err != nil {
				t.Fatal(err)
			}
			in, err := j.receivers[1][0].GetData(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(in.Data[recordHeader:]); got != "sent as it was" {
				t.Fatalf("received %q", got)
			}
			copy(mem[recordHeader:], "SENT") // the sender holds the buffer until the release
			want := "sent as it was"
			if c.inPlace {
				want = "SENT as it was"
			}
			if got := string(in.Data[recordHeader:]); got != want {
				t.Errorf("after the sender's buffer changed, In shows %q, want %q", got, want)
			}
			if err := j.receivers[1][0].Release(in); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSection5_RDReadsAhead (§5, RD): a receiver that copies buffers
// posts the reads of every buffer that has arrived (up to readAhead), not
// one read per buffer taken, and each lands in its own slot; a forged
// descriptor among them stops the posting there and fails that buffer
// when its turn comes.
func TestSection5_RDReadsAhead(t *testing.T) {
	for _, tr := range []testTransport{transports[0], transports[2]} {
		t.Run(tr.name, func(t *testing.T) {
			const n = 6
			j := newJob(t, tr.make, 2, 1, 1, Config{Design: RD, BufferBytes: 256, Depth: 8, NoMap: true})
			ctx := testCtx(t)
			s, r := j.senders[0][0], j.receivers[1][0]
			putBuffers(t, ctx, s, 1, n, func(i int) []byte { return fmt.Appendf(nil, "buffer %d", i) })
			src := r.srcs[0]
			for deadline := time.Now().Add(10 * time.Second); ; {
				r.mu.Lock()
				all := r.arrived(src, n)
				r.mu.Unlock()
				if all {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the buffers never arrived")
				}
				j.nodes[1][0].proc.Progress()
				time.Sleep(100 * time.Microsecond)
			}
			for i := 0; i < n; i++ {
				in, err := r.GetData(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprintf("buffer %d", i); string(in.Data) != want {
					t.Fatalf("buffer %d holds %q, want %q", i, in.Data, want)
				}
				if i == 0 {
					r.mu.Lock()
					posted := src.readsPosted
					r.mu.Unlock()
					if posted != n {
						t.Fatalf("%d reads posted once the first of %d arrived buffers was taken, want all", posted, n)
					}
				}
				if err := r.Release(in); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	t.Run("forged", func(t *testing.T) {
		j := newJob(t, transports[0].make, 2, 1, 1, Config{Design: RD, BufferBytes: 256, Depth: 8, NoMap: true})
		ctx := testCtx(t)
		s, r := j.senders[0][0], j.receivers[1][0]
		putBuffers(t, ctx, s, 1, 4, func(i int) []byte { return []byte{byte(i)} })
		src := r.srcs[0]
		at := 2 * rdSlotBytes // buffer 3's slot: loop writes land at once
		var loc alloc.Locator
		if err := loc.UnmarshalBinary(src.ring[at : at+alloc.LocatorSize]); err != nil {
			t.Fatal(err)
		}
		loc.Length = 0 // refused before any read is posted
		loc.AppendBinary(src.ring[at:at])
		for i := 0; i < 2; i++ {
			in, err := r.GetData(ctx)
			if err != nil || len(in.Data) != 1 || in.Data[0] != byte(i) {
				t.Fatalf("buffer %d: %v, %v", i, in.Data, err)
			}
			if i == 0 && src.readsPosted != 2 {
				t.Fatalf("%d reads posted ahead of a forged descriptor, want 2", src.readsPosted)
			}
			r.Release(in)
		}
		if _, err := r.GetData(ctx); !errors.Is(err, ErrBadBuffer) || errors.Is(err, ErrPeerLost) {
			t.Fatalf("the buffer with the forged descriptor: %v, want ErrBadBuffer alone", err)
		}
	})
}

// TestSection5_RDForgedDescriptor: an RD descriptor naming memory the
// sender never offered (a wrong key, a range past its region) fails the
// receiver with ErrBadBuffer, read in place or copied (then also
// ErrPeerLost: the refused read ends the queue pair).
func TestSection5_RDForgedDescriptor(t *testing.T) {
	for _, forge := range []struct {
		name string
		fn   func(*alloc.Locator)
	}{{"key", func(l *alloc.Locator) { l.Key ^= 1 }}, {"range", func(l *alloc.Locator) { l.Offset += 1 << 30 }}} {
		for _, noMap := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/nomap=%v", forge.name, noMap), func(t *testing.T) {
				j := newJob(t, transports[1].make, 2, 1, 1, Config{Design: RD, BufferBytes: 256, Depth: 2, NoMap: noMap})
				r := j.receivers[1][0]
				loc := j.senders[0][0].bufs[0].Locator()
				forge.fn(&loc)
				src := r.srcs[0] // process 0's sender at process 1's receiver
				loc.AppendBinary(src.ring[:0])
				putHeader(src.ring[rdHeaderAt:], 1, 64, 0)
				_, err := r.GetData(testCtx(t))
				// Copied, the refused read also ends the queue pair (verbs
				// semantics), and the error says so too.
				if !errors.Is(err, ErrBadBuffer) || errors.Is(err, ErrPeerLost) != noMap {
					t.Fatalf("a forged descriptor: %v, want ErrBadBuffer", err)
				}
				// The refused read is over: Close, which waits for the
				// reads it posted, does not wait for that one.
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := r.Close(cctx); errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Close after a refused read: %v", err)
				}
			})
		}
	}
}

// TestSection5_WRRefusedWrite: a WR sender whose writes the receiver's
// memory refuses (the ring's key in its offer is wrong: a receiver that
// went wrong, or memory given back under it) fails with ErrPeerLost naming
// the operation, on every transport, instead of waiting for credits that
// can never come.
func TestSection5_WRRefusedWrite(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			j := newJob(t, tr.make, 2, 1, 1, Config{Design: WR, BufferBytes: 256, Depth: 2})
			s := j.senders[0][0]
			s.conns[1].ring.Key ^= 1 // process 1's ring, as process 0 names it
			// Milliseconds when it works: a Close that waits out the
			// context is the failure.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := s.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b.AppendRecord(record(0, 0, 0, 1))
			if err := s.PutData(ctx, b, []int{1}, false); err != nil && !errors.Is(err, ErrPeerLost) {
				t.Fatalf("PutData: %v", err)
			}
			err = s.Close(ctx)
			if !errors.Is(err, ErrPeerLost) || !errors.Is(err, dtutils.ErrRemoteAccess) || !strings.Contains(err.Error(), "process 1: write: ") || ctx.Err() != nil {
				t.Fatalf("Close after a refused write: %v (context: %v), want ErrPeerLost naming process 1's write", err, ctx.Err())
			}
		})
	}
}

// TestSection4_2_ReceiverTakesInTurn (seed 004 §4.2, GETDATA over several
// sources): while two sources both have buffers waiting, a receiver
// returns them in turn, so that one fast source cannot hold the consumer
// while another's buffers (and its sender's window) wait; a buffer
// released twice is an error, and the second release credits nothing.
func TestSection4_2_ReceiverTakesInTurn(t *testing.T) {
	for _, d := range []Design{WR, RD, SR} {
		t.Run(d.String(), func(t *testing.T) {
			const each = 3
			j := newJob(t, transports[0].make, 2, 1, 1, Config{Design: d, BufferBytes: 256, Depth: 4})
			ctx := testCtx(t)
			for r := 0; r < 2; r++ {
				s := j.senders[r][0]
				for i := 0; i < each; i++ {
					b, err := s.Acquire(ctx)
					if err != nil {
						t.Fatal(err)
					}
					b.Data = append(b.Data, byte(r), byte(i))
					if err := s.PutData(ctx, b, []int{0}, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			rc := j.receivers[0][0]
			if d != SR {
				// Every buffer in its slot before the first GetData: the
				// order below is then the receiver's choice alone.
				deadline := time.Now().Add(10 * time.Second)
				for {
					rc.mu.Lock()
					all := rc.arrived(rc.srcs[0], each) && rc.arrived(rc.srcs[1], each)
					rc.mu.Unlock()
					if all {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the buffers did not arrive")
					}
					time.Sleep(time.Millisecond)
				}
			}
			var order []int
			var first In
			for i := 0; i < 2*each; i++ {
				in, err := rc.GetData(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(in.Data) != 2 || int(in.Data[0]) != in.Src {
					t.Fatalf("buffer %x from source %d", in.Data, in.Src)
				}
				order = append(order, in.Src)
				if i == 0 {
					first = in
				} else if err := rc.Release(in); err != nil {
					t.Fatal(err)
				}
			}
			if d != SR {
				for i := 1; i < len(order); i++ {
					if order[i] == order[i-1] {
						t.Fatalf("sources taken %v: one twice in a row while the other had buffers waiting", order)
					}
				}
			}
			if err := rc.Release(first); err != nil {
				t.Fatal(err)
			}
			if err := rc.Release(first); !errors.Is(err, ErrBadBuffer) {
				t.Fatalf("second Release of one buffer = %v, want ErrBadBuffer", err)
			}
		})
	}
}

// TestSection5_RDBufferHeldUntilConsumed: with RD the receiver reads the
// sender's buffer when it takes it, so the sender hands that buffer out
// again only once the receiver has consumed it: two buffers put before
// the receiver takes either arrive as they were filled.
func TestSection5_RDBufferHeldUntilConsumed(t *testing.T) {
	for _, tr := range transports[:2] {
		t.Run(tr.name, func(t *testing.T) {
			j := newJob(t, tr.make, 2, 1, 1, Config{Design: RD, BufferBytes: 256, Depth: 4})
			ctx := testCtx(t)
			s := j.senders[0][0]
			for _, rec := range []string{"first", "second"} {
				b, err := s.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				b.AppendRecord([]byte(rec))
				if err := s.PutData(ctx, b, []int{1}, false); err != nil {
					t.Fatal(err)
				}
			}
			for _, want := range []string{"first", "second"} {
				in, err := j.receivers[1][0].GetData(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := string(in.Data[recordHeader:]); got != want {
					t.Fatalf("received %q, want %q: the sender reused a buffer the receiver had not read", got, want)
				}
				if err := j.receivers[1][0].Release(in); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestSection4_2_OpenRegistersBuffers (seed 004 §4.2, OPEN): an endpoint's
// buffers are in memory when it opens, as an RDMA registration pins them,
// so that a stream's first lap through them pays no page faults.
func TestSection4_2_OpenRegistersBuffers(t *testing.T) {
	for _, d := range []Design{SR, WR, RD} {
		proc, err := dtutils.NewProcess(dtutils.DefaultProcessConfig(0))
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Design: d, BufferBytes: 16 << 10, Depth: 8}
		s, err := NewSender(proc, cfg, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := NewReceiver(proc, cfg, 2)
		if err != nil {
			t.Fatal(err)
		}
		for name, mem := range map[string][]byte{"send buffers": s.region.Bytes(), "receive rings": rc.region.Bytes()} {
			n, err := alloc.Resident(mem)
			if err != nil {
				t.Fatal(err)
			}
			if pages := (len(mem) + 4095) / 4096; n != pages {
				t.Errorf("%v: %d of the %d pages of the %s are not in memory at OPEN", d, pages-n, pages, name)
			}
		}
		s.Close(context.Background())
		rc.Close(context.Background())
		proc.Close()
	}
}

// TestSection4_2_OpenMapsPeerMemory: over shared memory, wiring an
// endpoint (OPEN, then Attach) maps the peer's memory its one-sided
// operations will touch — the receiver's ring for a WR or RD sender, the
// sender's credit word (and RD's buffers, in the same region) for a
// receiver — so that the stream's first operation makes no request to the
// peer's process (0.2–7 ms each, on the clock of a short stage).
func TestSection4_2_OpenMapsPeerMemory(t *testing.T) {
	for _, d := range []Design{WR, RD} {
		t.Run(d.String(), func(t *testing.T) {
			i := slices.IndexFunc(transports, func(tr testTransport) bool { return tr.name == "shm" })
			j := newJob(t, transports[i].make, 2, 1, 1, Config{Design: d, BufferBytes: 4096, Depth: 4})
			for r := range j.senders {
				for _, c := range j.senders[r][0].conns {
					if !dtutils.Mapped(c.c.qp, c.ring) {
						t.Errorf("rank %d's sender: the ring of rank %d's receiver is not mapped after Attach", r, c.peer)
					}
				}
				for _, s := range j.receivers[r][0].srcs {
					if !dtutils.Mapped(s.c.qp, s.credit) {
						t.Errorf("rank %d's receiver: the credit word of rank %d's sender is not mapped after Attach", r, s.peer)
					}
				}
			}
		})
	}
}
