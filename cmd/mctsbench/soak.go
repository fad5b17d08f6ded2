package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/riutils"
)

// The soak run drives every call primitive between every pair of worker
// threads for a while, with sequence numbers and checksums on four FIFO
// channels, then closes each channel with a marker carrying the number of
// calls sent on it: receivers check nothing was lost, duplicated,
// reordered or corrupted.
const (
	chSend = iota // dsfabric Call and CallBuffer (send-based)
	chMsgr        // riutils Messenger: Call, CallBuffer, CallBufferWrite/Read, CallSync
	chTrad        // riutils Aggregator, trad
	chOvfl        // riutils Aggregator, ovfl
	numChannels
)

var channelNames = [numChannels]string{"send", "messenger", "trad", "ovfl"}

// SoakReport is one rank's outcome.
type SoakReport struct {
	Rank       int    `json:"rank"`
	Sent       int64  `json:"calls_sent"`
	Received   int64  `json:"calls_received"`
	Returns    int64  `json:"returns_checked"`
	Broadcasts int64  `json:"broadcasts_run"`
	Errors     int64  `json:"errors"`
	RSSWarmKB  int64  `json:"rss_kb_after_warmup"`
	RSSEndKB   int64  `json:"rss_kb_end"`
	MaxRSSKB   int64  `json:"max_rss_kb"`
	Goroutines int    `json:"max_goroutines"`
	FirstError string `json:"first_error,omitempty"`
}

// soakRank is one process's state.
type soakRank struct {
	f        *dsfabric.Fabric
	ids      map[string]dsfabric.HandlerID
	threads  []*soakThread // local, by thread rank
	errs     atomic.Int64
	errOnce  sync.Once
	firstErr atomic.Value
	reports  chan SoakReport
	sent     atomic.Int64
	recv     atomic.Int64
	returns  atomic.Int64
}

// soakThread is the receiving state of one local worker thread (touched
// only by that thread, in its handlers).
type soakThread struct {
	next    [numChannels][]uint64 // by source thread
	markers [numChannels][]int64  // calls announced by each source's marker, −1 until it comes
	slots   *alloc.Region         // one 4 KiB landing slot per source thread
	bcasts  int64                 // broadcasts run here
}

func (s *soakRank) fail(err error) {
	s.errs.Add(1)
	s.errOnce.Do(func() { s.firstErr.Store(err.Error()) })
}

const soakSlot = 4096

func soakPayload(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// msgArgs: [ch u8][pad 3][crc u32 of the buffer][seq u64][payload...]
func msgArgs(dst []byte, ch int, seq uint64, payload, buf []byte) []byte {
	dst = append(dst[:0], byte(ch), 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, crc32.ChecksumIEEE(buf))
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = binary.LittleEndian.AppendUint32(dst, crc32.ChecksumIEEE(payload))
	return append(dst, payload...)
}

func (s *soakRank) local(id dsfabric.ThreadID) *soakThread {
	return s.threads[s.f.Names().ThreadRank(id)]
}

func (s *soakRank) register(h *dsfabric.Handlers) error {
	s.ids = map[string]dsfabric.HandlerID{}
	reg := func(name string, fn dsfabric.HandlerFunc) error {
		id, err := h.Register("soak."+name, fn)
		s.ids[name] = id
		return err
	}
	return errors.Join(
		reg("msg", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if len(a) < 20 || a[0] >= numChannels {
				s.fail(fmt.Errorf("malformed call of %d bytes from thread %d", len(a), c.Src))
				return nil, nil
			}
			ch, seq := int(a[0]), binary.LittleEndian.Uint64(a[8:])
			t := s.local(c.Dst)
			if want := t.next[ch][c.Src]; seq != want {
				s.fail(fmt.Errorf("%s channel from thread %d to %d: call %d, want %d", channelNames[ch], c.Src, c.Dst, seq, want))
			}
			t.next[ch][c.Src] = seq + 1
			if crc32.ChecksumIEEE(a[20:]) != binary.LittleEndian.Uint32(a[16:]) || crc32.ChecksumIEEE(c.Buffer) != binary.LittleEndian.Uint32(a[4:]) {
				s.fail(fmt.Errorf("%s call %d from thread %d: corrupted arguments or buffer (%d bytes)", channelNames[ch], seq, c.Src, len(c.Buffer)))
			}
			s.recv.Add(1)
			return nil, nil
		}),
		reg("marker", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if len(a) != 9 || a[0] >= numChannels {
				s.fail(fmt.Errorf("malformed marker from thread %d", c.Src))
				return nil, nil
			}
			t := s.local(c.Dst)
			t.markers[a[0]][c.Src] = int64(binary.LittleEndian.Uint64(a[1:]))
			return nil, nil
		}),
		reg("echo", func(c *dsfabric.Call, a []byte) ([]byte, error) { return a, nil }),
		reg("bcast", func(c *dsfabric.Call, a []byte) ([]byte, error) { s.local(c.Dst).bcasts++; return nil, nil }),
		reg("slot", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			l, err := s.local(c.Dst).slots.Locator(int(c.Src)*soakSlot, soakSlot)
			if err != nil {
				return nil, err
			}
			return l.AppendBinary(nil)
		}),
		reg("report", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			var r SoakReport
			if err := json.Unmarshal(a, &r); err != nil {
				return nil, err
			}
			s.reports <- r
			return nil, nil
		}),
	)
}

