package dsfabric

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/internal/jobtest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	jobtest.Main(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// job runs body in every rank of a self-launched job (SPMD): the test
// binary re-executes itself as the other ranks, which run this same test.
func job(t *testing.T, procs, threads int, transport string, reg func(*Handlers), body func(*testing.T, *Fabric)) {
	jobWith(t, Config{Procs: procs, ThreadsPerProcess: threads, Transport: transport}, reg, body)
}

// jobWith is job with more of the configuration set (Handlers, Args,
// BootstrapTimeout and Logger are the test's).
func jobWith(t *testing.T, cfg Config, reg func(*Handlers), body func(*testing.T, *Fabric)) {
	h := NewHandlers()
	reg(h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg.Handlers, cfg.Args, cfg.BootstrapTimeout, cfg.Logger = h, jobtest.RunArgs(t), 30*time.Second, quiet
	f, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	body(t, f)
	if err := f.Close(); err != nil {
		t.Fatalf("rank %d: close: %v", f.Rank(), err)
	}
}

// Per-process state the handlers of TestPrimitives update.
type counters struct {
	calls, service, bufOK, bufBad, bcast, bcastBuf [16]atomic.Int64
}

func pattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*13 + seed)
	}
}

func hasPattern(b []byte, seed int) bool {
	for i := range b {
		if b[i] != byte(i*13+seed) {
			return false
		}
	}
	return true
}

type addArg struct {
	V    int
	From ThreadID
}
type addRes struct {
	V    int
	Ran  ThreadID
	Rank int
}

// TestPrimitives (paper Table 1, send-based): every primitive between every
// pair of threads, with 2 and 4 ranks over shm and tcp.
func TestPrimitives(t *testing.T) {
	for _, tr := range testTransports {
		for _, procs := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s-%d", tr, procs), func(t *testing.T) { primitives(t, procs, tr) })
		}
	}
}

