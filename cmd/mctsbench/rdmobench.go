package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/rdmo"
)

// The RDMO benchmark (seed 001): each of the five RDMOs against its
// one-sided sequence on the same instance layout, per transport, with one
// initiator and with many on one instance (the contention case), beside
// the round trip of one signaled 8-byte write. The target and the
// initiators are separate dtutils Processes of this OS process, joined by
// the transport under test (memfd mappings and unix sockets for shm,
// loopback sockets for tcp): the bytes travel as between processes, the Go
// runtime is shared.

// RDMOResult is one line of mctsbench rdmo.
type RDMOResult struct {
	Op            string  `json:"op"`
	Impl          string  `json:"impl"` // rdmo or rdma
	Transport     string  `json:"transport"`
	Initiators    int     `json:"initiators"`
	MessagesPerOp float64 `json:"messages_per_op"`
	P50ns         float64 `json:"p50_ns"`
	P99ns         float64 `json:"p99_ns"`
	OpsPerS       float64 `json:"ops_per_s"`
	N             int     `json:"n"`
}

// RDMOGoal is a goal of the RDMO issue checked on one run's figures.
type RDMOGoal struct {
	Goal      string  `json:"goal"`
	Transport string  `json:"transport"`
	Value     float64 `json:"value"`
	Limit     float64 `json:"limit"`
	Met       bool    `json:"met"`
}

var rdmoOps = []string{"SlottedAppend", "ConditionalGather", "SignaledRead", "WriteAndSeal", "ScatterAndAccumulate"}

func rdmoBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rdmo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	transports := fs.String("transports", "shm,tcp", "comma-separated: shm, tcp, ofi (ofi needs make build-ofi)")
	n := fs.Int("n", 5000, "operations per initiator per measurement (the first 10% are warm-up)")
	inits := fs.String("initiators", "1,4", "comma-separated initiator counts")
	asJSON := fs.Bool("json", false, "print one JSON object per measurement and per goal")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ks, err := parseSizes(*inits)
	if err != nil || *n < 10 {
		fmt.Fprintf(stderr, "mctsbench rdmo: -initiators or -n (≥ 10) invalid: %v\n", err)
		return 2
	}
	var rs []RDMOResult
	var goals []RDMOGoal
	for _, tr := range strings.Split(*transports, ",") {
		var trs []RDMOResult
		for _, k := range ks {
			r, err := rdmoRun(tr, k, *n)
			if err != nil {
				fmt.Fprintf(stderr, "mctsbench rdmo: %s, %d initiators: %v\n", tr, k, err)
				return 1
			}
			trs = append(trs, r...)
		}
		rs = append(rs, trs...)
		goals = append(goals, rdmoGoals(trs)...)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range rs {
			enc.Encode(r)
		}
		for _, g := range goals {
			enc.Encode(g)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\timpl\ttransport\tinitiators\tmsgs/op\tp50 µs\tp99 µs\tops/s\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%.2f\t%.2f\t%.0f\t\n", r.Op, r.Impl, r.Transport, r.Initiators, r.MessagesPerOp, r.P50ns/1e3, r.P99ns/1e3, r.OpsPerS)
	}
	tw.Flush()
	for _, g := range goals {
		fmt.Fprintf(stdout, "goal %s over %s: %.2f (limit %.2f) met=%v\n", g.Goal, g.Transport, g.Value, g.Limit, g.Met)
	}
	return 0
}