// sender is one worker thread's sending state.
type soakSender struct {
	s     *soakRank
	w     *dsfabric.Worker
	m     *riutils.Messengers
	trad  *riutils.Aggregator
	ovfl  *riutils.Aggregator
	obj   *riutils.RemoteObject
	sy    *riutils.Synchronizer
	orig  *alloc.Region
	seq   [numChannels][]uint64 // next sequence number by destination
	dests map[dsfabric.ThreadID]alloc.Locator
	rng   *rand.Rand
	args  []byte
	self  dsfabric.ThreadID
}

func (x *soakSender) poll() int { return x.m.Poll() + x.w.Poll() }

func (x *soakSender) check(err error, what string, dst dsfabric.ThreadID) {
	if err != nil {
		x.s.fail(fmt.Errorf("%s from thread %d to %d: %w", what, x.self, dst, err))
	}
}

// op makes one call of kind k to dst.
func (x *soakSender) op(ctx context.Context, k int, dst dsfabric.ThreadID) {
	f, m := x.s.f, x.m
	payload := soakPayload(x.rng, 1+x.rng.IntN(200))
	next := func(ch int) uint64 { v := x.seq[ch][dst]; x.seq[ch][dst]++; x.s.sent.Add(1); return v }
	msg := x.s.ids["msg"]
	switch k {
	case 0: // send-based Call
		x.args = msgArgs(x.args, chSend, next(chSend), payload, nil)
		x.check(f.Call(x.self, dst, msg, x.args, nil), "send-based Call", dst)
	case 1: // send-based CallBuffer
		buf := soakPayload(x.rng, 1+x.rng.IntN(1000))
		x.args = msgArgs(x.args, chSend, next(chSend), payload, buf)
		x.check(f.CallBuffer(x.self, dst, msg, x.args, buf, nil), "send-based CallBuffer", dst)
	case 2: // send-based CallServiceReturn
		out, err := f.CallServiceReturn(ctx, x.self, f.Names().Rank(dst), x.s.ids["echo"], payload)
		x.checkReturn(out, payload, err, "send-based CallServiceReturn", dst)
	case 3: // one-sided Call
		x.args = msgArgs(x.args, chMsgr, next(chMsgr), payload, nil)
		x.check(m.Call(dst, msg, x.args), "Messenger Call", dst)
	case 4: // one-sided CallBuffer
		buf := soakPayload(x.rng, 1+x.rng.IntN(3000))
		x.args = msgArgs(x.args, chMsgr, next(chMsgr), payload, buf)
		x.check(m.CallBuffer(dst, msg, x.args, buf), "Messenger CallBuffer", dst)
	case 5: // one-sided CallReturn
		out, err := m.CallReturn(ctx, dst, x.s.ids["echo"], payload, x.obj)
		x.checkReturn(out, payload, err, "Messenger CallReturn", dst)
	case 6, 7: // CallBufferWrite, CallBufferRead (+ Synchronizer)
		d, ok := x.dests[dst]
		if !ok {
			raw, err := m.CallReturn(ctx, dst, x.s.ids["slot"], nil, x.obj)
			if err == nil {
				err = d.UnmarshalBinary(raw)
			}
			if err != nil {
				x.check(err, "asking for a landing slot", dst)
				return
			}
			x.dests[dst] = d
		}
		n := 1 + x.rng.IntN(soakSlot)
		orig, _ := x.orig.Memory(0, n)
		copy(orig.Bytes(), soakPayload(x.rng, n))
		x.args = msgArgs(x.args, chMsgr, next(chMsgr), payload, orig.Bytes())
		x.sy.Add(1)
		var err error
		if k == 6 {
			err = m.CallBufferWrite(dst, msg, x.args, orig, d, x.sy)
		} else {
			err = m.CallBufferRead(dst, msg, x.args, orig, d, x.sy)
		}
		if err != nil {
			x.sy.Add(-1)
		}
		x.check(err, "CallBufferWrite/Read", dst)
		x.check(x.sy.Wait(ctx), "waiting on a Synchronizer", dst) // orig is reused next time
	case 8: // CallSync
		x.args = msgArgs(x.args, chMsgr, next(chMsgr), payload, nil)
		x.sy.Add(1)
		if err := m.CallSync(dst, msg, x.args, nil, x.sy); err != nil {
			x.sy.Add(-1)
			x.check(err, "CallSync", dst)
		}
	case 9, 10: // Aggregators
		ch, agg := chTrad, x.trad
		if k == 10 {
			ch, agg = chOvfl, x.ovfl
		}
		x.args = msgArgs(x.args, ch, next(ch), payload, nil)
		x.check(agg.Call(dst, msg, x.args), channelNames[ch]+" Aggregator Call", dst)
	}
}

