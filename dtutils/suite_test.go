package dtutils

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

// side is one end of a connected pair of queue pairs under test.
type side struct {
	proc *Process
	prov Provider
	qp   QueuePair
	buf  *alloc.Region // registered scratch memory
}

// transports lists every provider; the same suite runs over each.
var transports = []struct {
	name string
	make func(t testing.TB, pa, pb *Process) (Provider, Provider)
}{
	{"loop", func(t testing.TB, pa, pb *Process) (Provider, Provider) {
		f := NewLoopFabric()
		return f.NewProvider(pa), f.NewProvider(pb)
	}},
	{"tcp", func(t testing.TB, pa, pb *Process) (Provider, Provider) {
		cfg := DefaultTCPConfig()
		cfg.Logger = quietLog
		a, err := NewTCP(pa, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewTCP(pb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}},
	{"shm", shmPair(SHMConfig{})},
}

// shmPair makes the shm providers of two processes with cfg (and a quiet
// logger).
func shmPair(cfg SHMConfig) func(testing.TB, *Process, *Process) (Provider, Provider) {
	cfg.Logger = quietLog
	return func(t testing.TB, pa, pb *Process) (Provider, Provider) {
		a, err := NewSHM(pa, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewSHM(pb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
}

// quietLog keeps expected connection events out of test and benchmark output.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func newProcess(t testing.TB, rank uint32, mut func(*ProcessConfig)) *Process {
	t.Helper()
	cfg := DefaultProcessConfig(rank)
	cfg.ReceiveSlots = 64
	if mut != nil {
		mut(&cfg)
	}
	p, err := NewProcess(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// connectPair builds two processes (ranks 0 and 1) joined by one queue pair.
func connectPair(t testing.TB, mk func(testing.TB, *Process, *Process) (Provider, Provider), mut func(*ProcessConfig)) (a, b side) {
	t.Helper()
	a.proc, b.proc = newProcess(t, 0, mut), newProcess(t, 1, mut)
	a.prov, b.prov = mk(t, a.proc, b.proc)
	t.Cleanup(func() { a.prov.Close(); b.prov.Close() })
	var err error
	if a.qp, b.qp, err = ConnectPair(a.prov, b.prov); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*side{&a, &b} {
		if s.buf, err = s.proc.Registry().NewRegion(4<<20, alloc.RegionConfig{Name: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

func (s side) mem(t testing.TB, off, n int) alloc.Memory {
	t.Helper()
	m, err := s.buf.Memory(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (s side) loc(t testing.TB, off, n int) alloc.Locator {
	t.Helper()
	l, err := s.buf.Locator(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// wait returns the next completion of cq, failing after 10 s.
func wait(t testing.TB, cq CompletionQueue) Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c [1]Completion
	if _, err := cq.Wait(ctx, c[:]); err != nil {
		t.Fatalf("no completion: %v", err)
	}
	return c[0]
}

func post(t testing.TB, qp QueuePair, wr WorkRequest) Completion {
	t.Helper()
	wr.Signaled = true
	if err := qp.Post(wr); err != nil {
		t.Fatalf("post %v: %v", wr.Op, err)
	}
	return wait(t, qp.CQ())
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*31 + seed)
	}
}

func TestTransportSuite(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { runSuite(t, tr.make) })
	}
	// tcp with Progress on its readiness path from the first connection
	// (a process reaches it from two): the same suite.
	t.Run("tcp-ready", func(t *testing.T) {
		runSuite(t, func(t testing.TB, pa, pb *Process) (Provider, Provider) {
			pa.progress.watchFrom, pb.progress.watchFrom = 1, 1
			return transports[1].make(t, pa, pb)
		})
	})
}

func runSuite(t *testing.T, mk func(testing.TB, *Process, *Process) (Provider, Provider)) {
	t.Run("WriteRead", func(t *testing.T) {
		a, b := connectPair(t, mk, nil)
		for _, n := range []int{0, 1, 8, 13, 64, 4096, 1 << 20} {
			src := a.mem(t, 0, n)
			fill(src.Bytes(), n)
			c := post(t, a.qp, WorkRequest{Op: OpWrite, WRID: uint64(n), Local: src, Remote: b.loc(t, 1<<20, n)})
			if c.Status != StatusSuccess || c.WRID != uint64(n) || c.Bytes != n || c.Op != OpWrite {
				t.Fatalf("write %d: %+v", n, c)
			}
			if !bytes.Equal(b.buf.Bytes()[1<<20:1<<20+n], src.Bytes()) {
				t.Fatalf("write of %d bytes: target differs", n)
			}
			dst := a.mem(t, 2<<20, n)
			c = post(t, a.qp, WorkRequest{Op: OpRead, WRID: 7, Local: dst, Remote: b.loc(t, 1<<20, n)})
			if c.Status != StatusSuccess || c.Bytes != n || !bytes.Equal(dst.Bytes(), src.Bytes()) {
				t.Fatalf("read %d: %+v", n, c)
			}
		}
	})
	t.Run("UnsignaledAndOrder", func(t *testing.T) {
		a, b := connectPair(t, mk, nil)
		// Many unsignaled writes of increasing values to one word, then a
		// signaled read of it: in-order completion means it reads the last.
		src := a.mem(t, 0, 8*200)
		for i := 0; i < 200; i++ {
			m, _ := src.Slice(8*i, 8)
			binary.LittleEndian.PutUint64(m.Bytes(), uint64(i+1))
			if err := a.qp.Post(WorkRequest{Op: OpWrite, Local: m, Remote: b.loc(t, 64, 8)}); err != nil {
				t.Fatal(err)
			}
		}
		var none [4]Completion
		if n := a.qp.CQ().Poll(none[:]); n != 0 {
			t.Fatalf("unsignaled successes produced %d completions: %+v", n, none[0])
		}
		dst := a.mem(t, 1<<20, 8)
		c := post(t, a.qp, WorkRequest{Op: OpRead, Local: dst, Remote: b.loc(t, 64, 8)})
		if got := binary.LittleEndian.Uint64(dst.Bytes()); c.Status != StatusSuccess || got != 200 {
			t.Fatalf("read after 200 writes got %d (%+v)", got, c)
		}
		if a.qp.Outstanding() != 0 {
			t.Errorf("signaled completion did not retire unsignaled ops: %d outstanding", a.qp.Outstanding())
		}
	})
	t.Run("Atomics", func(t *testing.T) {
		a, b := connectPair(t, mk, nil)
		binary.LittleEndian.PutUint64(b.buf.Bytes()[128:], 40)
		old := a.mem(t, 0, 8)
		c := post(t, a.qp, WorkRequest{Op: OpFetchAdd, Local: old, Remote: b.loc(t, 128, 8), Add: 2})
		if c.Status != StatusSuccess || binary.LittleEndian.Uint64(old.Bytes()) != 40 || binary.LittleEndian.Uint64(b.buf.Bytes()[128:]) != 42 {
			t.Fatalf("fetch-add: %+v old %d now %d", c, binary.LittleEndian.Uint64(old.Bytes()), binary.LittleEndian.Uint64(b.buf.Bytes()[128:]))
		}
		post(t, a.qp, WorkRequest{Op: OpCompareSwap, Local: old, Remote: b.loc(t, 128, 8), Compare: 41, Swap: 7})
		if binary.LittleEndian.Uint64(old.Bytes()) != 42 || binary.LittleEndian.Uint64(b.buf.Bytes()[128:]) != 42 {
			t.Fatal("compare-swap with a wrong compare changed the word")
		}
		post(t, a.qp, WorkRequest{Op: OpCompareSwap, Local: old, Remote: b.loc(t, 128, 8), Compare: 42, Swap: 7})
		if binary.LittleEndian.Uint64(b.buf.Bytes()[128:]) != 7 {
			t.Fatal("compare-swap did not swap")
		}
		c = post(t, a.qp, WorkRequest{Op: OpFetchAdd, Local: old, Remote: b.loc(t, 129, 8), Add: 1})
		if c.Status != StatusRemoteAccess {
			t.Fatalf("misaligned atomic: %+v", c)
		}
		if err := a.qp.Post(WorkRequest{Op: OpFetchAdd, Local: a.mem(t, 0, 4), Remote: b.loc(t, 128, 8)}); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("4-byte atomic result buffer: %v", err)
		}
	})
	t.Run("SendRecv", func(t *testing.T) {
		a, b := connectPair(t, mk, nil)
		msg := a.mem(t, 0, 100)
		fill(msg.Bytes(), 3)
		c := post(t, a.qp, WorkRequest{Op: OpSend, WRID: 1, Local: msg, Imm: 9})
		if c.Status != StatusReceiverNotReady {
			t.Fatalf("send with no receive posted: %+v", c)
		}
		for i := 0; i < 3; i++ {
			if err := b.proc.PostRecv(b.mem(t, 4096*i, 256), uint64(100+i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 2; i++ {
			if c := post(t, a.qp, WorkRequest{Op: OpSend, WRID: 2, Local: msg, Imm: uint32(9 + i)}); c.Status != StatusSuccess || c.Bytes != 100 {
				t.Fatalf("send: %+v", c)
			}
		}
		for i := 0; i < 2; i++ {
			r := wait(t, b.proc.RecvCQ())
			if r.Op != OpRecv || r.Status != StatusSuccess || r.WRID != uint64(100+i) || r.Bytes != 100 || r.Imm != uint32(9+i) || r.Src != 0 {
				t.Fatalf("receive %d: %+v", i, r)
			}
			if !bytes.Equal(b.buf.Bytes()[4096*i:4096*i+100], msg.Bytes()) {
				t.Fatal("received bytes differ")
			}
		}
		// Too large for the posted buffer: both sides learn it.
		big := a.mem(t, 0, 300)
		if c := post(t, a.qp, WorkRequest{Op: OpSend, Local: big}); c.Status != StatusLength {
			t.Fatalf("oversize send: %+v", c)
		}
		if r := wait(t, b.proc.RecvCQ()); r.Status != StatusLength || r.WRID != 102 {
			t.Fatalf("receiver of oversize send: %+v", r)
		}
		// WriteImm: data lands at the target and consumes a receive.
		b.proc.PostRecv(b.mem(t, 0, 8), 555)
		src := a.mem(t, 512, 32)
		fill(src.Bytes(), 5)
		if c := post(t, a.qp, WorkRequest{Op: OpWriteImm, Local: src, Remote: b.loc(t, 8192, 32), Imm: 77}); c.Status != StatusSuccess {
			t.Fatalf("write-imm: %+v", c)
		}
		r := wait(t, b.proc.RecvCQ())
		if r.Op != OpRecvImm || r.Imm != 77 || r.WRID != 555 || r.Bytes != 32 || !bytes.Equal(b.buf.Bytes()[8192:8224], src.Bytes()) {
			t.Fatalf("write-imm receive: %+v", r)
		}
	})
	t.Run("LargeSendAndWriteImm", func(t *testing.T) {
		// Beyond a connection's first read buffer (tcp's 256 KiB): a send
		// and a WriteImm, applied once whole, arrive intact, and small
		// messages after them still do.
		a, b := connectPair(t, mk, nil)
		for i, n := range []int{1 << 20, 600 << 10, 8} {
			if err := b.proc.PostRecv(b.mem(t, 0, 1<<20), uint64(700+i)); err != nil {
				t.Fatal(err)
			}
			src := a.mem(t, 1<<20, n)
			fill(src.Bytes(), n)
			op, want := OpSend, OpRecv
			if i == 1 {
				op, want = OpWriteImm, OpRecvImm
			}
			if c := post(t, a.qp, WorkRequest{Op: op, Local: src, Remote: b.loc(t, 0, n), Imm: uint32(i)}); c.Status != StatusSuccess {
				t.Fatalf("%v of %d bytes: %+v", op, n, c)
			}
			r := wait(t, b.proc.RecvCQ())
			if r.Op != want || r.Status != StatusSuccess || r.WRID != uint64(700+i) || r.Bytes != n || r.Imm != uint32(i) {
				t.Fatalf("receive of the %d-byte %v: %+v", n, op, r)
			}
			if !bytes.Equal(b.buf.Bytes()[:n], src.Bytes()) {
				t.Fatalf("the %d-byte %v: target differs", n, op)
			}
		}
	})
	t.Run("SendInlineAndClaims", func(t *testing.T) {
		// Sends of up to recvInlineMax bytes travel inside the completion
		// and are copied into the receive the target takes when it polls;
		// longer ones take a receive at the sender. One count of claims
		// covers both: a send beyond the posted receives is refused at
		// once, and messages arrive in the order sent, whatever the path.
		a, b := connectPair(t, mk, nil)
		sizes := []int{8, recvInlineMax, recvInlineMax + 1, 40, 400, 1}
		for i := range sizes {
			if err := b.proc.PostRecv(b.mem(t, 1024*i, 512), uint64(200+i)); err != nil {
				t.Fatal(err)
			}
		}
		for i, n := range sizes {
			m := a.mem(t, 1024*i, n)
			fill(m.Bytes(), 10+i)
			if c := post(t, a.qp, WorkRequest{Op: OpSend, Local: m, Imm: uint32(i)}); c.Status != StatusSuccess || c.Bytes != n {
				t.Fatalf("send %d (%d bytes): %+v", i, n, c)
			}
		}
		if c := post(t, a.qp, WorkRequest{Op: OpSend, Local: a.mem(t, 0, 8)}); c.Status != StatusReceiverNotReady {
			t.Fatalf("send with every receive claimed: %+v", c)
		}
		used := map[uint64]bool{}
		for i, n := range sizes {
			r := wait(t, b.proc.RecvCQ())
			j := int(r.WRID) - 200
			if r.Status != StatusSuccess || r.Imm != uint32(i) || r.Bytes != n || j < 0 || j >= len(sizes) || used[r.WRID] {
				t.Fatalf("receive %d: %+v", i, r)
			}
			used[r.WRID] = true
			want := make([]byte, n)
			fill(want, 10+i)
			if !bytes.Equal(b.buf.Bytes()[1024*j:1024*j+n], want) {
				t.Fatalf("receive %d: bytes differ", i)
			}
		}
		var cs [4]Completion
		if n := b.proc.RecvCQ().Poll(cs[:]); n != 0 {
			t.Fatalf("the refused send arrived: %+v", cs[:n])
		}
		// A shorter receive than any before: a message that may not fit
		// takes the receive at the sender, so both sides learn it.
		if err := b.proc.PostRecv(b.mem(t, 0, 16), 300); err != nil {
			t.Fatal(err)
		}
		if c := post(t, a.qp, WorkRequest{Op: OpSend, Local: a.mem(t, 0, 40)}); c.Status != StatusLength {
			t.Fatalf("40-byte send into a 16-byte receive: %+v", c)
		}
		if r := wait(t, b.proc.RecvCQ()); r.Status != StatusLength || r.WRID != 300 {
			t.Fatalf("receiver of the oversize send: %+v", r)
		}
		if b.proc.strays.Load() != 0 {
			t.Fatalf("%d inline sends found no receive", b.proc.strays.Load())
		}
	})
	t.Run("SendInPlace", func(t *testing.T) {
		// PollRecvInPlace hands over inline sends from their completions
		// and leaves the receive they claimed posted: one receive serves
		// any number of them, and then still takes a long send.
		a, b := connectPair(t, mk, nil)
		if err := b.proc.PostRecv(b.mem(t, 4096, 512), 7); err != nil {
			t.Fatal(err)
		}
		var cs [4]Completion
		buf := make([]byte, len(cs)*InlineMax)
		for i, n := range []int{8, InlineMax, 40, 1, InlineMax + 1} {
			m := a.mem(t, 1024*(i%4), n)
			fill(m.Bytes(), 20+i)
			if c := post(t, a.qp, WorkRequest{Op: OpSend, Local: m, Imm: uint32(i)}); c.Status != StatusSuccess {
				t.Fatalf("send %d (%d bytes): %+v", i, n, c)
			}
			c, msg := waitInPlace(t, b.proc, cs[:], buf)
			inPlace := n <= InlineMax
			if c.Status != StatusSuccess || c.Bytes != n || c.Imm != uint32(i) || c.Src != a.proc.Rank() || c.InPlace != inPlace {
				t.Fatalf("receive %d (%d bytes): %+v", i, n, c)
			}
			if !inPlace {
				if c.WRID != 7 {
					t.Fatalf("long send completed receive %d, want 7", c.WRID)
				}
				msg = b.buf.Bytes()[4096 : 4096+n]
			} else if c.WRID != 0 {
				t.Fatalf("in-place receive %d has wrid %d", i, c.WRID)
			}
			if !bytes.Equal(msg, m.Bytes()) {
				t.Fatalf("receive %d (%d bytes): bytes differ", i, n)
			}
		}
		// The long send took the only receive.
		if c := post(t, a.qp, WorkRequest{Op: OpSend, Local: a.mem(t, 0, 8)}); c.Status != StatusReceiverNotReady {
			t.Fatalf("send with no receive posted: %+v", c)
		}
	})
	t.Run("SendHammer", func(t *testing.T) { sendHammer(t, mk, false) })
	t.Run("SendHammerInPlace", func(t *testing.T) { sendHammer(t, mk, true) })
	t.Run("RemoteAccessChecks", func(t *testing.T) {
		a, b := connectPair(t, mk, nil)
		snapshot := append([]byte(nil), b.buf.Bytes()...)
		src := a.mem(t, 0, 64)
		fill(src.Bytes(), 1)
		good := b.loc(t, 0, 64)
		cases := map[string]alloc.Locator{}
		l := good
		l.Key ^= 0x10
		cases["wrong key"] = l
		l = good
		l.Offset = uint64(b.buf.Size()) - 32
		cases["past the end"] = l
		l = good
		l.Region = 9999
		cases["unknown region"] = l
		l = good
		l.Process = 5
		cases["other process"] = l
		l = good
		l.Offset = 1<<64 - 16
		cases["offset overflow"] = l
		for name, loc := range cases {
			for _, op := range []Op{OpWrite, OpRead} {
				c := post(t, a.qp, WorkRequest{Op: op, Local: src, Remote: loc})
				if c.Status != StatusRemoteAccess {
					t.Errorf("%s %v: %+v", name, op, c)
				}
			}
		}
		// Unsignaled failures still complete, as in verbs.
		if err := a.qp.Post(WorkRequest{Op: OpWrite, WRID: 99, Local: src, Remote: cases["wrong key"]}); err != nil {
			t.Fatal(err)
		}
		if c := wait(t, a.qp.CQ()); c.Status != StatusRemoteAccess || c.WRID != 99 {
			t.Errorf("unsignaled failure: %+v", c)
		}
		if !bytes.Equal(snapshot, b.buf.Bytes()) {
			t.Fatal("refused operations changed target memory")
		}
	})
	t.Run("MaxUnsignaled", func(t *testing.T) {
		a, b := connectPair(t, mk, func(c *ProcessConfig) { c.MaxUnsignaled = 16 })
		src := a.mem(t, 0, 8)
		for i := 0; i < 16; i++ {
			if err := a.qp.Post(WorkRequest{Op: OpWrite, Local: src, Remote: b.loc(t, 0, 8)}); err != nil {
				t.Fatalf("unsignaled %d: %v", i, err)
			}
		}
		if err := a.qp.Post(WorkRequest{Op: OpWrite, Local: src, Remote: b.loc(t, 0, 8)}); !errors.Is(err, ErrUnsignaledOverflow) {
			t.Fatalf("17th unsignaled op: %v", err)
		}
		post(t, a.qp, WorkRequest{Op: OpNop})
		if err := a.qp.Post(WorkRequest{Op: OpWrite, Local: src, Remote: b.loc(t, 0, 8)}); err != nil {
			t.Fatalf("after a polled signaled completion: %v", err)
		}
	})
	t.Run("BadRequests", func(t *testing.T) {
		a, b := connectPair(t, mk, nil)
		for name, wr := range map[string]WorkRequest{
			"unknown op":      {Op: 200},
			"recv op":         {Op: OpRecv},
			"length mismatch": {Op: OpWrite, Local: a.mem(t, 0, 10), Remote: b.loc(t, 0, 12)},
		} {
			if err := a.qp.Post(wr); !errors.Is(err, ErrBadRequest) {
				t.Errorf("%s: %v", name, err)
			}
		}
		q, _ := a.prov.NewQueuePair()
		if err := q.Post(WorkRequest{Op: OpNop}); !errors.Is(err, ErrNotConnected) {
			t.Errorf("unconnected: %v", err)
		}
		for _, bad := range [][]byte{nil, {1, 2, 3}, append([]byte{99}, a.qp.Endpoint()[1:]...)} {
			if err := q.Connect(bad); !errors.Is(err, ErrBadEndpoint) {
				t.Errorf("bad endpoint %v: %v", bad, err)
			}
		}
		if err := b.proc.PostRecv(alloc.Memory{}, 1); !errors.Is(err, ErrBadRequest) {
			t.Errorf("empty receive buffer: %v", err)
		}
		if err := b.proc.PostRecv(a.mem(t, 0, 8), 1); !errors.Is(err, ErrBadRequest) {
			t.Errorf("receive buffer of another process: %v", err)
		}
		for i := 0; i < 64; i++ {
			if err := b.proc.PostRecv(b.mem(t, 0, 8), 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.proc.PostRecv(b.mem(t, 0, 8), 1); !errors.Is(err, ErrQueueFull) {
			t.Errorf("65th receive in 64 slots: %v", err)
		}
	})
	t.Run("CloseWithWritesInFlight", func(t *testing.T) {
		// Closing the providers, then releasing the memory at once, while
		// the target's engine still applies unsignaled writes: the
		// provider's Close waits for it (tcp once faulted the process,
		// writing into memory the target's Close had unmapped).
		for i := 0; i < 20; i++ {
			w := newWritePair(t, mk, 4<<20, nil)
			if w.a.Transport() == "ofi" {
				// Measured with libfabric 1.20 (tcp;ofi_rxm), 1 to 5 runs in
				// 20: closing an endpoint while its peer's messages still
				// arrive faults in a thread of libfabric's own, whatever the
				// order of the closes (the domain now closes cleanly) and
				// with a drain before them. The frame engine this checks is
				// tcp's, run above over tcp.
				w.b.Close()
				w.a.Close()
				t.Skip("libfabric 1.20 tcp;ofi_rxm faults when an endpoint closes under incoming traffic (see the comment)")
			}
			for k := 0; k < 4; k++ {
				if err := w.qa.Post(WorkRequest{Op: OpWrite, Local: w.src, Remote: w.dst}); err != nil {
					t.Fatal(err)
				}
			}
			w.b.Close()
			w.pb.Close()
			w.a.Close()
			w.pa.Close()
		}
	})
	t.Run("Close", func(t *testing.T) {
		a, b := connectPair(t, mk, nil)
		src := a.mem(t, 0, 8)
		post(t, a.qp, WorkRequest{Op: OpWrite, Local: src, Remote: b.loc(t, 0, 8)})
		if err := b.qp.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.qp.Post(WorkRequest{Op: OpNop}); !errors.Is(err, ErrClosed) {
			t.Errorf("post after close: %v", err)
		}
		// The peer sees the connection lost, as an error or a completion,
		// within a bounded time and without hanging.
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := a.qp.Post(WorkRequest{Op: OpWrite, Signaled: true, Local: src, Remote: b.loc(t, 0, 8)})
			if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrClosed) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if c := wait(t, a.qp.CQ()); c.Status == StatusConnectionLost {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("peer close never noticed")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Closing again does nothing, on every transport alike.
		if err := b.qp.Close(); err != nil {
			t.Errorf("a second queue pair Close: %v", err)
		}
		if err := b.prov.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.prov.Close(); err != nil {
			t.Errorf("a second provider Close: %v", err)
		}
	})
}

func TestEndpointRoundTrip(t *testing.T) {
	e := endpoint{transport: transportTCP, rank: 3, token: 99, srqRegion: 4, srqKey: 5, addr: "127.0.0.1:999"}
	got, err := parseEndpoint(e.marshal(), transportTCP)
	if err != nil || got != e {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := parseEndpoint(e.marshal(), transportSHM); !errors.Is(err, ErrBadEndpoint) {
		t.Fatal(fmt.Sprint("wrong transport accepted: ", err))
	}
}

// writePair is two processes with a connected queue pair and a region of
// the same size in each, for writes from a's to b's.
type writePair struct {
	pa, pb *Process
	a, b   Provider
	qa, qb QueuePair
	src    alloc.Memory
	dst    alloc.Locator
}

// newWritePair builds a writePair over mk's providers; before, when set,
// runs on both queue pairs before they connect (their engines start).
func newWritePair(t testing.TB, mk func(testing.TB, *Process, *Process) (Provider, Provider), size int, before func(qa, qb QueuePair)) writePair {
	t.Helper()
	var w writePair
	w.pa, w.pb = newProcess(t, 0, nil), newProcess(t, 1, nil)
	w.a, w.b = mk(t, w.pa, w.pb)
	var err error
	if w.qa, err = w.a.NewQueuePair(); err != nil {
		t.Fatal(err)
	}
	if w.qb, err = w.b.NewQueuePair(); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(w.qa, w.qb)
	}
	if err := ConnectAll([]QueuePair{w.qa, w.qb}, [][]byte{w.qb.Endpoint(), w.qa.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	ra, err := w.pa.Registry().NewRegion(size, alloc.RegionConfig{Name: "src"})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := w.pb.Registry().NewRegion(size, alloc.RegionConfig{Name: "dst"})
	if err != nil {
		t.Fatal(err)
	}
	w.src, _ = ra.Memory(0, size)
	w.dst, _ = rb.Locator(0, size)
	return w
}

// sendHammer: goroutines send inline and longer messages through one
// Transmitter while the target reposts its few receives (each sender holds
// a credit per message in flight, as dsfabric does: a refused send fails a
// tcp queue pair): each message arrives once and each goroutine's in order.
// inPlace: the target polls with PollRecvInPlace and reposts only the
// receives that long sends filled.
func sendHammer(t *testing.T, mk func(testing.TB, *Process, *Process) (Provider, Provider), inPlace bool) {
	a, b := connectPair(t, mk, nil)
	const senders, each, posted, bufBytes = 4, 400, 16, 512
	tx, err := NewTransmitter(a.qp, a.proc.Config().MaxUnsignaled, TransmitterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	credits := make(chan struct{}, posted)
	for i := 0; i < posted; i++ {
		if err := b.proc.PostRecv(b.mem(t, bufBytes*i, bufBytes), uint64(i)); err != nil {
			t.Fatal(err)
		}
		credits <- struct{}{}
	}
	msgs := make([][]alloc.Memory, senders)
	for g := range msgs {
		for k := 0; k < each; k++ {
			n := 8 + (k%3)*200 // 8, 208, 408 (over the inline limit)
			m := a.mem(t, bufBytes*(g*each+k), n)
			binary.LittleEndian.PutUint32(m.Bytes(), uint32(g))
			binary.LittleEndian.PutUint32(m.Bytes()[4:], uint32(k))
			msgs[g] = append(msgs[g], m)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, senders)
	for g := 0; g < senders; g++ {
		go func() {
			for k, m := range msgs[g] {
				select {
				case <-credits:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
				if err := tx.Send(m, uint32(m.Len())); err != nil {
					errs <- fmt.Errorf("sender %d, message %d: %w", g, k, err)
					return
				}
			}
			errs <- tx.Flush(ctx)
		}()
	}
	next := make([]int, senders)
	var cs [8]Completion
	inl := make([]byte, len(cs)*InlineMax)
	kept := 0
	for got := 0; got < senders*each; {
		var n int
		var err error
		if inPlace {
			n, err = pollInPlace(ctx, b.proc, cs[:], inl)
		} else {
			n, err = b.proc.RecvCQ().Wait(ctx, cs[:])
		}
		if err != nil {
			t.Fatalf("after %d messages: %v", got, err)
		}
		for i, c := range cs[:n] {
			msg := b.buf.Bytes()[bufBytes*int(c.WRID):]
			if c.InPlace {
				msg = inl[i*InlineMax:][:c.Bytes]
				kept++
			}
			g, k := int(binary.LittleEndian.Uint32(msg)), int(binary.LittleEndian.Uint32(msg[4:]))
			if c.Status != StatusSuccess || c.Bytes != int(c.Imm) || c.InPlace != (inPlace && c.Bytes <= InlineMax) || g >= senders || k != next[g] {
				t.Fatalf("message %d: %+v, sender %d message %d", got, c, g, k)
			}
			next[g]++
			if !c.InPlace {
				if err := b.proc.PostRecv(b.mem(t, bufBytes*int(c.WRID), bufBytes), c.WRID); err != nil {
					t.Fatal(err)
				}
			}
			credits <- struct{}{}
		}
		got += n
	}
	if want := senders * (each - each/3); inPlace && kept != want {
		t.Fatalf("%d messages delivered in place, want the %d inline ones (k %% 3 < 2)", kept, want)
	}
	for g := 0; g < senders; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := b.proc.RecvCQ().Poll(cs[:]); n != 0 || b.proc.strays.Load() != 0 {
		t.Fatalf("%d more completions, %d strays", n, b.proc.strays.Load())
	}
	// Every receive is posted again and unclaimed: none lost, none
	// counted twice.
	if r, c := b.proc.cnt.ready.Load(), b.proc.cnt.claimed.Load(); r-c != posted {
		t.Fatalf("ready %d − claimed %d = %d, want the %d receives posted", r, c, r-c, posted)
	}
}

// pollInPlace waits for receive completions through PollRecvInPlace,
// driving the progress engines (tcp) while there are none.
func pollInPlace(ctx context.Context, p *Process, cs []Completion, buf []byte) (int, error) {
	var b Backoff
	for {
		if n := p.PollRecvInPlace(cs, buf); n > 0 {
			return n, nil
		}
		if p.Progress() > 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		b.Wait()
	}
}

// waitInPlace returns the next receive completion through
// PollRecvInPlace, and its message when it came in place.
func waitInPlace(t testing.TB, p *Process, cs []Completion, buf []byte) (Completion, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := pollInPlace(ctx, p, cs[:1], buf)
	if err != nil || n != 1 {
		t.Fatalf("no receive: %v", err)
	}
	return cs[0], buf[:cs[0].Bytes]
}
