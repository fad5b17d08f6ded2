package rdmo

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testTransport is one way to run the suite: a provider and whether the
// engine and clients use direct mode.
type testTransport struct {
	name   string
	make   func(f *dtutils.LoopFabric, proc *dtutils.Process) (dtutils.Provider, error)
	direct bool
}

func loopProvider(f *dtutils.LoopFabric, proc *dtutils.Process) (dtutils.Provider, error) {
	return f.NewProvider(proc), nil
}

func shmProvider(_ *dtutils.LoopFabric, proc *dtutils.Process) (dtutils.Provider, error) {
	return dtutils.NewSHM(proc, dtutils.SHMConfig{Logger: quietLog})
}

// testTransports lists the ways the suite runs; builds with -tags ofi add
// "ofi" (transports_ofi_test.go). The -direct ones run Direct methods in
// the initiator (and the others, LockedRecord's, at the engine).
var testTransports = []testTransport{
	{name: "loop", make: loopProvider},
	{name: "shm", make: shmProvider},
	{name: "tcp", make: func(_ *dtutils.LoopFabric, proc *dtutils.Process) (dtutils.Provider, error) {
		cfg := dtutils.DefaultTCPConfig()
		cfg.Logger = quietLog
		return dtutils.NewTCP(proc, cfg)
	}},
	{name: "loop-direct", make: loopProvider, direct: true},
	{name: "shm-direct", make: shmProvider, direct: true},
}

// world is one target process (rank 0) serving RDMOs and initiator
// processes (ranks 1..), each with a Client and an RDMA runner on queue
// pairs of their own.
type world struct {
	target    *dtutils.Process
	tprov     dtutils.Provider
	tqps      []dtutils.QueuePair // the target's ends of the clients' queue pairs
	engine    *Engine
	mem       *alloc.Region // the target's instance memory
	initiator []initiator
}

type initiator struct {
	proc   *dtutils.Process
	prov   dtutils.Provider
	client *Client
	rdma   *RDMA
}

type worldConfig struct {
	initiators int
	procCfg    func(*dtutils.ProcessConfig)
	noEngine   bool
}

func newWorld(t testing.TB, tr testTransport, wc worldConfig) *world {
	t.Helper()
	f := dtutils.NewLoopFabric()
	newProc := func(rank uint32) (*dtutils.Process, dtutils.Provider) {
		cfg := dtutils.DefaultProcessConfig(rank)
		cfg.ReceiveSlots = 64
		if wc.procCfg != nil {
			wc.procCfg(&cfg)
		}
		p, err := dtutils.NewProcess(cfg)
		if err != nil {
			t.Fatal(err)
		}
		prov, err := tr.make(f, p)
		if err != nil {
			p.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { prov.Close(); p.Close() })
		return p, prov
	}
	w := &world{}
	w.target, w.tprov = newProc(0)
	var err error
	if w.mem, err = w.target.Registry().NewRegion(8<<20, alloc.RegionConfig{Name: "instances"}); err != nil {
		t.Fatal(err)
	}
	if !wc.noEngine {
		if w.engine, err = NewEngine(w.target, EngineConfig{Direct: tr.direct}); err != nil {
			t.Fatal(err)
		}
		if err := RegisterBuiltins(w.engine); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < max(wc.initiators, 1); i++ {
		var in initiator
		in.proc, in.prov = newProc(uint32(i + 1))
		cq, tq := connect(t, in.prov, w.tprov)
		w.tqps = append(w.tqps, tq)
		if in.client, err = NewClient(in.proc, ClientConfig{Direct: tr.direct}, cq); err != nil {
			t.Fatal(err)
		}
		if tr.direct {
			if err := RegisterBuiltins(in.client); err != nil {
				t.Fatal(err)
			}
		}
		rq, _ := connect(t, in.prov, w.tprov)
		tx, err := dtutils.NewTransmitter(rq, in.proc.Config().MaxUnsignaled, dtutils.TransmitterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		scratch, err := in.proc.Registry().NewRegion(RDMAScratch, alloc.RegionConfig{Name: "rdma-scratch"})
		if err != nil {
			t.Fatal(err)
		}
		sm, _ := scratch.Memory(0, RDMAScratch)
		if in.rdma, err = NewRDMA(tx, sm); err != nil {
			t.Fatal(err)
		}
		w.initiator = append(w.initiator, in)
	}
	return w
}

// connect joins a new queue pair of a to one of b.
func connect(t testing.TB, a, b dtutils.Provider) (dtutils.QueuePair, dtutils.QueuePair) {
	t.Helper()
	qa, qb, err := dtutils.ConnectPair(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return qa, qb
}

// instance carves n bytes at off out of the target's instance memory.
func (w *world) instance(t testing.TB, off, n int) (alloc.Memory, alloc.Locator) {
	t.Helper()
	m, err := w.mem.Memory(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return m, m.Locator()
}

func (w *world) create(t testing.TB, typ string, m alloc.Memory) Capability {
	t.Helper()
	c, err := w.engine.Create(typ, m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func forTransports(t *testing.T, f func(t *testing.T, tr testTransport)) {
	for _, tr := range testTransports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr) })
	}
}

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }

// checkDirect asserts where the clients' RDMOs ran: some in the initiators
// when want, none otherwise.
func (w *world) checkDirect(t testing.TB, want bool) {
	t.Helper()
	for i, in := range w.initiator {
		if s := in.client.Stats(); (s.Direct > 0) != want {
			t.Errorf("initiator %d ran %d RDMOs itself and sent %d to the engine; want direct runs: %v", i, s.Direct, s.Engine, want)
		}
	}
}
