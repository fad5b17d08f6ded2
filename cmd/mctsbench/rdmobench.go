package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
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
// the round trip of one signaled 8-byte write. The target is a process of
// its own (this program, self-launched); the initiators are dtutils
// Processes of this one, each with its own queue pairs.

// RDMOResult is one line of mctsbench rdmo.
type RDMOResult struct {
	Op            string  `json:"op"`
	Impl          string  `json:"impl"` // rdmo, rdmo-direct (shm: the initiator runs the method) or rdma
	Transport     string  `json:"transport"`
	Initiators    int     `json:"initiators"`
	MessagesPerOp float64 `json:"messages_per_op"`
	P50ns         float64 `json:"p50_ns"`
	P99ns         float64 `json:"p99_ns"`
	OpsPerS       float64 `json:"ops_per_s"`
	// WriteP50ns is the p50 of the reference write interleaved with the
	// operations (one initiator): what the round-trip goal divides by.
	WriteP50ns float64 `json:"write_p50_ns,omitempty"`
	N          int     `json:"n"`
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
	if !flagsOK(stderr, "rdmo",
		check{err != nil, "-initiators: " + errMsg(err)},
		check{*n < 10, fmt.Sprintf("-n %d (want ≥ 10)", *n)}) {
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
// each RDMO within 1.2× one write's round trip (p50, one initiator, the
// write interleaved with the RDMOs);
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
			ref := w.P50ns
			if r.WriteP50ns > 0 {
				ref = r.WriteP50ns // measured interleaved with it
			}
			v := r.P50ns / ref
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

// rdmoSide is one initiator: a client, a direct-mode client and a
// one-sided runner on queue pairs of their own, and a queue pair for the
// write reference.
type rdmoSide struct {
	proc   *dtutils.Process
	client *rdmo.Client
	direct *rdmo.Client // direct mode where the transport shares memory, else nil
	rdma   *rdmo.RDMA
	ref    dtutils.QueuePair
	refMem alloc.Memory
}

// rdmoQPs is the queue pairs per initiator: client, one-sided runner,
// write reference, direct client.
const rdmoQPs = 4

// rdmoInstances is what the target process tells the initiators: the
// capabilities and locators of the instances it made for one run.
type rdmoInstances struct {
	Chains, Record, Acc, PageRDMO, PageRDMA    rdmo.Capability
	PageDirect                                 rdmo.Capability
	ChainsLoc, RecordLoc, AccLoc, PageRDMALoc  alloc.Locator
	Seals                                      []rdmo.Capability
	SealLocs                                   []alloc.Locator
	Buckets, Lookups, Accumulators, TupleBytes int
	Endpoints                                  [][]byte // the target's queue pairs, in the initiators' order
}

// rdmoTargetEnv makes a process the target of mctsbench rdmo:
// "transport;initiators;n".
const rdmoTargetEnv = "SERIEMA_RDMO_TARGET"

const (
	rdmoBuckets, rdmoChainLen = 64, 8
	rdmoTuple, rdmoRecord     = 64, 256
	rdmoLookups, rdmoAccs     = 1024, 256
	rdmoPairs                 = 8
)

// rdmoTarget is the target process: it serves RDMOs (and the one-sided
// sequences' memory) until its standard input closes. It reads the
// initiators' endpoints (JSON: [][]byte), makes the instances and its
// queue pairs, answers with rdmoInstances (JSON) and connects.
func rdmoTarget(env string, stdin io.Reader, stdout io.Writer) error {
	f := strings.Split(env, ";")
	if len(f) != 3 {
		return fmt.Errorf("bad %s=%q", rdmoTargetEnv, env)
	}
	k, err1 := strconv.Atoi(f[1])
	n, err2 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	proc, err := dtutils.NewProcess(dtutils.DefaultProcessConfig(0))
	if err != nil {
		return err
	}
	defer proc.Close()
	prov, err := newLocalProvider(proc, f[0])
	if err != nil {
		return err
	}
	defer prov.Close()
	// The initiators are this program's own processes: they may run Direct
	// methods themselves where the transport shares memory.
	engine, err := rdmo.NewEngine(proc, rdmo.EngineConfig{Direct: true})
	if err != nil {
		return err
	}
	if err := rdmo.RegisterBuiltins(engine); err != nil {
		return err
	}
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("reading the initiators' endpoints: %w", err)
	}
	var remote [][]byte
	if err := json.Unmarshal(line, &remote); err != nil {
		return err
	}
	inst, err := rdmoMakeInstances(proc, engine, k, n)
	if err != nil {
		return err
	}
	qps := make([]dtutils.QueuePair, len(remote))
	for i := range qps {
		if qps[i], err = prov.NewQueuePair(); err != nil {
			return err
		}
		inst.Endpoints = append(inst.Endpoints, qps[i].Endpoint())
	}
	b, _ := json.Marshal(inst)
	if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
		return err
	}
	if err := dtutils.ConnectAll(qps, remote); err != nil {
		return err
	}
	io.Copy(io.Discard, in) // serve until the initiators are done
	return nil
}

