package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/shuffle"
)

// ShuffleResult is one line of mctsbench shuffle: one pattern and
// implementation, the figures of every process of the job.
type ShuffleResult struct {
	Pattern string `json:"pattern"` // repartition, broadcast or join
	Impl    string `json:"impl"`    // wr, rd, sr, rd-copy (package shuffle), socket (plain Go TCP) or mpi (bench/mpi)
	Config  string `json:"config"`  // se or me
	// Buffers is fixed (a window of Depth buffers per connection) or
	// adaptive (seed 004 §6); empty for the peers.
	Buffers   string `json:"buffers,omitempty"`
	Transport string `json:"transport"`
	Procs     int    `json:"procs"`
	Threads   int    `json:"threads"`
	// Bytes is the record bytes each process generates (repartition,
	// broadcast).
	Bytes int64 `json:"bytes,omitempty"`
	// Orders is the orders each process generates (join; about 4 line
	// items each).
	Orders int `json:"orders,omitempty"`
	// GBPerSPerProc is the mean over processes of the record bytes a
	// process received over its elapsed time (from the start barrier to
	// its last receive).
	GBPerSPerProc float64 `json:"gb_per_s_per_proc,omitempty"`
	// Seconds is the join's time, both stages and the local join, at the
	// slowest process.
	Seconds float64 `json:"seconds,omitempty"`
	// OK says every process received exactly what was sent to it (counts
	// and checksums), or for join that the result equals a single-process
	// run of the same query.
	OK bool `json:"ok"`
	// Reps is how many runs the figure is the median of (-reps; the
	// cells of one command are interleaved run by run), Min and Max the
	// spread of those runs (GB/s, or seconds for join).
	Reps int     `json:"reps"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// shuffleReport is what each process sends rank 0 after a run.
type shuffleReport struct {
	Rank     int
	Impl     string
	Seconds  float64
	Received int64
	Sent     [][2]uint64 // by destination process: records, checksum
	Got      [2]uint64
	Groups   []uint64 // join: the revenue of the groups this process owns
	Err      string
}

type shuffleOpts struct {
	pattern, transport, config string
	impls                      []string
	procs, threads, record     int
	bytes                      int64
	orders                     int
	buffer, depth              int
	adaptive, asJSON           bool
	buffers                    []string // fixed, adaptive: the window modes of wr, rd, sr to run
	reps                       int
}

func shuffleBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "repartition" && args[0] != "broadcast" && args[0] != "join") {
		fmt.Fprintln(stderr, "usage: mctsbench shuffle repartition|broadcast|join [-procs 2] [-threads 1] [-impl wr,rd,sr,socket] [-config se|me] [-transport shm|tcp|ofi] [-mb 256] [-record 100] [-orders 200000] [-buffer 16384] [-depth 0] [-buffers fixed,adaptive] [-reps 1] [-json]")
		return 2
	}
	o := shuffleOpts{pattern: args[0]}
	fs := flag.NewFlagSet("shuffle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.procs, "procs", 2, "processes (self-launched)")
	fs.IntVar(&o.threads, "threads", 1, "sending and receiving threads per process")
	impls := fs.String("impl", "wr,rd,sr,socket", "comma-separated: wr, rd, sr (package shuffle's designs), rd-copy (rd copying each buffer where it could read it in place: Config.NoMap), socket (plain Go TCP, seed 000's baseline), memcpy (the same records copied within each process: the ceiling)")
	fs.StringVar(&o.config, "config", "se", "se (one endpoint per process) or me (one per thread)")
	fs.StringVar(&o.transport, "transport", "", "between processes: \"\" (automatic), shm, tcp or ofi (builds with -tags ofi; provider from FI_PROVIDER)")
	mb := fs.Int("mb", 256, "MiB of records each process generates (repartition, broadcast)")
	fs.IntVar(&o.record, "record", 100, "bytes per record, at least 16 (repartition, broadcast)")
	fs.IntVar(&o.orders, "orders", 200000, "orders per process (join; about 4 line items each)")
	fs.IntVar(&o.buffer, "buffer", 16<<10, "bytes per transmission buffer, the batching threshold (the socket version batches to it too)")
	fs.IntVar(&o.depth, "depth", 0, "buffers in flight per connection (0: the package's default, a window of shuffle.DefaultWindowBytes: 128 of 16 KiB; the memcpy ceiling's ring: 32)")
	adaptive := fs.Bool("adaptive", false, "adaptive windows (seed 004 §6) instead of a fixed depth: -buffers adaptive")
	buffers := fs.String("buffers", "fixed", "comma-separated window modes of wr, rd and sr: fixed (a window of -depth buffers), adaptive (seed 004 §6)")
	fs.IntVar(&o.reps, "reps", 1, "runs of every implementation (and window mode), interleaved; each line is their median")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object per measurement")
	cpuProfile := fs.String("cpuprofile", "", "write each rank's CPU profile to FILE.rankN")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *cpuProfile != "" {
		stop, err := startProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "mctsbench shuffle: %v\n", err)
			return 1
		}
		defer stop()
	}
	o.impls, o.bytes, o.buffers = strings.Split(*impls, ","), int64(*mb)<<20, strings.Split(*buffers, ",")
	if *adaptive {
		o.buffers = []string{"adaptive"}
	}
	// The endpoints' own limits on -buffer and -depth, checked here rather
	// than in every rank once the job has started.
	bufErr := shuffle.Config{BufferBytes: o.buffer, Depth: o.depth}.VerifyConfig()
	if !flagsOK(stderr, "shuffle",
		check{o.procs < 1, fmt.Sprintf("-procs %d (want ≥ 1)", o.procs)},
		check{o.threads < 1, fmt.Sprintf("-threads %d (want ≥ 1)", o.threads)},
		check{o.reps < 1, fmt.Sprintf("-reps %d (want ≥ 1)", o.reps)},
		check{o.record < 16, fmt.Sprintf("-record %d (want ≥ 16)", o.record)},
		check{o.bytes < int64(o.record), fmt.Sprintf("-mb %d (want ≥ 1)", *mb)},
		check{o.orders < 1 || uint64(o.orders)*uint64(o.procs) >= 1<<32, fmt.Sprintf("-orders %d (want ≥ 1, and -orders × -procs < 2³²)", o.orders)},
		check{o.config != "se" && o.config != "me", fmt.Sprintf("-config %q (want se or me)", o.config)},
		check{o.pattern != "join" && o.buffer < shuffle.RecordOverhead+o.record, fmt.Sprintf("-buffer %d holds no record of -record %d (%d bytes with its length)", o.buffer, o.record, shuffle.RecordOverhead+o.record)},
		check{bufErr != nil, "-buffer or -depth: " + errMsg(bufErr)}) {
		return 2
	}
	for _, b := range o.buffers {
		if b != "fixed" && b != "adaptive" {
			fmt.Fprintf(stderr, "mctsbench shuffle: -buffers: %q is neither fixed nor adaptive\n", b)
			return 2
		}
	}
	for _, l := range []struct {
		flag string
		xs   []string
	}{{"-impl", o.impls}, {"-buffers", o.buffers}} {
		for i, x := range l.xs {
			if slices.Contains(l.xs[:i], x) {
				fmt.Fprintf(stderr, "mctsbench shuffle: %s names %s twice\n", l.flag, x)
				return 2
			}
		}
	}
	rs, err := runShuffle(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench shuffle: %v\n", err)
		return 1
	}
	for _, r := range rs {
		switch {
		case o.asJSON:
			json.NewEncoder(stdout).Encode(r)
		case r.Pattern == "join":
			fmt.Fprintf(stdout, "join %s/%s over %s, %d×%d: %.3f s%s, ok=%v\n", r.Impl, r.Config, r.Transport, r.Procs, r.Threads, r.Seconds, r.spread("%.3f"), r.OK)
		default:
			fmt.Fprintf(stdout, "%s %s/%s%s over %s, %d×%d: %.2f GB/s per process%s, ok=%v\n", r.Pattern, r.Impl, r.Config, strings.TrimSuffix("/"+r.Buffers, "/"), r.Transport, r.Procs, r.Threads, r.GBPerSPerProc, r.spread("%.2f"), r.OK)
		}
	}
	return 0
}

// stage is one all-to-all exchange: every sending thread of every process
// emits records with their destination process (−1: every process), and
// the receiving threads consume what arrives (consume(k, rec) for
// receiver k < receivers(), called concurrently for different k; rec is
// valid during the call).
type stage struct {
	emit    func(th int, send func(rec []byte, dest int) error) error
	consume func(k int, rec []byte)
}

// exchanger runs the stages of a plan over one implementation: open sets
// up n stages' connections before the clock starts (a plan's operators are
// opened before it runs), run runs stage i, close releases them;
// receivers is how many concurrent consumers its stages may have.
type exchanger interface {
	open(ctx context.Context, n int) error
	run(ctx context.Context, i int, st stage) error
	close(ctx context.Context) error
	receivers() int
}

// runShuffle runs every implementation in one job; rank 0 returns the
// results, the other ranks nil.
func runShuffle(o shuffleOpts, stderr io.Writer) ([]ShuffleResult, error) {
	var cells []shuffleCell
	for _, impl := range o.impls {
		switch impl {
		case "wr", "rd", "sr", "rd-copy":
			for _, b := range o.buffers {
				cells = append(cells, shuffleCell{impl: impl, buffers: b})
			}
		case "socket", "memcpy":
			cells = append(cells, shuffleCell{impl: impl})
		default:
			return nil, fmt.Errorf("unknown -impl %q", impl)
		}
	}
	h := dsfabric.NewHandlers()
	w, err := shuffle.NewWiring(h)
	if err != nil {
		return nil, err
	}
	// Room for every report of the run: the handler must never block the
	// service thread (rank 0's own report comes through it), and a rank may
	// run ahead by an impl that needs no peers (memcpy), which once filled a
	// channel of one report per rank and hung the run.
	j := &shuffleJob{o: o, w: w, reports: make(chan shuffleReport, o.procs*len(cells)*o.reps), addrs: make(chan [2]string, o.procs)}
	j.hReport, _ = h.Register("shufflebench.report", func(c *dsfabric.Call, a []byte) ([]byte, error) {
		var r shuffleReport
		if err := json.Unmarshal(a, &r); err != nil {
			return nil, err
		}
		j.reports <- r
		return nil, nil
	})
	j.hAddr, _ = h.Register("shufflebench.addr", func(c *dsfabric.Call, a []byte) ([]byte, error) {
		j.addrs <- [2]string{fmt.Sprint(c.Fabric.Names().Rank(c.Src)), string(a)}
		return nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if j.f, err = dsfabric.Start(ctx, dsfabric.Config{Procs: o.procs, ThreadsPerProcess: 1, Transport: o.transport, Handlers: h, Stdout: stderr}); err != nil {
		return nil, err
	}
	defer j.f.Close()
	// Run by run, every cell once: a slow spell of the machine then falls
	// on every cell alike instead of on the ones measured during it.
	runs := make([][]ShuffleResult, len(cells))
	for rep := 0; rep < o.reps; rep++ {
		for i, c := range cells {
			r, err := j.run(ctx, c, fmt.Sprintf("%s/%s/%d", c.impl, c.buffers, rep))
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], r)
		}
	}
	if j.f.Rank() != 0 {
		return nil, nil
	}
	out := make([]ShuffleResult, len(cells))
	for i, rs := range runs {
		out[i] = medianShuffle(rs)
	}
	return out, nil
}

// shuffleJob is what every run of a command shares: the job, its
// handlers, and rank 0's reports.
type shuffleJob struct {
	o              shuffleOpts
	f              *dsfabric.Fabric
	w              *shuffle.Wiring
	reports        chan shuffleReport
	early          reportQueue // reports that came before rank 0 asked for their run
	hReport, hAddr dsfabric.HandlerID
	addrs          chan [2]string // socket: the peers' listening addresses
}

// spread says, for a median of several runs, how many and their range.
func (r ShuffleResult) spread(format string) string {
	if r.Reps < 2 {
		return ""
	}
	return " (median of " + r.runs(format) + ")"
}

// runs is the number of runs and, for several, their range.
func (r ShuffleResult) runs(format string) string {
	if r.Reps < 2 {
		return strconv.Itoa(max(r.Reps, 1))
	}
	return fmt.Sprintf("%d: "+format+"–"+format, r.Reps, r.Min, r.Max)
}

// shuffleCell is one implementation of a command, with its window mode
// for package shuffle's designs.
type shuffleCell struct {
	impl, buffers string
}

// run runs one cell once on every rank; rank 0 gathers the reports (label
// names this run in them) and returns the result.
func (j *shuffleJob) run(ctx context.Context, c shuffleCell, label string) (ShuffleResult, error) {
	o, f := j.o, j.f
	o.adaptive = c.buffers == "adaptive"
	var x exchanger
	switch c.impl {
	case "wr", "rd", "sr", "rd-copy":
		d, _ := shuffle.ParseDesign(strings.TrimSuffix(c.impl, "-copy"))
		x = &oursExchanger{w: j.w, f: f, o: o, design: d, noMap: c.impl == "rd-copy"}
	case "socket":
		x = &socketExchanger{f: f, o: o, hAddr: j.hAddr, addrs: j.addrs}
	}
	var rep shuffleReport
	stages := 1
	if o.pattern == "join" {
		stages = 2
	}
	switch {
	case c.impl == "memcpy":
		rep = runMemcpy(f.Rank(), o)
	default:
		if err := x.open(ctx, stages); err != nil {
			rep = shuffleReport{Err: err.Error()}
			break
		}
		if o.pattern == "join" {
			rep = runJoin(ctx, x, f.Rank(), o)
		} else {
			rep = runPattern(ctx, x, f.Rank(), o)
		}
		if err := x.close(ctx); err != nil && rep.Err == "" {
			rep = shuffleReport{Err: fmt.Sprintf("closing: %v", err)}
		}
	}
	rep.Rank, rep.Impl = f.Rank(), label
	b, _ := json.Marshal(rep)
	src := dsfabric.ThreadID(f.Rank())
	if _, err := f.CallServiceReturn(ctx, src, 0, j.hReport, b); err != nil {
		return ShuffleResult{}, err
	}
	if f.Rank() != 0 {
		return ShuffleResult{}, nil
	}
	var all []shuffleReport
	for len(all) < o.procs {
		r, err := j.early.next(ctx, j.reports, label)
		if err != nil {
			return ShuffleResult{}, err
		}
		if r.Err != "" {
			return ShuffleResult{}, fmt.Errorf("%s: rank %d: %s", c.impl, r.Rank, r.Err)
		}
		all = append(all, r)
	}
	r := ShuffleResult{Pattern: o.pattern, Impl: c.impl, Config: o.config, Buffers: c.buffers, Transport: resultTransport(f.Transports()), Procs: o.procs, Threads: o.threads, Reps: 1}
	switch c.impl {
	case "socket":
		r.Transport, r.Config = "tcp", "-"
	case "memcpy":
		r.Transport, r.Config = "-", "-"
	}
	if o.pattern == "join" {
		r.Orders = o.orders
		r.OK = joinChecked(all, o)
		for _, x := range all {
			r.Seconds = max(r.Seconds, x.Seconds)
		}
		r.Min, r.Max = r.Seconds, r.Seconds
		return r, nil
	}
	r.Bytes = o.bytes
	for _, x := range all {
		r.GBPerSPerProc += float64(x.Received) / x.Seconds / 1e9 / float64(o.procs)
	}
	r.OK = c.impl == "memcpy" || patternChecked(all, o.procs) // memcpy sends nothing
	r.Min, r.Max = r.GBPerSPerProc, r.GBPerSPerProc
	return r, nil
}

// patternChecked reports whether every process received exactly the
// records the processes sent to it: as many, with the same sum of
// checksums.
func patternChecked(all []shuffleReport, procs int) bool {
	want := make([][2]uint64, procs)
	for _, x := range all {
		for d, s := range x.Sent {
			want[d][0] += s[0]
			want[d][1] += s[1]
		}
	}
	for _, x := range all {
		if x.Rank < 0 || x.Rank >= procs || x.Got != want[x.Rank] {
			return false
		}
	}
	return len(all) == procs
}

// medianShuffle folds the runs of one cell into one line: the median of
// its figure, the spread, and ok only if every run was.
func medianShuffle(rs []ShuffleResult) ShuffleResult {
	out := rs[0]
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = r.GBPerSPerProc
		if r.Pattern == "join" {
			vs[i] = r.Seconds
		}
		out.OK = out.OK && r.OK
	}
	out.Reps, out.Min, out.Max = len(rs), slices.Min(vs), slices.Max(vs)
	if out.Pattern == "join" {
		out.Seconds = median(vs)
	} else {
		out.GBPerSPerProc = median(vs)
	}
	return out
}

// foldShuffle merges the lines of one cell that separate commands printed
// (make bench runs the MPI peer and our implementations in turns, one
// command per round, so that their ratio compares runs of the same spell of
// the machine): the median of the lines' figures, their runs added up and
// the range over all of them. Cells keep the order of their first line.
func foldShuffle(rs []ShuffleResult) []ShuffleResult {
	type key struct {
		pattern, impl, config, buffers, transport string
		procs, threads, orders                    int
		bytes                                     int64
	}
	groups := map[key][]ShuffleResult{}
	var order []key
	for _, r := range rs {
		k := key{r.Pattern, r.Impl, r.Config, r.Buffers, r.Transport, r.Procs, r.Threads, r.Orders, r.Bytes}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := make([]ShuffleResult, 0, len(order))
	for _, k := range order {
		g := groups[k]
		if len(g) == 1 {
			out = append(out, g[0])
			continue
		}
		m := medianShuffle(g) // the range of the lines' figures
		m.Reps = 0
		for _, r := range g {
			if r.Reps > 1 { // a median of its own runs: widen by their range
				m.Min, m.Max = min(m.Min, r.Min), max(m.Max, r.Max)
			}
			m.Reps += max(r.Reps, 1)
		}
		out = append(out, m)
	}
	return out
}

// reportQueue keeps the reports that came before rank 0 asked for their
// impl: a rank runs ahead by an impl that needs no peers (memcpy).
type reportQueue []shuffleReport

// next returns a report for impl, from q or else from c.
func (q *reportQueue) next(ctx context.Context, c <-chan shuffleReport, impl string) (shuffleReport, error) {
	for i, r := range *q {
		if r.Impl == impl {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return r, nil
		}
	}
	for {
		select {
		case r := <-c:
			if r.Impl == impl {
				return r, nil
			}
			*q = append(*q, r)
		case <-ctx.Done():
			return shuffleReport{}, ctx.Err()
		}
	}
}

// genRecords runs fn over thread th's records of one process: the i-th
// record and its destination process (repartition).
func genRecords(o shuffleOpts, rank, th int, fn func(rec []byte, dest int) error) error {
	per := o.bytes / int64(o.record) / int64(o.threads)
	rec := make([]byte, o.record)
	for i := int64(0); i < per; i++ {
		binary.LittleEndian.PutUint64(rec, uint64(rank)<<48|uint64(th)<<40|uint64(i))
		dest := int((uint64(i)*0x9e3779b97f4a7c15 + uint64(th*31+rank)) >> 33 % uint64(o.procs))
		// The destination is the record's second word (bytes 12–15 stay
		// zero): a 4-byte store here under recSum's 8-byte load of the same
		// word cannot be forwarded, and the load then waited for every
		// store before it to drain, the output buffer's included: half of
		// a sending process's samples (profile of broadcast -impl rd).
		binary.LittleEndian.PutUint64(rec[8:], uint64(dest))
		if err := fn(rec, dest); err != nil {
			return err
		}
	}
	return nil
}

func recSum(rec []byte) uint64 {
	// A cheap order-independent checksum term: the record's first words.
	return binary.LittleEndian.Uint64(rec)*0x9e3779b97f4a7c15 ^ binary.LittleEndian.Uint64(rec[8:])
}

// tallies is what a thread sent per destination process and received;
// threads keep their own and merge them once done, so that counting costs
// no lock per record.
type tallies struct {
	sent     [][2]uint64
	got      [2]uint64
	received int64
}

func newTallies(procs int) *tallies { return &tallies{sent: make([][2]uint64, procs)} }

// send counts rec for destination d, or every process when d < 0.
func (t *tallies) send(d int, rec []byte) {
	s := recSum(rec)
	if d >= 0 {
		t.sent[d][0]++
		t.sent[d][1] += s
		return
	}
	for q := range t.sent {
		t.sent[q][0]++
		t.sent[q][1] += s
	}
}

func (t *tallies) recv(rec []byte) {
	t.got[0]++
	t.got[1] += recSum(rec)
	t.received += int64(len(rec))
}

func (t *tallies) add(u *tallies) {
	for d := range u.sent {
		t.sent[d][0] += u.sent[d][0]
		t.sent[d][1] += u.sent[d][1]
	}
	t.got[0] += u.got[0]
	t.got[1] += u.got[1]
	t.received += u.received
}

// memcpyRing is the number of buffers in the memcpy ceiling's ring when
// -depth does not set it: 32, 512 KiB at the default buffer size, the
// shuffles' default depth until it grew to 128. Kept cache-sized on
// purpose: a ring of 128 measured a lower ceiling (5.1–6.5 GB/s against
// 6.1–7.4 with 32, three interleaved rounds), and the ceiling should be
// the strictest one.
const memcpyRing = 32

// runMemcpy is the ceiling the shuffles are held to: each thread generates
// its records as they do and copies them, batched to the buffer size, into
// a ring of buffers in its own memory, with no other process.
func runMemcpy(rank int, o shuffleOpts) shuffleReport {
	depth := o.depth
	if depth == 0 {
		depth = memcpyRing
	}
	var wg sync.WaitGroup
	moved := make([]int64, o.threads)
	start := time.Now()
	for th := 0; th < o.threads; th++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ring := make([]byte, depth*o.buffer)
			at, buf := 0, make([]byte, 0, o.buffer)
			genRecords(o, rank, th, func(rec []byte, dest int) error {
				if len(buf)+4+len(rec) > o.buffer {
					at = (at + copy(ring[at:], buf)) % len(ring)
					buf = buf[:0]
				}
				buf = binary.LittleEndian.AppendUint32(buf, uint32(len(rec)))
				buf = append(buf, rec...)
				moved[th] += int64(len(rec)) // record bytes, as the shuffles count
				return nil
			})
			copy(ring[at:], buf)
		}()
	}
	wg.Wait()
	rep := shuffleReport{Seconds: time.Since(start).Seconds()}
	for _, m := range moved {
		rep.Received += m
	}
	return rep
}

// runPattern moves every thread's records by repartition or broadcast.
// Inside the clock, senders only generate and send, and receivers
// checksum what arrives (a consumer reads every record, as MPI's peer
// reads each record's id); what each thread sent is tallied after the
// clock, by generating its records again (they are deterministic), as
// MPI's peer does no sender-side bookkeeping either.
func runPattern(ctx context.Context, x exchanger, rank int, o shuffleOpts) shuffleReport {
	got := make([]*tallies, x.receivers())
	for i := range got {
		got[i] = newTallies(o.procs)
	}
	// Broadcast records go to every process (-1), whatever genRecords's
	// hash says.
	dest := func(d int) int {
		if o.pattern == "broadcast" {
			return -1
		}
		return d
	}
	start := time.Now()
	err := x.run(ctx, 0, stage{
		emit: func(th int, send func([]byte, int) error) error {
			return genRecords(o, rank, th, func(rec []byte, d int) error { return send(rec, dest(d)) })
		},
		consume: func(k int, rec []byte) { got[k].recv(rec) },
	})
	secs := time.Since(start).Seconds()
	if err != nil {
		return shuffleReport{Err: err.Error()}
	}
	t := newTallies(o.procs)
	for th := 0; th < o.threads; th++ {
		genRecords(o, rank, th, func(rec []byte, d int) error { t.send(dest(d), rec); return nil })
	}
	for _, u := range got {
		t.add(u)
	}
	return shuffleReport{Seconds: secs, Received: t.received, Sent: t.sent, Got: t.got}
}

// oursExchanger runs stages over package shuffle's endpoints, a wired set
// per stage: wr and rd stages share one connection per pair of processes
// (a Mesh), sr stages have their own (open).
type oursExchanger struct {
	w      *shuffle.Wiring
	f      *dsfabric.Fabric
	o      shuffleOpts
	design shuffle.Design
	noMap  bool // rd-copy: RD copies buffers even where it could read them in place
	eps    []*shuffle.Endpoints
	mesh   *shuffle.Mesh
}

// open wires the n stages: over one shared connection per pair of
// processes (a Mesh, seed 000's multi-stage) for wr and rd, over
// connections and processes of their own for sr.
func (x *oursExchanger) open(ctx context.Context, n int) error {
	e := x.endpoints()
	cfg := shuffle.Config{Design: x.design, BufferBytes: x.o.buffer, Depth: x.o.depth, Adaptive: x.o.adaptive, NoMap: x.noMap}
	if x.design != shuffle.SR {
		var err error
		if x.mesh, err = x.w.Mesh(ctx, x.f); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		var eps *shuffle.Endpoints
		var err error
		if x.mesh != nil {
			eps, err = x.mesh.Stage(ctx, cfg, e, x.o.threads/e)
		} else {
			eps, err = x.w.Connect(ctx, x.f, cfg, e, x.o.threads/e)
		}
		if err != nil {
			x.close(ctx)
			return err
		}
		x.eps = append(x.eps, eps)
	}
	return nil
}

func (x *oursExchanger) close(ctx context.Context) error {
	var errs []error
	for _, e := range x.eps {
		errs = append(errs, e.Close(ctx))
	}
	x.eps = nil
	if x.mesh != nil {
		errs = append(errs, x.mesh.Close(ctx))
		x.mesh = nil
	}
	return errors.Join(errs...)
}

func (x *oursExchanger) endpoints() int {
	if x.o.config == "me" {
		return x.o.threads
	}
	return 1
}

func (x *oursExchanger) receivers() int { return x.o.threads }

func (x *oursExchanger) run(ctx context.Context, i int, st stage) error {
	o, e, eps := x.o, x.endpoints(), x.eps[i]
	// Group q*e+k is endpoint k of process q; broadcast group e+k is
	// endpoint k of every process (a thread's records reach each process
	// once).
	groups := shuffle.Repartition(o.procs * e)
	for k := 0; k < e; k++ {
		var all []int
		for q := 0; q < o.procs; q++ {
			all = append(all, q*e+k)
		}
		groups = append(groups, all)
	}
	errs := make(chan error, 2*o.threads)
	var wg sync.WaitGroup
	for th := 0; th < o.threads; th++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			sh, err := eps.Senders[th%e].NewShuffle(groups)
			if err != nil {
				errs <- err
				return
			}
			err = st.emit(th, func(rec []byte, dest int) error {
				g := dest*e + th%e
				if dest < 0 {
					g = o.procs*e + th%e
				}
				return sh.Put(ctx, g, rec)
			})
			if cerr := sh.Close(ctx); err == nil {
				err = cerr
			}
			if err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			if err := eps.Receivers[th%e].NewReceive().Each(ctx, func(rec []byte) error {
				st.consume(th, rec)
				return nil
			}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(drain(errs)...)
}

func drain(c chan error) []error {
	var out []error
	for e := range c {
		out = append(out, e)
	}
	return out
}

// socketExchanger runs stages over plain Go TCP connections, one per pair
// of processes (itself included) and stage, each thread batching records
// to the buffer size per destination under the connection's lock: the
// socket baseline of seed 000.
type socketExchanger struct {
	f     *dsfabric.Fabric
	o     shuffleOpts
	hAddr dsfabric.HandlerID
	addrs chan [2]string
	out   [][]*sockConn // [stage][destination process]
	in    [][]net.Conn  // [stage][source process]
}

type sockConn struct {
	mu sync.Mutex
	c  net.Conn
}

// receivers: one reader per incoming connection.
func (x *socketExchanger) receivers() int { return x.o.procs }

// open connects every process to every process once per stage; each
// connection starts with its stage and source rank (2 × u16) so that the
// accepting side files it.
func (x *socketExchanger) open(ctx context.Context, n int) error {
	o, f := x.o, x.f
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	src := dsfabric.ThreadID(f.Rank())
	for q := 0; q < o.procs; q++ {
		if err := f.CallService(src, q, x.hAddr, []byte(ln.Addr().String()), nil); err != nil {
			return err
		}
	}
	peers := make([]string, o.procs)
	for k := 0; k < o.procs; k++ {
		select {
		case a := <-x.addrs:
			var r int
			fmt.Sscan(a[0], &r)
			peers[r] = a[1]
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	x.in, x.out = make([][]net.Conn, n), make([][]*sockConn, n)
	for i := range x.in {
		x.in[i], x.out[i] = make([]net.Conn, o.procs), make([]*sockConn, o.procs)
	}
	accepted := make(chan error, 1)
	go func() {
		for k := 0; k < n*o.procs; k++ {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			var hdr [4]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				accepted <- err
				return
			}
			i, r := int(binary.LittleEndian.Uint16(hdr[:])), int(binary.LittleEndian.Uint16(hdr[2:]))
			if i >= n || r >= o.procs || x.in[i][r] != nil {
				accepted <- fmt.Errorf("socket peer: connection for stage %d from rank %d", i, r)
				return
			}
			x.in[i][r] = c
		}
		accepted <- nil
	}()
	for i := 0; i < n; i++ {
		for q, a := range peers {
			c, err := net.Dial("tcp", a)
			if err != nil {
				return err
			}
			var hdr [4]byte
			binary.LittleEndian.PutUint16(hdr[:], uint16(i))
			binary.LittleEndian.PutUint16(hdr[2:], uint16(f.Rank()))
			if _, err := c.Write(hdr[:]); err != nil {
				return err
			}
			x.out[i][q] = &sockConn{c: c}
		}
	}
	return <-accepted
}

func (x *socketExchanger) close(ctx context.Context) error {
	for i := range x.out {
		for _, c := range x.out[i] {
			if c != nil {
				c.c.Close()
			}
		}
		for _, c := range x.in[i] {
			if c != nil {
				c.Close()
			}
		}
	}
	x.in, x.out = nil, nil
	return nil // a socket's close error says nothing once its stream ended
}

func (x *socketExchanger) run(ctx context.Context, i int, st stage) error {
	o, conns := x.o, x.out[i]
	// Incoming: one reader per source, until its end marker.
	var rwg sync.WaitGroup
	rerr := make(chan error, o.procs)
	for k, c := range x.in[i] {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			br := bufio.NewReaderSize(c, o.buffer)
			var hdr [4]byte
			var rec []byte
			for {
				if _, err := io.ReadFull(br, hdr[:]); err != nil {
					rerr <- err
					return
				}
				n := binary.LittleEndian.Uint32(hdr[:])
				if n == ^uint32(0) {
					return
				}
				if uint32(cap(rec)) < n {
					rec = make([]byte, n)
				}
				rec = rec[:n]
				if _, err := io.ReadFull(br, rec); err != nil {
					rerr <- err
					return
				}
				st.consume(k, rec)
			}
		}()
	}
	var wg sync.WaitGroup
	serr := make(chan error, o.threads)
	for th := 0; th < o.threads; th++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs := make([][]byte, o.procs)
			flush := func(q int) error {
				if len(bufs[q]) == 0 {
					return nil
				}
				c := conns[q]
				c.mu.Lock()
				_, err := c.c.Write(bufs[q])
				c.mu.Unlock()
				bufs[q] = bufs[q][:0]
				return err
			}
			add := func(q int, rec []byte) error {
				if len(bufs[q])+4+len(rec) > o.buffer {
					if err := flush(q); err != nil {
						return err
					}
				}
				bufs[q] = binary.LittleEndian.AppendUint32(bufs[q], uint32(len(rec)))
				bufs[q] = append(bufs[q], rec...)
				return nil
			}
			err := st.emit(th, func(rec []byte, dest int) error {
				if dest >= 0 {
					return add(dest, rec)
				}
				for q := range bufs {
					if err := add(q, rec); err != nil {
						return err
					}
				}
				return nil
			})
			for q := range bufs {
				if ferr := flush(q); err == nil {
					err = ferr
				}
			}
			if err != nil {
				serr <- err
			}
		}()
	}
	wg.Wait()
	close(serr)
	for _, c := range conns {
		c.c.Write([]byte{0xff, 0xff, 0xff, 0xff})
	}
	rwg.Wait()
	close(rerr)
	return errors.Join(append(drain(serr), drain(rerr)...)...)
}