func primitives(t *testing.T, procs int, transport string) {
	const threads = 2
	var c counters
	// Published before a barrier the race detector cannot see through
	// (it goes through other processes): hence atomic.
	var dest atomic.Pointer[alloc.Region]
	var (
		hAdd, hCall, hSvc, hBuf, hBcast, hBcastBuf, hDest HandlerID
	)
	reg := func(h *Handlers) {
		hAdd, _ = RegisterTyped(h, "add", func(call *Call, a addArg) (addRes, error) {
			if a.From != call.Src {
				return addRes{}, fmt.Errorf("argument says %d, Src says %d", a.From, call.Src)
			}
			return addRes{V: a.V + 1, Ran: call.Dst, Rank: call.Fabric.Rank()}, nil
		})
		hCall, _ = h.Register("count", func(call *Call, args []byte) ([]byte, error) {
			c.calls[call.Fabric.Names().ThreadRank(call.Dst)].Add(1)
			return nil, nil
		})
		hSvc, _ = h.Register("service", func(call *Call, args []byte) ([]byte, error) {
			c.service[0].Add(1)
			return nil, nil
		})
		hBuf, _ = h.Register("buffer", func(call *Call, args []byte) ([]byte, error) {
			seed := int(binary.LittleEndian.Uint32(args))
			if hasPattern(call.Buffer, seed) && len(call.Buffer) == 1000 {
				c.bufOK[0].Add(1)
			} else {
				c.bufBad[0].Add(1)
			}
			return nil, nil
		})
		hBcast, _ = h.Register("bcast", func(call *Call, args []byte) ([]byte, error) {
			c.bcast[call.Fabric.Names().ThreadRank(call.Dst)].Add(1)
			return nil, nil
		})
		hBcastBuf, _ = h.Register("bcastbuf", func(call *Call, args []byte) ([]byte, error) {
			if hasPattern(call.Buffer, 7) {
				c.bcastBuf[call.Fabric.Names().ThreadRank(call.Dst)].Add(1)
			}
			return nil, nil
		})
		hDest, _ = h.Register("dest", func(call *Call, args []byte) ([]byte, error) {
			// A 1000-byte slot of this process's memory for the caller's rank.
			l, err := dest.Load().Locator(int(call.Fabric.Names().Rank(call.Src))*1024, 1000)
			if err != nil {
				return nil, err
			}
			return l.MarshalBinary()
		})
	}
	job(t, procs, threads, transport, reg, func(t *testing.T, f *Fabric) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d, err := f.Process().Registry().NewRegion(64<<10, alloc.RegionConfig{})
		if err != nil {
			t.Fatal(err)
		}
		dest.Store(d)
		if err := f.Barrier(ctx); err != nil { // every rank's dest exists
			t.Fatal(err)
		}
		me, _ := f.Names().Thread(f.Rank(), 0)
		all := f.Names().Threads()
		local, _ := f.Process().Registry().NewRegion(64<<10, alloc.RegionConfig{})
		orig, _ := local.Memory(0, 1000)
		pattern(orig.Bytes(), f.Rank())
		// Per thread: 1 call and 3 buffer calls; per rank: 1 service call;
		// 2 broadcasts notified by every thread.
		done := NewSynchronizer(4*all+f.Size()+2*all, Executed, nil)
		for d := 0; d < all; d++ {
			dst := ThreadID(d)
			r, err := CallReturnTyped[addRes](ctx, f, me, dst, hAdd, addArg{V: d * 10, From: me})
			if err != nil || r.V != d*10+1 || r.Ran != dst || r.Rank != f.Names().Rank(dst) {
				t.Fatalf("add on thread %d: %+v, %v", d, r, err)
			}
			if err := f.Call(me, dst, hCall, []byte("x"), done); err != nil {
				t.Fatal(err)
			}
			seed := make([]byte, 4)
			binary.LittleEndian.PutUint32(seed, uint32(f.Rank()))
			if err := f.CallBuffer(me, dst, hBuf, seed, orig.Bytes(), done); err != nil {
				t.Fatal(err)
			}
			lb, err := f.CallServiceReturn(ctx, me, f.Names().Rank(dst), hDest, nil)
			var dl alloc.Locator
			if err == nil {
				err = dl.UnmarshalBinary(lb)
			}
			if err != nil {
				t.Fatalf("dest locator: %v", err)
			}
			if err := f.CallBufferWrite(me, dst, hBuf, seed, orig, dl, done); err != nil {
				t.Fatal(err)
			}
			if err := f.CallBufferRead(me, dst, hBuf, seed, orig, dl, done); err != nil {
				t.Fatal(err)
			}
		}
		for r := 0; r < f.Size(); r++ {
			if err := f.CallService(me, r, hSvc, nil, done); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Broadcast(me, hBcast, nil, done); err != nil {
			t.Fatal(err)
		}
		bb := make([]byte, 300)
		pattern(bb, 7)
		if err := f.BroadcastBuffer(me, hBcastBuf, nil, bb, done); err != nil {
			t.Fatal(err)
		}
		if err := done.WaitContext(ctx); err != nil {
			t.Fatalf("notifications missing: %d of them: %v", done.Count(), err)
		}
		if err := f.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		p := int64(f.Size())
		for th := 0; th < threads; th++ {
			if c.calls[th].Load() != p || c.bcast[th].Load() != p || c.bcastBuf[th].Load() != p {
				t.Errorf("rank %d thread %d: %d calls, %d broadcasts, %d buffer broadcasts; want %d each",
					f.Rank(), th, c.calls[th].Load(), c.bcast[th].Load(), c.bcastBuf[th].Load(), p)
			}
		}
		if c.service[0].Load() != p {
			t.Errorf("rank %d: %d service calls, want %d", f.Rank(), c.service[0].Load(), p)
		}
		if c.bufOK[0].Load() != 3*p*threads || c.bufBad[0].Load() != 0 {
			t.Errorf("rank %d: %d good and %d bad buffers, want %d good", f.Rank(), c.bufOK[0].Load(), c.bufBad[0].Load(), 3*p*threads)
		}
	})
}