func rdmoTargetMain(env string) int {
	if err := rdmoTarget(env, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "mctsbench rdmo target: %v\n", err)
		return 1
	}
	return 0
}

// rdmoMakeInstances makes the run's instances in the target: version
// chains filled through an RDMO client of the target's own (over loop),
// a locked record, a sealed buffer per initiator, an accumulator table,
// and a slotted page per implementation, big enough for every append.
func rdmoMakeInstances(proc *dtutils.Process, engine *rdmo.Engine, k, n int) (*rdmoInstances, error) {
	pageBytes := 32 + k*n*(8+rdmoTuple)
	chainsBytes := 64 + 8*rdmoBuckets + 32*rdmoBuckets*rdmoChainLen
	total := 3*pageBytes + chainsBytes + 16 + rdmoRecord + k*(8+rdmoRecord) + 64 + 8*(rdmoLookups+rdmoAccs) + 64*(k+8)
	region, err := proc.Registry().NewRegion(total, alloc.RegionConfig{Name: "rdmo-instances"})
	if err != nil {
		return nil, err
	}
	at := 0
	carve := func(size int) alloc.Memory {
		m := mustMemory(region, at, size)
		at += (size + 63) &^ 63
		return m
	}
	inst := &rdmoInstances{Buckets: rdmoBuckets, Lookups: rdmoLookups, Accumulators: rdmoAccs, TupleBytes: rdmoTuple}
	create := func(typ string, m alloc.Memory) rdmo.Capability {
		c, e := engine.Create(typ, m)
		err = errors.Join(err, e)
		return c
	}
	chains := carve(chainsBytes)
	rdmo.InitVersionChains(chains.Bytes(), rdmoBuckets)
	inst.Chains, inst.ChainsLoc = create(rdmo.VersionChainsType, chains), chains.Locator()
	rec := carve(16 + rdmoRecord)
	rdmo.InitLockedRecord(rec.Bytes())
	inst.Record, inst.RecordLoc = create(rdmo.LockedRecordType, rec), rec.Locator()
	for i := 0; i < k; i++ {
		m := carve(8 + rdmoRecord)
		inst.Seals, inst.SealLocs = append(inst.Seals, create(rdmo.SealedBufferType, m)), append(inst.SealLocs, m.Locator())
	}
	lookup := make([]uint64, rdmoLookups)
	for i := range lookup {
		lookup[i] = uint64(i*7) % rdmoAccs
	}
	acc := carve(64 + 8*(rdmoLookups+rdmoAccs))
	rdmo.InitAccumulator(acc.Bytes(), lookup, rdmoAccs)
	inst.Acc, inst.AccLoc = create(rdmo.AccumulatorType, acc), acc.Locator()
	for _, impl := range []string{"rdmo", "rdma", "rdmo-direct"} {
		m := carve(pageBytes)
		rdmo.InitSlottedPage(m.Bytes(), k*n)
		c := create(rdmo.SlottedPageType, m)
		switch impl {
		case "rdmo":
			inst.PageRDMO = c
		case "rdma":
			inst.PageRDMA, inst.PageRDMALoc = c, m.Locator()
		default:
			inst.PageDirect = c
		}
	}
	if err != nil {
		return nil, err
	}
	// Fill the chains: two keys per bucket, rdmoChainLen versions.
	f := dtutils.NewLoopFabric()
	helper, err := dtutils.NewProcess(dtutils.DefaultProcessConfig(1 << 20))
	if err != nil {
		return nil, err
	}
	defer helper.Close()
	qa, _ := f.NewProvider(helper).NewQueuePair()
	qb, _ := f.NewProvider(proc).NewQueuePair()
	if err := errors.Join(qa.Connect(qb.Endpoint()), qb.Connect(qa.Endpoint())); err != nil {
		return nil, err
	}
	c, err := rdmo.NewClient(helper, rdmo.ClientConfig{MaxInflight: 1}, qa)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for b := 0; b < rdmoBuckets; b++ {
		for v := 0; v < rdmoChainLen; v++ {
			if code, err := c.InsertVersion(context.Background(), inst.Chains, uint64(b), uint64(b+rdmoBuckets*(v%2)), uint64(v*10), uint64(v)); err != nil || code != rdmo.OK {
				return nil, fmt.Errorf("filling version chains: %v %v", code, err)
			}
		}
	}
	return inst, nil
}