// rdmoGoals checks the goals on one network transport's figures:
// each RDMO within 1.2× one write's round trip (p50, one initiator);
// SlottedAppend and SignaledRead at least 2× faster than their one-sided
// sequences; under contention SlottedAppend at least 3× the one-sided
// throughput. Over shm a one-sided operation is a memory access by the
// initiator itself, which no request to another thread can beat: the goals
// are the network's, and shm's figures are reported without them.
func rdmoGoals(rs []RDMOResult) []RDMOGoal {
	find := func(op, impl string, k int) *RDMOResult {
		for i := range rs {
			if rs[i].Op == op && rs[i].Impl == impl && rs[i].Initiators == k {
				return &rs[i]
			}
		}
		return nil
	}
	var gs []RDMOGoal
	w := find("Write", "rdma", 1)
	if w == nil {
		return nil
	}
	tr := w.Transport
	if tr == "shm" || tr == "ofi-shm" || tr == "loop" {
		return nil
	}
	for _, op := range rdmoOps {
		if r := find(op, "rdmo", 1); r != nil {
			v := r.P50ns / w.P50ns
			gs = append(gs, RDMOGoal{Goal: op + "_rdmo_p50_over_write_p50", Transport: tr, Value: v, Limit: 1.2, Met: v <= 1.2})
		}
	}
	for _, op := range []string{"SlottedAppend", "SignaledRead"} {
		if r, a := find(op, "rdmo", 1), find(op, "rdma", 1); r != nil && a != nil {
			v := a.P50ns / r.P50ns
			gs = append(gs, RDMOGoal{Goal: op + "_rdma_p50_over_rdmo_p50", Transport: tr, Value: v, Limit: 2, Met: v >= 2})
		}
	}
	kmax := 1
	for _, r := range rs {
		kmax = max(kmax, r.Initiators)
	}
	if r, a := find("SlottedAppend", "rdmo", kmax), find("SlottedAppend", "rdma", kmax); kmax > 1 && r != nil && a != nil {
		v := r.OpsPerS / a.OpsPerS
		gs = append(gs, RDMOGoal{Goal: "SlottedAppend_contended_rdmo_ops_over_rdma_ops_" + strconv.Itoa(kmax), Transport: tr, Value: v, Limit: 3, Met: v >= 3})
	}
	return gs
}

// rdmoSide is one initiator: a client and a one-sided runner on queue
// pairs of its own, and a queue pair for the write reference.
type rdmoSide struct {
	proc   *dtutils.Process
	client *rdmo.Client
	rdma   *rdmo.RDMA
	ref    dtutils.QueuePair
	refMem alloc.Memory
}

type rdmoWorld struct {
	target  *dtutils.Process
	engine  *rdmo.Engine
	mem     *alloc.Region
	sides   []rdmoSide
	closers []func()
}

func (w *rdmoWorld) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

func newRDMOWorld(transport string, k int) (w *rdmoWorld, err error) {
	w = &rdmoWorld{}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	newProc := func(rank uint32) (*dtutils.Process, dtutils.Provider, error) {
		p, err := dtutils.NewProcess(dtutils.DefaultProcessConfig(rank))
		if err != nil {
			return nil, nil, err
		}
		prov, err := newLocalProvider(p, transport)
		if err != nil {
			p.Close()
			return nil, nil, err
		}
		w.closers = append(w.closers, func() { prov.Close(); p.Close() })
		return p, prov, nil
	}
	var tprov dtutils.Provider
	if w.target, tprov, err = newProc(0); err != nil {
		return nil, err
	}
	if w.mem, err = w.target.Registry().NewRegion(64<<20, alloc.RegionConfig{Name: "rdmo-instances"}); err != nil {
		return nil, err
	}
	if w.engine, err = rdmo.NewEngine(w.target, rdmo.EngineConfig{}); err != nil {
		return nil, err
	}
	if err = rdmo.RegisterBuiltins(w.engine); err != nil {
		return nil, err
	}
	for i := 0; i < k; i++ {
		var s rdmoSide
		var prov dtutils.Provider
		if s.proc, prov, err = newProc(uint32(i + 1)); err != nil {
			return nil, err
		}
		var qps [3]dtutils.QueuePair
		for j := range qps {
			if qps[j], err = connectLocal(prov, tprov); err != nil {
				return nil, err
			}
		}
		if s.client, err = rdmo.NewClient(s.proc, rdmo.ClientConfig{}, qps[0]); err != nil {
			return nil, err
		}
		tx, err := dtutils.NewTransmitter(qps[1], s.proc.Config().MaxUnsignaled, dtutils.TransmitterConfig{})
		if err != nil {
			return nil, err
		}
		scratch, err := s.proc.Registry().NewRegion(rdmo.RDMAScratch+64, alloc.RegionConfig{Name: "rdma-scratch"})
		if err != nil {
			return nil, err
		}
		sm, _ := scratch.Memory(0, rdmo.RDMAScratch)
		if s.rdma, err = rdmo.NewRDMA(tx, sm); err != nil {
			return nil, err
		}
		s.ref, s.refMem = qps[2], mustMemory(scratch, rdmo.RDMAScratch, 8)
		w.sides = append(w.sides, s)
	}
	return w, nil
}

func mustMemory(r *alloc.Region, off, n int) alloc.Memory {
	m, err := r.Memory(off, n)
	if err != nil {
		panic(err)
	}
	return m
}

