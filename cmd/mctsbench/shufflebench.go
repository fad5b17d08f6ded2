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
	"strings"
	"sync"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/shuffle"
)

// ShuffleResult is one line of mctsbench shuffle: one pattern and
// implementation, the figures of every process of the job.
type ShuffleResult struct {
	Pattern   string `json:"pattern"` // repartition or broadcast
	Impl      string `json:"impl"`    // wr, rd (package shuffle) or socket (plain Go TCP)
	Config    string `json:"config"`  // se or me
	Transport string `json:"transport"`
	Procs     int    `json:"procs"`
	Threads   int    `json:"threads"`
	// Bytes is the record bytes each process generates.
	Bytes int64 `json:"bytes"`
	// GBPerSPerProc is the mean over processes of the record bytes a
	// process received over its elapsed time (from the start barrier to
	// its last receive).
	GBPerSPerProc float64 `json:"gb_per_s_per_proc"`
	// OK says every process received exactly what was sent to it (counts
	// and checksums).
	OK bool `json:"ok"`
}

// shuffleReport is what each process sends rank 0 after a run.
type shuffleReport struct {
	Rank     int
	Seconds  float64
	Received int64
	Sent     [][2]uint64 // by destination process: records, checksum
	Got      [2]uint64
	Err      string
}

type shuffleOpts struct {
	pattern, transport, config string
	impls                      []string
	procs, threads, record     int
	bytes                      int64
	buffer, depth              int
	asJSON                     bool
}

func shuffleBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "repartition" && args[0] != "broadcast") {
		fmt.Fprintln(stderr, "usage: mctsbench shuffle repartition|broadcast [-procs 2] [-threads 1] [-impl wr,rd,socket] [-config se|me] [-transport shm|tcp] [-mb 256] [-record 100] [-buffer 16384] [-depth 8] [-json]")
		return 2
	}
	o := shuffleOpts{pattern: args[0]}
	fs := flag.NewFlagSet("shuffle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.procs, "procs", 2, "processes (self-launched)")
	fs.IntVar(&o.threads, "threads", 1, "sending and receiving threads per process")
	impls := fs.String("impl", "wr,rd,socket", "comma-separated: wr, rd (package shuffle), socket (plain Go TCP, seed 000's baseline)")
	fs.StringVar(&o.config, "config", "se", "se (one endpoint per process) or me (one per thread)")
	fs.StringVar(&o.transport, "transport", "", "between processes: \"\" (automatic), shm or tcp")
	mb := fs.Int("mb", 256, "MiB of records each process generates")
	fs.IntVar(&o.record, "record", 100, "bytes per record (at least 16)")
	fs.IntVar(&o.buffer, "buffer", 16<<10, "bytes per transmission buffer, the batching threshold (the socket version batches to it too)")
	fs.IntVar(&o.depth, "depth", 0, "buffers in flight per connection (0: the package's default, 32)")
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
	o.impls, o.bytes = strings.Split(*impls, ","), int64(*mb)<<20
	if o.procs < 1 || o.threads < 1 || o.record < 16 || o.bytes < int64(o.record) || (o.config != "se" && o.config != "me") {
		fmt.Fprintln(stderr, "mctsbench shuffle: -procs, -threads ≥ 1, -record ≥ 16, -mb ≥ 1, -config se|me")
		return 2
	}
	rs, err := runShuffle(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench shuffle: %v\n", err)
		return 1
	}
	for _, r := range rs {
		if o.asJSON {
			json.NewEncoder(stdout).Encode(r)
		} else {
			fmt.Fprintf(stdout, "%s %s/%s over %s, %d×%d: %.2f GB/s per process, ok=%v\n", r.Pattern, r.Impl, r.Config, r.Transport, r.Procs, r.Threads, r.GBPerSPerProc, r.OK)
		}
	}
	return 0
}