// TestMisuse: unknown handlers and oversize calls fail clearly and the
// receiver keeps running.
func TestMisuse(t *testing.T) {
	var hEcho HandlerID
	job(t, 2, 1, "", func(h *Handlers) {
		hEcho, _ = h.Register("echo", func(c *Call, a []byte) ([]byte, error) { return a, nil })
	}, func(t *testing.T, f *Fabric) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		me, _ := f.Names().Thread(f.Rank(), 0)
		other, _ := f.Names().Thread(1-f.Rank(), 0)
		_, err := f.CallReturn(ctx, me, other, IDOf("no-such-handler"), nil)
		if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "unknown handler") {
			t.Fatalf("CallReturn to an unknown handler: %v", err)
		}
		// A call that reaches a rank but names a thread of another (here
		// the caller's own thread, sent to the other rank; from rank 1 that
		// is the thread just past rank 0's last) is refused, not run.
		_, err = f.callReturn(ctx, 1-f.Rank(), callHdr{kind: kindCall, flags: flagReply, handler: hEcho, src: uint32(me), dst: uint32(me)}, []byte("x"))
		if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "is not in rank") {
			t.Fatalf("a call for thread %d sent to rank %d: %v", me, 1-f.Rank(), err)
		}
		if err := f.Call(me, other, IDOf("no-such-handler"), nil, nil); err != nil {
			t.Fatal(err)
		}
		s := NewSynchronizer(1, Executed, nil)
		if err := f.Call(me, other, IDOf("no-such-handler"), nil, s); err != nil {
			t.Fatal(err)
		}
		if err := s.WaitContext(ctx); err != nil {
			t.Fatal("a notified call to an unknown handler never notified")
		}
		if n := f.syncs.Size(); n != 0 {
			t.Fatalf("%d synchronizers left registered after their notifications", n)
		}
		var ran atomic.Bool
		local := NewSynchronizer(1, Transmitted, func() { ran.Store(true) })
		if err := f.Call(me, other, hEcho, []byte("x"), local); err != nil {
			t.Fatal(err)
		}
		if err := local.WaitContext(ctx); err != nil || !ran.Load() {
			t.Fatal("Transmitted synchronizer not counted down after the call was sent")
		}
		// Add before the calls: one synchronizer counts both.
		both := NewSynchronizer(1, Executed, nil)
		both.Add(1)
		for i := 0; i < 2; i++ {
			if err := f.Call(me, other, hEcho, []byte("x"), both); err != nil {
				t.Fatal(err)
			}
		}
		if err := both.WaitContext(ctx); err != nil || both.Count() != 0 {
			t.Fatalf("a synchronizer raised by Add: %v with %d still expected", err, both.Count())
		}
		// A synchronizer already at zero (finished, or made with 0) is
		// refused, and nothing stays registered.
		for _, s := range []*Synchronizer{local, NewSynchronizer(0, Executed, nil)} {
			if err := f.Call(me, other, hEcho, []byte("x"), s); !errors.Is(err, ErrSyncDone) {
				t.Fatalf("a call with a %v synchronizer at zero: %v, want ErrSyncDone", s.Mode(), err)
			}
		}
		if n := f.syncs.Size(); n != 0 {
			t.Fatalf("%d synchronizers registered by refused calls", n)
		}
		big := make([]byte, 64<<10)
		if err := f.Call(me, other, hEcho, big, nil); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("oversize call: %v", err)
		}
		if err := f.Call(me, ThreadID(99), hEcho, nil, nil); !errors.Is(err, ErrBadThread) {
			t.Fatalf("call to thread 99: %v", err)
		}
		out, err := f.CallReturn(ctx, me, other, hEcho, []byte("still alive"))
		if err != nil || string(out) != "still alive" {
			t.Fatalf("receiver stopped working: %q %v", out, err)
		}
		if err := f.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		if n := f.UnknownHandlerCalls(); n != 1 {
			t.Errorf("rank %d counted %d fire-and-forget calls to unknown handlers, want 1", f.Rank(), n)
		}
	})
}