type rdmoWorld struct {
	sides   []rdmoSide
	inst    *rdmoInstances
	target  *exec.Cmd
	closers []func()
}

func (w *rdmoWorld) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// newRDMOWorld launches the target process and connects k initiators to
// it, rdmoQPs queue pairs each.
func newRDMOWorld(transport string, k, n int) (w *rdmoWorld, err error) {
	w = &rdmoWorld{}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	var qps []dtutils.QueuePair
	var eps [][]byte
	for i := 0; i < k; i++ {
		var s rdmoSide
		if s.proc, err = dtutils.NewProcess(dtutils.DefaultProcessConfig(uint32(i + 1))); err != nil {
			return nil, err
		}
		prov, err := newLocalProvider(s.proc, transport)
		if err != nil {
			s.proc.Close()
			return nil, err
		}
		w.closers = append(w.closers, func() { prov.Close(); s.proc.Close() })
		for j := 0; j < rdmoQPs; j++ {
			q, err := prov.NewQueuePair()
			if err != nil {
				return nil, err
			}
			qps, eps = append(qps, q), append(eps, q.Endpoint())
		}
		w.sides = append(w.sides, s)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s;%d;%d", rdmoTargetEnv, transport, k, n))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launching the target: %w", err)
	}
	w.target = cmd
	w.closers = append([]func(){func() { stdin.Close(); cmd.Wait() }}, w.closers...)
	b, _ := json.Marshal(eps)
	fmt.Fprintf(stdin, "%s\n", b)
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("the target exited before answering: %w", err)
	}
	w.inst = &rdmoInstances{}
	if err := json.Unmarshal(line, w.inst); err != nil {
		return nil, err
	}
	if len(w.inst.Endpoints) != len(qps) {
		return nil, fmt.Errorf("target answered %d endpoints for %d queue pairs", len(w.inst.Endpoints), len(qps))
	}
	if err := dtutils.ConnectAll(qps, w.inst.Endpoints); err != nil {
		return nil, err
	}
	for i := range w.sides {
		s := &w.sides[i]
		q := qps[rdmoQPs*i : rdmoQPs*(i+1)]
		if s.client, err = rdmo.NewClient(s.proc, rdmo.ClientConfig{}, q[0]); err != nil {
			return nil, err
		}
		if dtutils.CanMapRemote(q[3]) {
			if s.direct, err = rdmo.NewClient(s.proc, rdmo.ClientConfig{Direct: true}, q[3]); err != nil {
				return nil, err
			}
			if err := rdmo.RegisterBuiltins(s.direct); err != nil {
				return nil, err
			}
		}
		tx, err := dtutils.NewTransmitter(q[1], s.proc.Config().MaxUnsignaled, dtutils.TransmitterConfig{})
		if err != nil {
			return nil, err
		}
		scratch, err := s.proc.Registry().NewRegion(rdmo.RDMAScratch+64, alloc.RegionConfig{Name: "rdma-scratch"})
		if err != nil {
			return nil, err
		}
		if s.rdma, err = rdmo.NewRDMA(tx, mustMemory(scratch, 0, rdmo.RDMAScratch)); err != nil {
			return nil, err
		}
		s.ref, s.refMem = q[2], mustMemory(scratch, rdmo.RDMAScratch, 8)
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

// rdmoOp runs one operation for initiator s (i counts its operations) and
// returns the code; messages come from the RDMA runner's count.
type rdmoOp func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error)