// runShuffle runs every implementation in one job; rank 0 returns the
// results, the other ranks nil.
func runShuffle(o shuffleOpts, stderr io.Writer) ([]ShuffleResult, error) {
	h := dsfabric.NewHandlers()
	w, err := shuffle.NewWiring(h)
	if err != nil {
		return nil, err
	}
	reports := make(chan shuffleReport, o.procs)
	hReport, _ := h.Register("shufflebench.report", func(c *dsfabric.Call, a []byte) ([]byte, error) {
		var r shuffleReport
		if err := json.Unmarshal(a, &r); err != nil {
			return nil, err
		}
		reports <- r
		return nil, nil
	})
	addrs := make(chan [2]string, o.procs)
	hAddr, _ := h.Register("shufflebench.addr", func(c *dsfabric.Call, a []byte) ([]byte, error) {
		addrs <- [2]string{fmt.Sprint(c.Fabric.Names().Rank(c.Src)), string(a)}
		return nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	f, err := dsfabric.Start(ctx, dsfabric.Config{Procs: o.procs, ThreadsPerProcess: 1, Transport: o.transport, Handlers: h, Stdout: stderr})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	src := dsfabric.ThreadID(f.Rank())
	var out []ShuffleResult
	for _, impl := range o.impls {
		var rep shuffleReport
		switch impl {
		case "wr", "rd":
			d, _ := shuffle.ParseDesign(impl)
			rep = shuffleOurs(ctx, w, f, o, d)
		case "socket":
			rep = shuffleSocket(ctx, f, o, hAddr, addrs)
		default:
			return nil, fmt.Errorf("unknown -impl %q", impl)
		}
		rep.Rank = f.Rank()
		b, _ := json.Marshal(rep)
		if _, err := f.CallServiceReturn(ctx, src, 0, hReport, b); err != nil {
			return nil, err
		}
		if f.Rank() != 0 {
			continue
		}
		var all []shuffleReport
		for len(all) < o.procs {
			select {
			case r := <-reports:
				all = append(all, r)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		r := ShuffleResult{Pattern: o.pattern, Impl: impl, Config: o.config, Transport: f.Transports(), Procs: o.procs, Threads: o.threads, Bytes: o.bytes, OK: true}
		if impl == "socket" {
			r.Transport, r.Config = "tcp", "-"
		}
		want := make([][2]uint64, o.procs)
		for _, x := range all {
			if x.Err != "" {
				return nil, fmt.Errorf("%s: rank %d: %s", impl, x.Rank, x.Err)
			}
			for d, s := range x.Sent {
				want[d][0] += s[0]
				want[d][1] += s[1]
			}
			r.GBPerSPerProc += float64(x.Received) / x.Seconds / 1e9 / float64(o.procs)
		}
		for _, x := range all {
			r.OK = r.OK && x.Got == want[x.Rank]
		}
		out = append(out, r)
	}
	return out, nil
}

// genRecords runs fn over thread th's records of one process: the i-th
// record, its destination process (repartition) and a checksum term.
func genRecords(o shuffleOpts, rank, th int, fn func(i int, rec []byte, dest int) error) error {
	per := o.bytes / int64(o.record) / int64(o.threads)
	rec := make([]byte, o.record)
	for i := int64(0); i < per; i++ {
		binary.LittleEndian.PutUint64(rec, uint64(rank)<<48|uint64(th)<<40|uint64(i))
		dest := int((uint64(i)*0x9e3779b97f4a7c15 + uint64(th*31+rank)) >> 33 % uint64(o.procs))
		binary.LittleEndian.PutUint32(rec[8:], uint32(dest))
		if err := fn(int(i), rec, dest); err != nil {
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

// merge adds u into t under mu.
func (t *tallies) merge(mu *sync.Mutex, u *tallies) {
	mu.Lock()
	defer mu.Unlock()
	for d := range u.sent {
		t.sent[d][0] += u.sent[d][0]
		t.sent[d][1] += u.sent[d][1]
	}
	t.got[0] += u.got[0]
	t.got[1] += u.got[1]
	t.received += u.received
}

// shuffleOurs runs the pattern over package shuffle's endpoints.
func shuffleOurs(ctx context.Context, w *shuffle.Wiring, f *dsfabric.Fabric, o shuffleOpts, d shuffle.Design) shuffleReport {
	e := 1
	if o.config == "me" {
		e = o.threads
	}
	eps, err := w.Connect(ctx, f, shuffle.Config{Design: d, BufferBytes: o.buffer, Depth: o.depth}, e, o.threads/e)
	if err != nil {
		return shuffleReport{Err: err.Error()}
	}
	defer eps.Close(ctx)
	// Repartition: group g is endpoint g. Broadcast: group k is endpoint
	// k of every process (a thread's records reach each process once).
	ndest := o.procs * e
	groups := shuffle.Repartition(ndest)
	if o.pattern == "broadcast" {
		groups = make([][]int, e)
		for k := range groups {
			for q := 0; q < o.procs; q++ {
				groups[k] = append(groups[k], q*e+k)
			}
		}
	}
	t, mu := newTallies(o.procs), &sync.Mutex{}
	start := time.Now()
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
			local := newTallies(o.procs)
			defer t.merge(mu, local)
			err = genRecords(o, f.Rank(), th, func(i int, rec []byte, dest int) error {
				g := dest*e + th%e
				if o.pattern == "broadcast" {
					g, dest = th%e, -1
				}
				local.send(dest, rec)
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
			rc := eps.Receivers[th%e].NewReceive()
			defer rc.Close()
			local := newTallies(o.procs)
			defer t.merge(mu, local)
			for {
				rec, err := rc.Next(ctx)
				if err == io.EOF {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				local.recv(rec)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	close(errs)
	if err := errors.Join(drain(errs)...); err != nil {
		return shuffleReport{Err: err.Error()}
	}
	return shuffleReport{Seconds: secs, Received: t.received, Sent: t.sent, Got: t.got}
}

func drain(c chan error) []error {
	var out []error
	for e := range c {
		out = append(out, e)
	}
	return out
}

// shuffleSocket runs the pattern over plain Go TCP connections, one per
// pair of processes (itself included), each thread batching records to
// the buffer size per destination under the connection's lock: the
// socket baseline of seed 000.
func shuffleSocket(ctx context.Context, f *dsfabric.Fabric, o shuffleOpts, hAddr dsfabric.HandlerID, addrs chan [2]string) shuffleReport {
	fail := func(err error) shuffleReport { return shuffleReport{Err: err.Error()} }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	defer ln.Close()
	src := dsfabric.ThreadID(f.Rank())
	for q := 0; q < o.procs; q++ {
		if err := f.CallService(src, q, hAddr, []byte(ln.Addr().String()), nil); err != nil {
			return fail(err)
		}
	}
	peers := make([]string, o.procs)
	for k := 0; k < o.procs; k++ {
		a := <-addrs
		var r int
		fmt.Sscan(a[0], &r)
		peers[r] = a[1]
	}
	t, mu := newTallies(o.procs), &sync.Mutex{}
	// Incoming: one connection from every process; each reader counts
	// records until the end marker.
	var rwg sync.WaitGroup
	rerr := make(chan error, o.procs)
	rwg.Add(o.procs)
	go func() {
		for k := 0; k < o.procs; k++ {
			c, err := ln.Accept()
			if err != nil {
				rerr <- err
				for ; k < o.procs; k++ {
					rwg.Done()
				}
				return
			}
			go func() {
				defer rwg.Done()
				defer c.Close()
				br := bufio.NewReaderSize(c, o.buffer)
				local := newTallies(o.procs)
				defer t.merge(mu, local)
				var hdr [4]byte
				rec := make([]byte, 0, o.record)
				for {
					if _, err := io.ReadFull(br, hdr[:]); err != nil {
						rerr <- err
						return
					}
					n := binary.LittleEndian.Uint32(hdr[:])
					if n == ^uint32(0) {
						return
					}
					rec = rec[:n]
					if _, err := io.ReadFull(br, rec); err != nil {
						rerr <- err
						return
					}
					local.recv(rec)
				}
			}()
		}
	}()
	start := time.Now()
	type conn struct {
		mu sync.Mutex
		c  net.Conn
	}
	conns := make([]*conn, o.procs)
	for q, a := range peers {
		c, err := net.Dial("tcp", a)
		if err != nil {
			return fail(err)
		}
		conns[q] = &conn{c: c}
	}
	var wg sync.WaitGroup
	serr := make(chan error, o.threads)
	for th := 0; th < o.threads; th++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs := make([][]byte, o.procs)
			local := newTallies(o.procs)
			defer t.merge(mu, local)
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
			err := genRecords(o, f.Rank(), th, func(i int, rec []byte, dest int) error {
				if o.pattern != "broadcast" {
					local.send(dest, rec)
					return add(dest, rec)
				}
				local.send(-1, rec)
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
		c.c.(*net.TCPConn).CloseWrite()
	}
	rwg.Wait()
	secs := time.Since(start).Seconds()
	for _, c := range conns {
		c.c.Close()
	}
	close(rerr)
	if err := errors.Join(append(drain(serr), drain(rerr)...)...); err != nil {
		return fail(err)
	}
	return shuffleReport{Seconds: secs, Received: t.received, Sent: t.sent, Got: t.got}
}