func TestHandlerIDs(t *testing.T) {
	h := NewHandlers()
	id, err := h.Register("a", func(*Call, []byte) ([]byte, error) { return nil, nil })
	if err != nil || id != IDOf("a") {
		t.Fatal(err)
	}
	if name, ok := h.Name(id); !ok || name != "a" {
		t.Fatalf("Name(%d) = %q, %v; want the name registered", id, name, ok)
	}
	if name, ok := h.Name(IDOf("never registered")); ok {
		t.Fatalf("Name of an unregistered ID = %q, %v", name, ok)
	}
	if _, err := h.Register("a", func(*Call, []byte) ([]byte, error) { return nil, nil }); !errors.Is(err, ErrHandlerExists) {
		t.Fatalf("duplicate name: %v", err)
	}
	if _, err := h.Register("", func(*Call, []byte) ([]byte, error) { return nil, nil }); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("a handler without a name: %v", err)
	}
	if _, err := h.Register("b", nil); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("a nil handler: %v", err)
	}
	// Find two names with the same 32-bit hash.
	seen := map[HandlerID]string{}
	var x, y string
	for i := 0; ; i++ {
		n := fmt.Sprintf("h%d", i)
		if o, ok := seen[IDOf(n)]; ok {
			x, y = o, n
			break
		}
		seen[IDOf(n)] = n
	}
	h.Register(x, func(*Call, []byte) ([]byte, error) { return nil, nil })
	_, err = h.Register(y, func(*Call, []byte) ([]byte, error) { return nil, nil })
	if !errors.Is(err, ErrHandlerExists) || !strings.Contains(err.Error(), "share the ID") {
		t.Fatalf("hash collision %q/%q: %v", x, y, err)
	}
}

type binArg struct{ v uint32 }

func (b binArg) AppendBinary(dst []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint32(dst, b.v^0xffff), nil
}
func (b *binArg) UnmarshalBinary(d []byte) error {
	if len(d) != 4 {
		return errors.New("want 4 bytes")
	}
	b.v = binary.LittleEndian.Uint32(d) ^ 0xffff
	return nil
}

type msgpArg struct{ s string }

func (m msgpArg) MarshalMsg(b []byte) ([]byte, error) { return append(append(b, 'M'), m.s...), nil }
func (m *msgpArg) UnmarshalMsg(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] != 'M' {
		return b, errors.New("not ours")
	}
	m.s = string(b[1:])
	return nil, nil
}

// marshalArg has only encoding.BinaryMarshaler's method (not the
// appender's), and pairArg decodes msgp-style from exactly two bytes,
// leaving the rest.
type marshalArg struct{ v byte }

func (m marshalArg) MarshalBinary() ([]byte, error) { return []byte{'B', m.v}, nil }
func (m *marshalArg) UnmarshalBinary(d []byte) error {
	if len(d) != 2 || d[0] != 'B' {
		return errors.New("not ours")
	}
	m.v = d[1]
	return nil
}

type pairArg struct{ a, b byte }

func (p pairArg) MarshalMsg(b []byte) ([]byte, error) { return append(b, p.a, p.b), nil }
func (p *pairArg) UnmarshalMsg(b []byte) ([]byte, error) {
	if len(b) < 2 {
		return b, errors.New("short")
	}
	p.a, p.b = b[0], b[1]
	return b[2:], nil
}

func TestCodecOrder(t *testing.T) {
	b, _ := Encode(nil, msgpArg{"hi"})
	if string(b) != "Mhi" {
		t.Errorf("msgp-style type not encoded by MarshalMsg: %q", b)
	}
	var m msgpArg
	if err := Decode(b, &m); err != nil || m.s != "hi" {
		t.Errorf("msgp decode: %v %q", err, m.s)
	}
	b, _ = Encode(nil, binArg{7})
	var ba binArg
	if err := Decode(b, &ba); err != nil || ba.v != 7 || binary.LittleEndian.Uint32(b) != 7^0xffff {
		t.Errorf("binary codec: %v %v", err, ba)
	}
	type plain struct{ A int }
	b, _ = Encode(nil, plain{5})
	var p plain
	if err := Decode(b, &p); err != nil || p.A != 5 {
		t.Errorf("msgpack codec: %v %v", err, p)
	}
	if err := Decode([]byte{0xc1}, &p); !errors.Is(err, ErrCodec) {
		t.Errorf("bad msgpack: %v", err)
	}
	// Every method appends to dst.
	for _, v := range []any{msgpArg{"hi"}, binArg{7}, marshalArg{9}, []byte("raw"), plain{5}} {
		alone, _ := Encode(nil, v)
		if b, err := Encode([]byte("pre"), v); err != nil || string(b) != "pre"+string(alone) {
			t.Errorf("Encode(%T) after a prefix: %q, %v; want \"pre\" then %q", v, b, err, alone)
		}
	}
	// A msgp-style decode that leaves bytes over is an error.
	var pa pairArg
	if err := Decode([]byte{1, 2}, &pa); err != nil || pa != (pairArg{1, 2}) {
		t.Errorf("two-byte pair: %v %v", err, pa)
	}
	if err := Decode([]byte{1, 2, 3}, &pa); !errors.Is(err, ErrCodec) {
		t.Errorf("a pair with a trailing byte: %v, want ErrCodec", err)
	}
	// Decoding into a []byte copies: the message's buffer is reused once
	// the handler returns.
	msg := []byte("abc")
	var raw []byte
	if err := Decode(msg, &raw); err != nil || string(raw) != "abc" {
		t.Fatalf("[]byte decode: %v %q", err, raw)
	}
	msg[0] = 'x'
	if string(raw) != "abc" {
		t.Errorf("the decoded []byte shares the message's memory: %q", raw)
	}
}