func rdmoRun(transport string, k, n int) ([]RDMOResult, error) {
	w, err := newRDMOWorld(transport, k, n)
	if err != nil {
		return nil, err
	}
	defer w.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	in := w.inst
	tr := resultTransport(transport)
	tuple := make([]byte, in.TupleBytes)
	data := make([]byte, rdmoRecord)
	kd := func(r *rand.Rand) []rdmo.KeyDelta {
		ps := make([]rdmo.KeyDelta, rdmoPairs)
		for i := range ps {
			ps[i] = rdmo.KeyDelta{Key: uint64(r.Intn(1 << 20)), Delta: 1}
		}
		return ps
	}
	refLoc, _ := in.SealLocs[0].Sub(0, 8)
	seal := func(s *rdmoSide) int { return int(s.proc.Rank()) - 1 }
	buckets := uint64(in.Buckets)
	type bench struct {
		op, impl string
		fn       rdmoOp
	}
	benches := []bench{
		{"Write", "rdma", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			if err := s.ref.Post(dtutils.WorkRequest{Op: dtutils.OpWrite, Signaled: true, Local: s.refMem, Remote: refLoc}); err != nil {
				return 0, err
			}
			var c [1]dtutils.Completion
			if _, err := s.ref.CQ().Wait(ctx, c[:]); err != nil {
				return 0, err
			}
			return rdmo.OK, c[0].Err()
		}},
		{"SlottedAppend", "rdmo", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			for {
				_, code, err := s.client.SlottedAppend(ctx, in.PageRDMO, tuple)
				if err != nil || code != rdmo.CodeContended {
					return code, err
				}
			}
		}},
		{"SlottedAppend", "rdma", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			_, code, err := s.rdma.SlottedAppend(ctx, in.PageRDMALoc, tuple)
			return code, err
		}},
		{"ConditionalGather", "rdmo", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			b := uint64(r.Intn(int(buckets)))
			_, code, err := s.client.ConditionalGather(ctx, in.Chains, b, b, 1<<40)
			return code, err
		}},
		{"ConditionalGather", "rdma", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			b := uint64(r.Intn(int(buckets)))
			_, code, err := s.rdma.ConditionalGather(ctx, in.ChainsLoc, buckets, b, b, 1<<40)
			return code, err
		}},
		{"SignaledRead", "rdmo", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			for {
				code, _, err := s.client.SignaledRead(ctx, in.Record, 16, data[:0:0])
				if err != nil || code != rdmo.CodeLocked {
					return code, err
				}
			}
		}},
		{"SignaledRead", "rdma", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			for {
				code, _, err := s.rdma.SignaledRead(ctx, in.RecordLoc, 16, nil)
				if err != nil || code != rdmo.CodeLocked {
					return code, err
				}
			}
		}},
		{"WriteAndSeal", "rdmo", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			return s.client.WriteAndSeal(ctx, in.Seals[seal(s)], uint64(i+1), data)
		}},
		{"WriteAndSeal", "rdma", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			return s.rdma.WriteAndSeal(ctx, in.SealLocs[seal(s)], uint64(i+1), data)
		}},
		{"ScatterAndAccumulate", "rdmo", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			_, code, err := s.client.ScatterAndAccumulate(ctx, in.Acc, kd(r))
			return code, err
		}},
		{"ScatterAndAccumulate", "rdma", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			_, code, err := s.rdma.ScatterAndAccumulate(ctx, in.AccLoc, uint64(in.Lookups), uint64(in.Accumulators), kd(r))
			return code, err
		}},
	}
	if w.sides[0].direct != nil {
		// The same RDMOs run by the initiator on the mapped instance; not
		// SignaledRead, whose lock an initiator's death would leave held
		// (it is not Direct and would go to the engine).
		page := in.PageDirect
		benches = append(benches, bench{"SlottedAppend", "rdmo-direct", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			for {
				_, code, err := s.direct.SlottedAppend(ctx, page, tuple)
				if err != nil || code != rdmo.CodeContended {
					return code, err
				}
			}
		}}, bench{"ConditionalGather", "rdmo-direct", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			b := uint64(r.Intn(int(buckets)))
			_, code, err := s.direct.ConditionalGather(ctx, in.Chains, b, b, 1<<40)
			return code, err
		}}, bench{"WriteAndSeal", "rdmo-direct", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			return s.direct.WriteAndSeal(ctx, in.Seals[seal(s)], uint64(i+1), data)
		}}, bench{"ScatterAndAccumulate", "rdmo-direct", func(ctx context.Context, s *rdmoSide, i int, r *rand.Rand) (rdmo.Code, error) {
			_, code, err := s.direct.ScatterAndAccumulate(ctx, in.Acc, kd(r))
			return code, err
		}})
	}
	var out []RDMOResult
	for _, b := range benches {
		var ref rdmoOp
		if k == 1 && b.op != "Write" {
			ref = benches[0].fn
		}
		// Messages: the one-sided runner counts its own; an RDMO sent to
		// the engine is 2 (request, answer), one run directly none; the
		// reference write is 2 (write, completion).
		count := func(s *rdmoSide) uint64 { return s.rdma.Messages }
		switch {
		case b.op == "Write":
			count = nil
		case b.impl == "rdmo":
			count = func(s *rdmoSide) uint64 { return 2 * s.client.Stats().Engine }
		case b.impl == "rdmo-direct":
			count = func(s *rdmoSide) uint64 { return 2 * s.direct.Stats().Engine }
		}
		res, err := rdmoMeasure(ctx, w, n, b.fn, ref, count)
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
// operation after the warm-up, from count (a side's messages so far; nil:
// 2 per operation).
//
// With ref (one initiator only), each operation is followed by a reference
// write, timed apart: the operation and the write it is compared with then
// see the same conditions, which drift on a shared machine between two
// measurements minutes apart. The rate is then operations over the time
// spent in them.
func rdmoMeasure(ctx context.Context, w *rdmoWorld, n int, fn, ref rdmoOp, count func(*rdmoSide) uint64) (RDMOResult, error) {
	warm := n / 10
	lat := make([][]float64, len(w.sides))
	var refLat []float64
	counted := count != nil
	if !counted {
		count = func(*rdmoSide) uint64 { return 0 }
	}
	msgs0 := make([]uint64, len(w.sides))
	msgs1 := make([]uint64, len(w.sides))
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
					msgs0[si] = count(s)
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
				if ref != nil {
					t1 := time.Now()
					if _, err := ref(ctx, s, i, r); err != nil {
						errs[si] = err
						return
					}
					if i >= warm {
						refLat = append(refLat, float64(time.Since(t1).Nanoseconds()))
					}
				}
			}
			ends[si] = time.Now()
			msgs1[si] = count(s)
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
		msgs += msgs1[i] - msgs0[i]
		if begins[i].Before(first) {
			first = begins[i]
		}
		if ends[i].After(last) {
			last = ends[i]
		}
	}
	ops := len(all)
	perOp := float64(msgs) / float64(ops)
	if !counted {
		perOp = 2
	}
	res := RDMOResult{MessagesPerOp: perOp, P50ns: percentile(all, 50), P99ns: percentile(all, 99), OpsPerS: float64(ops) / last.Sub(first).Seconds(), N: ops}
	if ref != nil {
		busy := 0.0
		for _, v := range all {
			busy += v
		}
		res.OpsPerS, res.WriteP50ns = float64(ops)/(busy/1e9), percentile(refLat, 50)
	}
	return res, nil
}