const soakOps = 11

func (x *soakSender) checkReturn(out, want []byte, err error, what string, dst dsfabric.ThreadID) {
	if err == nil && !bytes.Equal(out, want) {
		err = fmt.Errorf("reply of %d bytes differs from the %d sent", len(out), len(want))
	}
	x.check(err, what, dst)
	if err == nil {
		x.s.returns.Add(1)
	}
}

// run is a worker thread's soak: calls until the deadline, markers, then
// polling until every other thread's markers are in and add up.
func (x *soakSender) run(deadline time.Time) {
	s := x.s
	ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadline)+2*time.Minute)
	defer cancel()
	all := s.f.Names().Threads()
	for i := 0; time.Now().Before(deadline); i++ {
		dst := dsfabric.ThreadID(x.rng.IntN(all - 1))
		if dst >= x.self {
			dst++ // every thread but this one
		}
		x.op(ctx, i%soakOps, dst)
		if i%997 == 0 {
			x.check(x.m.Broadcast(s.ids["bcast"], nil), "Broadcast", 0)
		}
		if i%64 == 0 {
			x.check(x.trad.Flush(), "trad Flush", 0)
		}
		x.poll()
	}
	x.check(x.sy.Wait(ctx), "waiting on the last CallSync calls", 0)
	for d := 0; d < all; d++ {
		dst := dsfabric.ThreadID(d)
		if dst == x.self {
			continue
		}
		for ch := 0; ch < numChannels; ch++ {
			a := binary.LittleEndian.AppendUint64([]byte{byte(ch)}, x.seq[ch][dst])
			var err error
			switch ch {
			case chSend:
				err = s.f.Call(x.self, dst, s.ids["marker"], a, nil)
			case chMsgr:
				err = x.m.Call(dst, s.ids["marker"], a)
			case chTrad:
				err = x.trad.Call(dst, s.ids["marker"], a)
			case chOvfl:
				err = x.ovfl.Call(dst, s.ids["marker"], a)
			}
			x.check(err, channelNames[ch]+" marker", dst)
		}
	}
	x.check(x.trad.Flush(), "trad Flush", 0)
	x.check(x.ovfl.Flush(), "ovfl Flush", 0)
	t := s.local(x.self)
	for {
		missing := 0
		for ch := range t.markers {
			for src, n := range t.markers[ch] {
				if dsfabric.ThreadID(src) != x.self && n < 0 {
					missing++
				}
			}
		}
		if missing == 0 {
			break
		}
		if x.poll() == 0 {
			if ctx.Err() != nil {
				s.fail(fmt.Errorf("thread %d: %d channel markers never came", x.self, missing))
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	for ch := range t.markers {
		for src, n := range t.markers[ch] {
			if dsfabric.ThreadID(src) != x.self && int64(t.next[ch][src]) != n {
				s.fail(fmt.Errorf("%s channel from thread %d to %d: %d calls sent, %d ran", channelNames[ch], src, x.self, n, t.next[ch][src]))
			}
		}
	}
	x.check(x.m.Err(), "incoming messengers", 0)
}

func readRSSKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			v, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return v
		}
	}
	return 0
}