// connectLocal joins a new queue pair of a to a new one of b.
func connectLocal(a, b dtutils.Provider) (dtutils.QueuePair, error) {
	qa, err := a.NewQueuePair()
	if err != nil {
		return nil, err
	}
	qb, err := b.NewQueuePair()
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- qb.Connect(qa.Endpoint()) }()
	return qa, errors.Join(qa.Connect(qb.Endpoint()), <-errc)
}

// rdmoOp runs one operation for initiator s (i counts its operations) and
// returns the code; messages come from the RDMA runner's count.
type rdmoOp func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error)

func rdmoRun(transport string, k, n int) ([]RDMOResult, error) {
	w, err := newRDMOWorld(transport, k)
	if err != nil {
		return nil, err
	}
	defer w.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tr := resultTransport(transport)
	var out []RDMOResult
	at := 0
	carve := func(size int) alloc.Memory {
		m := mustMemory(w.mem, at, size)
		at += (size + 63) &^ 63
		return m
	}
	const tupleLen, record, pairs, buckets, chainLen = 64, 256, 8, 64, 8
	tuple := make([]byte, tupleLen)
	// Instances: a page per implementation big enough for every append,
	// version chains pre-filled, one record, a sealed buffer per initiator,
	// an accumulator table.
	pageBytes := 32 + k*n*(8+tupleLen)
	chainsMem := carve(64 + 8*buckets + 32*buckets*chainLen*2)
	if _, err := rdmo.InitVersionChains(chainsMem.Bytes(), buckets); err != nil {
		return nil, err
	}
	chains, _ := w.engine.Create(rdmo.VersionChainsType, chainsMem)
	for b := 0; b < buckets; b++ {
		for v := 0; v < chainLen; v++ {
			if code, err := w.sides[0].client.InsertVersion(ctx, chains, uint64(b), uint64(b+buckets*(v%2)), uint64(v*10), uint64(v)); err != nil || code != rdmo.OK {
				return nil, fmt.Errorf("filling version chains: %v %v", code, err)
			}
		}
	}
	recMem := carve(16 + record)
	rdmo.InitLockedRecord(recMem.Bytes())
	rec, _ := w.engine.Create(rdmo.LockedRecordType, recMem)
	seals := make([]alloc.Memory, k)
	sealCaps := make([]rdmo.Capability, k)
	for i := range seals {
		seals[i] = carve(8 + record)
		sealCaps[i], _ = w.engine.Create(rdmo.SealedBufferType, seals[i])
	}
	lookup := make([]uint64, 1024)
	for i := range lookup {
		lookup[i] = uint64(i*7) % 256
	}
	accMem := carve(64 + 8*(1024+256))
	rdmo.InitAccumulator(accMem.Bytes(), lookup, 256)
	acc, _ := w.engine.Create(rdmo.AccumulatorType, accMem)
	data := make([]byte, record)
	kd := func(r *rand.Rand) []rdmo.KeyDelta {
		ps := make([]rdmo.KeyDelta, pairs)
		for i := range ps {
			ps[i] = rdmo.KeyDelta{Key: uint64(r.Intn(1 << 20)), Delta: 1}
		}
		return ps
	}
	type bench struct {
		op, impl string
		setup    func() // a fresh instance where the op fills one
		fn       rdmoOp
	}
	var page rdmo.Capability
	var pageLoc alloc.Locator
	newPage := func() {
		m := carve(pageBytes)
		rdmo.InitSlottedPage(m.Bytes(), k*n)
		page, _ = w.engine.Create(rdmo.SlottedPageType, m)
		pageLoc = m.Locator()
	}
	appendRetry := func(ctx context.Context, s *rdmoSide) (rdmo.Code, error) {
		for {
			_, code, err := s.client.SlottedAppend(ctx, page, tuple)
			if err != nil || code != rdmo.CodeContended {
				return code, err
			}
		}
	}
	refLoc, _ := seals[0].Locator().Sub(0, 8)
	benches := []bench{
		{"Write", "rdma", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			if err := s.ref.Post(dtutils.WorkRequest{Op: dtutils.OpWrite, Signaled: true, Local: s.refMem, Remote: refLoc}); err != nil {
				return 0, err
			}
			var c [1]dtutils.Completion
			if _, err := s.ref.CQ().Wait(ctx, c[:]); err != nil {
				return 0, err
			}
			return rdmo.OK, c[0].Err()
		}},
		{"SlottedAppend", "rdmo", newPage, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			return appendRetry(ctx, s)
		}},
		{"SlottedAppend", "rdma", newPage, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			_, code, err := s.rdma.SlottedAppend(ctx, pageLoc, tuple)
			return code, err
		}},
		{"ConditionalGather", "rdmo", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			b := uint64(r.Intn(buckets))
			_, code, err := s.client.ConditionalGather(ctx, chains, b, b, 1<<40)
			return code, err
		}},
		{"ConditionalGather", "rdma", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			b := uint64(r.Intn(buckets))
			_, code, err := s.rdma.ConditionalGather(ctx, chainsMem.Locator(), buckets, b, b, 1<<40)
			return code, err
		}},
		{"SignaledRead", "rdmo", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			for {
				code, _, err := s.client.SignaledRead(ctx, rec, 16, data[:0:0])
				if err != nil || code != rdmo.CodeLocked {
					return code, err
				}
			}
		}},
		{"SignaledRead", "rdma", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			for {
				code, _, err := s.rdma.SignaledRead(ctx, recMem.Locator(), 16, nil)
				if err != nil || code != rdmo.CodeLocked {
					return code, err
				}
			}
		}},
		{"WriteAndSeal", "rdmo", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			return s.client.WriteAndSeal(ctx, sealCaps[s.proc.Rank()-1], uint64(i+1), data)
		}},
		{"WriteAndSeal", "rdma", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			return s.rdma.WriteAndSeal(ctx, seals[s.proc.Rank()-1].Locator(), uint64(i+1), data)
		}},
		{"ScatterAndAccumulate", "rdmo", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			_, code, err := s.client.ScatterAndAccumulate(ctx, acc, kd(r))
			return code, err
		}},
		{"ScatterAndAccumulate", "rdma", nil, func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			_, code, err := s.rdma.ScatterAndAccumulate(ctx, accMem.Locator(), uint64(len(lookup)), 256, kd(r))
			return code, err
		}},
	}
	for _, b := range benches {
		if b.setup != nil {
			b.setup()
		}
		res, err := rdmoMeasure(ctx, w, n, b.fn, b.impl == "rdmo", b.op == "Write")
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", b.op, b.impl, err)
		}
		res.Op, res.Impl, res.Transport, res.Initiators = b.op, b.impl, tr, k
		out = append(out, res)
	}
	return out, nil
}