func TestTreeDepth(t *testing.T) {
	for size := 1; size <= 40; size++ {
		for root := 0; root < size; root++ {
			depth := map[int]int{root: 0}
			queue := []int{root}
			for len(queue) > 0 {
				r := queue[0]
				queue = queue[1:]
				for _, c := range treeChildren(r, root, size) {
					if _, dup := depth[c]; dup {
						t.Fatalf("size %d root %d: rank %d reached twice", size, root, c)
					}
					depth[c] = depth[r] + 1
					queue = append(queue, c)
				}
			}
			maxd := 0
			for _, d := range depth {
				maxd = max(maxd, d)
			}
			want := 0
			for 1<<want < size {
				want++
			}
			if len(depth) != size || maxd > want {
				t.Fatalf("size %d root %d: reached %d ranks, depth %d (want ≤ %d)", size, root, len(depth), maxd, want)
			}
		}
	}
}

func FuzzCallMessage(f *testing.F) {
	b := make([]byte, callHeader+3)
	(&callHdr{kind: kindCall, handler: 1, args: 3}).put(b)
	f.Add(b)
	f.Add([]byte{1, 2, 3})
	hello := make([]byte, callHeader+locSize)
	(&callHdr{kind: kindCredit, args: locSize}).put(hello)
	f.Add(hello)
	f.Add(append(b, 0)) // a byte past the header's arguments and buffer
	f.Fuzz(func(t *testing.T, data []byte) {
		h, args, tail, err := parseCall(data)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatal(err)
			}
			return
		}
		if callHeader+len(args)+len(tail) != len(data) || int(h.args) != len(args) || int(h.buf) != len(tail) {
			t.Fatalf("split %d+%d of %d bytes", len(args), len(tail), len(data))
		}
		again := make([]byte, callHeader)
		h.put(again)
		if !bytes.Equal(again, data[:callHeader]) {
			t.Fatalf("the header re-encodes differently:\n%x\n%x", again, data[:callHeader])
		}
	})
}