func soak(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	procs := fs.Int("procs", 3, "processes (self-launched)")
	threads := fs.Int("threads", 2, "worker threads per process")
	duration := fs.Duration("duration", 30*time.Second, "how long every thread keeps calling")
	transport := fs.String("transport", "", "\"\" (automatic), shm, tcp or ofi")
	asJSON := fs.Bool("json", false, "print one JSON object per rank")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *procs < 1 || *threads < 1 || *procs**threads < 2 || *duration <= 0 {
		fmt.Fprintln(stderr, "mctsbench soak: at least 2 worker threads in all and a positive -duration")
		return 2
	}
	reports, err := runSoak(*procs, *threads, *duration, *transport, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench soak: %v\n", err)
		return 1
	}
	if reports == nil {
		return 0
	}
	var errs int64
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range reports {
			enc.Encode(r)
			errs += r.Errors
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "rank\tcalls sent\tcalls run\treturns checked\terrors\tRSS after warm-up\tRSS at end\tmax RSS\tmax goroutines\t")
		for _, r := range reports {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d KiB\t%d KiB\t%d KiB\t%d\t\n", r.Rank, r.Sent, r.Received, r.Returns, r.Errors, r.RSSWarmKB, r.RSSEndKB, r.MaxRSSKB, r.Goroutines)
			errs += r.Errors
		}
		tw.Flush()
		for _, r := range reports {
			if r.FirstError != "" {
				fmt.Fprintf(stdout, "rank %d: first error: %s\n", r.Rank, r.FirstError)
			}
		}
	}
	if errs > 0 {
		return 1
	}
	return 0
}