// rdmoMeasure runs fn n times on every initiator at once and reports the
// latencies after a 10% warm-up, the aggregate rate and the messages per
// operation (2 for an RDMO and a signaled write: request and answer; the
// one-sided runner counts its own).
func rdmoMeasure(ctx context.Context, w *rdmoWorld, n int, fn rdmoOp, isRDMO, isWrite bool) (RDMOResult, error) {
	warm := n / 10
	lat := make([][]float64, len(w.sides))
	msgs0 := make([]uint64, len(w.sides))
	for i := range w.sides {
		msgs0[i] = w.sides[i].rdma.Messages
	}
	var wg sync.WaitGroup
	errs := make([]error, len(w.sides))
	var start sync.WaitGroup
	start.Add(1)
	begins := make([]time.Time, len(w.sides))
	ends := make([]time.Time, len(w.sides))
	for si := range w.sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &w.sides[si]
			r := rand.New(rand.NewSource(int64(si)))
			l := make([]float64, 0, n-warm)
			start.Wait()
			for i := 0; i < n; i++ {
				if i == warm {
					begins[si] = time.Now()
					msgs0[si] = s.rdma.Messages
				}
				t0 := time.Now()
				code, err := fn(ctx, s, i, r)
				if err == nil && code != rdmo.OK && code != rdmo.CodeTruncated {
					err = fmt.Errorf("code %v", code)
				}
				if err != nil {
					errs[si] = err
					return
				}
				if i >= warm {
					l = append(l, float64(time.Since(t0).Nanoseconds()))
				}
			}
			ends[si] = time.Now()
			lat[si] = l
		}()
	}
	start.Done()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return RDMOResult{}, err
	}
	var all []float64
	var msgs uint64
	first, last := begins[0], ends[0]
	for i := range w.sides {
		all = append(all, lat[i]...)
		msgs += w.sides[i].rdma.Messages - msgs0[i]
		if begins[i].Before(first) {
			first = begins[i]
		}
		if ends[i].After(last) {
			last = ends[i]
		}
	}
	ops := len(all)
	perOp := float64(msgs) / float64(ops)
	if isRDMO || isWrite {
		perOp = 2
	}
	return RDMOResult{MessagesPerOp: perOp, P50ns: percentile(all, 50), P99ns: percentile(all, 99), OpsPerS: float64(ops) / last.Sub(first).Seconds(), N: ops}, nil
}