// FuzzCoordinatorMessages: every decoder of the coordinator protocol
// (bootstrap and control messages)
// fails with ErrBadMessage or accepts, and whatever it accepts encodes back
// to the same bytes (round trip).
func FuzzCoordinatorMessages(f *testing.F) {
	f.Add(hello{rank: 1, size: 2, token: []byte("t"), machine: "m", probe: []byte{1, 2, 3}}.encode())
	f.Add(encodeTable([]member{{machine: "a"}, {machine: "b", probe: []byte("p")}}))
	f.Add(encodeEndpoints(msgPeers, []epEntry{{peer: 1, ep: []byte{1, 2}}}))
	f.Add(encodeRanks(msgReach, []int{0, 3}))
	f.Add(encodeRanks(msgPlan, nil))
	f.Add(encodeRanks(msgReach, []int{1, 4})) // rank 4 of a job of 4
	f.Add(encodeEndpoints(msgPeers, []epEntry{{peer: 4, ep: []byte{1}}}))
	f.Add(control{typ: msgBarrier, seq: 3}.encode())
	f.Add(control{typ: msgBye}.encode())
	f.Add(control{typ: msgDead, rank: 1, reason: []byte("why")}.encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		const size = 4
		h, herr := decodeHello(data)
		tb, terr := decodeTable(data, 2)
		es, eerr := decodeEndpoints(data, msgPeers, size)
		rr, rerr := decodeRanks(data, msgReach, size)
		pr, perr := decodeRanks(data, msgPlan, size)
		cz, czerr := decodeControl(data, size, msgBarrier, msgBye)
		cr, crerr := decodeControl(data, size, msgRelease, msgDead)
		if crerr == nil && cr.typ == msgDead && cr.rank >= size {
			t.Fatalf("a death of rank %d accepted in a job of %d", cr.rank, size)
		}
		for _, err := range []error{herr, terr, eerr, rerr, perr, czerr, crerr} {
			if err != nil && !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error without ErrBadMessage: %v", err)
			}
		}
		for _, r := range append(rr, pr...) {
			if r < 0 || r >= size {
				t.Fatalf("rank %d accepted in a job of %d", r, size)
			}
		}
		for _, e := range es {
			if e.peer >= size {
				t.Fatalf("an endpoint of rank %d accepted in a job of %d", e.peer, size)
			}
		}
		for name, ok := range map[string]bool{
			"hello":     herr != nil || bytes.Equal(h.encode(), data),
			"table":     terr != nil || bytes.Equal(encodeTable(tb), data),
			"endpoints": eerr != nil || bytes.Equal(encodeEndpoints(msgPeers, es), data),
			"reach":     rerr != nil || bytes.Equal(encodeRanks(msgReach, rr), data),
			"plan":      perr != nil || bytes.Equal(encodeRanks(msgPlan, pr), data),
			"to rank 0": czerr != nil || bytes.Equal(cz.encode(), data),
			"to a rank": crerr != nil || bytes.Equal(cr.encode(), data),
		} {
			if !ok {
				t.Fatalf("%s re-encodes differently", name)
			}
		}
	})
}

// TestUseAfterClose: a Fabric kept past its Close refuses everything with
// ErrClosed, promptly, and Worker.Poll finds nothing: Poll read the
// unmapped receive queue (fault), Barrier waited for ranks that had left
// (the coordinator) or called a live rank dead, Transmitter handed out a
// transmitter over closed queue pairs.
func TestUseAfterClose(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			var hEcho HandlerID
			var kept *Fabric
			job(t, 2, 1, tr, func(h *Handlers) {
				hEcho, _ = h.Register("echo", func(c *Call, a []byte) ([]byte, error) { return a, nil })
			}, func(t *testing.T, f *Fabric) { kept = f })
			f := kept
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if n := f.Worker(0).Poll(); n != 0 {
				t.Errorf("Poll after Close ran %d calls", n)
			}
			me, _ := f.Names().Thread(f.Rank(), 0)
			other, _ := f.Names().Thread(1-f.Rank(), 0)
			start := time.Now()
			calls := map[string]func() error{
				"Call":      func() error { return f.Call(me, other, hEcho, []byte("x"), nil) },
				"Call self": func() error { return f.Call(me, me, hEcho, []byte("x"), nil) },
				"CallReturn": func() error {
					_, err := f.CallReturn(ctx, me, other, hEcho, []byte("x"))
					return err
				},
				"CallServiceReturn": func() error {
					_, err := f.CallServiceReturn(ctx, me, 1-f.Rank(), hEcho, []byte("x"))
					return err
				},
				"Broadcast": func() error { return f.Broadcast(me, hEcho, []byte("x"), nil) },
				"Barrier":   func() error { return f.Barrier(ctx) },
				"Transmitter": func() error {
					_, err := f.Transmitter(1 - f.Rank())
					return err
				},
			}
			for name, call := range calls {
				if err := call(); !errors.Is(err, ErrClosed) {
					t.Errorf("rank %d: %s after Close: %v, want ErrClosed", f.Rank(), name, err)
				}
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("rank %d: the calls after Close took %v to refuse", f.Rank(), d)
			}
			if err := f.Close(); err != nil {
				t.Errorf("rank %d: a second Close: %v", f.Rank(), err)
			}
		})
	}
}