// runSoak runs the job; rank 0 returns every rank's report, the others nil.
func runSoak(procs, threads int, duration time.Duration, transport string, stderr io.Writer) ([]SoakReport, error) {
	s := &soakRank{reports: make(chan SoakReport, procs)}
	h := dsfabric.NewHandlers()
	if err := s.register(h); err != nil {
		return nil, err
	}
	start := make(chan time.Time, threads)
	var done sync.WaitGroup
	done.Add(threads)
	worker := func(w *dsfabric.Worker, m *riutils.Messengers) {
		deadline := <-start // sent once the job below is set up
		x := &soakSender{s: s, w: w, m: m, self: w.ID(), dests: map[dsfabric.ThreadID]alloc.Locator{}, rng: rand.New(rand.NewPCG(uint64(w.ID()), uint64(time.Now().UnixNano())))}
		all := s.f.Names().Threads()
		for ch := range x.seq {
			x.seq[ch] = make([]uint64, all)
		}
		var err error
		if x.trad, err = x.m.Aggregator(riutils.AggregatorConfig{Mode: riutils.Trad}); err == nil {
			if x.ovfl, err = x.m.Aggregator(riutils.AggregatorConfig{Mode: riutils.Ovfl}); err == nil {
				if x.obj, err = x.m.NewRemoteObject(4096); err == nil {
					if x.sy, err = x.m.NewSynchronizer(0); err == nil {
						x.orig, err = s.f.Process().Registry().NewRegion(soakSlot, alloc.RegionConfig{Name: "soak-orig"})
					}
				}
			}
		}
		if err != nil {
			s.fail(fmt.Errorf("thread %d: %w", w.ID(), err))
			done.Done()
			return
		}
		x.run(deadline)
		done.Done()
		// Keep serving until the job closes: others may still need us.
		for {
			select {
			case <-s.f.Done():
				return
			default:
			}
			if x.poll() == 0 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	job, err := riutils.Start(context.Background(), dsfabric.Config{Procs: procs, ThreadsPerProcess: threads, Transport: transport, Handlers: h, Stdout: stderr}, riutils.DefaultConfig(), worker)
	if err != nil {
		return nil, err
	}
	f := job.Fabric
	defer f.Close()
	s.f = f
	all := f.Names().Threads()
	s.threads = make([]*soakThread, threads)
	for i := range s.threads {
		t := &soakThread{}
		for ch := 0; ch < numChannels; ch++ {
			t.next[ch] = make([]uint64, all)
			t.markers[ch] = make([]int64, all)
			for j := range t.markers[ch] {
				t.markers[ch][j] = -1
			}
		}
		if t.slots, err = f.Process().Registry().NewRegion(all*soakSlot, alloc.RegionConfig{Name: "soak-slots"}); err != nil {
			return nil, err
		}
		s.threads[i] = t
	}
	ctx := context.Background()
	if err := f.Barrier(ctx); err != nil {
		return nil, err
	}
	began := time.Now()
	deadline := began.Add(duration)
	for i := 0; i < threads; i++ {
		start <- deadline
	}
	// Sample memory and goroutines while the threads work.
	rep := SoakReport{Rank: f.Rank()}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	warm := began.Add(duration / 5)
sampling:
	for {
		select {
		case <-finished:
			break sampling
		case now := <-tick.C:
			rss := readRSSKB()
			rep.MaxRSSKB = max(rep.MaxRSSKB, rss)
			rep.Goroutines = max(rep.Goroutines, runtime.NumGoroutine())
			if rep.RSSWarmKB == 0 && now.After(warm) {
				rep.RSSWarmKB = rss
			}
		}
	}
	rep.RSSEndKB = readRSSKB()
	rep.MaxRSSKB = max(rep.MaxRSSKB, rep.RSSEndKB)
	if rep.RSSWarmKB == 0 {
		rep.RSSWarmKB = rep.RSSEndKB
	}
	rep.Sent, rep.Received, rep.Returns, rep.Errors = s.sent.Load(), s.recv.Load(), s.returns.Load(), s.errs.Load()
	for _, t := range s.threads {
		rep.Broadcasts += t.bcasts // the threads are done: no handler runs now
	}
	if e, ok := s.firstErr.Load().(string); ok {
		rep.FirstError = e
	}
	b, _ := json.Marshal(rep)
	self, _ := f.Names().Thread(f.Rank(), 0)
	if err := f.CallService(self, 0, s.ids["report"], b, nil); err != nil {
		return nil, err
	}
	if f.Rank() != 0 {
		return nil, f.Barrier(ctx)
	}
	out := make([]SoakReport, procs)
	for i := 0; i < procs; i++ {
		select {
		case r := <-s.reports:
			if r.Rank >= 0 && r.Rank < procs {
				out[r.Rank] = r
			}
		case <-time.After(duration + 2*time.Minute):
			return nil, fmt.Errorf("only %d of %d ranks reported", i, procs)
		}
	}
	return out, f.Barrier(ctx)
}
