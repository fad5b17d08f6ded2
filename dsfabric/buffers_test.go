package dsfabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

// TestBufferCallsChecked (paper Table 1, the buffer variants): a
// destination buffer of the wrong size is refused before anything moves;
// the callee refuses a read whose origin is not the caller's memory and a
// write whose destination's key is wrong (both forged below the API); a
// handler's error reaches CallReturn's caller as ErrRemote; and the
// connection works on after each.
func TestBufferCallsChecked(t *testing.T) {
	var dest atomic.Pointer[alloc.Region]
	var hBuf, hDest, hFail HandlerID
	var ran atomic.Int64
	job(t, 2, 1, "", func(h *Handlers) {
		hBuf, _ = h.Register("buf", func(c *Call, a []byte) ([]byte, error) { ran.Add(1); return c.Buffer, nil })
		hDest, _ = h.Register("dest", func(c *Call, a []byte) ([]byte, error) {
			l, err := dest.Load().Locator(0, 100)
			if err != nil {
				return nil, err
			}
			return l.MarshalBinary()
		})
		hFail, _ = h.Register("fail", func(c *Call, a []byte) ([]byte, error) { return nil, errors.New("handler says no") })
	}, func(t *testing.T, f *Fabric) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		publishRegion(t, ctx, f, &dest, 4096)
		me, _ := f.Names().Thread(f.Rank(), 0)
		other, _ := f.Names().Thread(1-f.Rank(), 0)
		dl := peerLocator(t, ctx, f, me, other, hDest)
		local, _ := f.Process().Registry().NewRegion(4096, alloc.RegionConfig{})
		orig, _ := local.Memory(0, 200) // dest holds 100
		if err := f.CallBufferWrite(me, other, hBuf, nil, orig, dl, nil); !errors.Is(err, ErrBadThread) {
			t.Fatalf("CallBufferWrite of 200 bytes into a 100-byte buffer: %v", err)
		}
		if err := f.CallBufferRead(me, other, hBuf, nil, orig, dl, nil); !errors.Is(err, ErrBadThread) {
			t.Fatalf("CallBufferRead of 200 bytes into a 100-byte buffer: %v", err)
		}
		// A read call whose origin names the callee's own memory, not the
		// caller's: the callee must not read it from the caller.
		src, _ := local.Memory(0, 100)
		forged := src.Locator()
		forged.Process = uint32(1 - f.Rank())
		tail, _ := forged.AppendBinary(nil)
		tail, _ = dl.AppendBinary(tail)
		hd := callHdr{kind: kindCall, flags: flagReadBuf, handler: hBuf, src: uint32(me), dst: uint32(other)}
		if err := forgedCall(ctx, f, hd, tail); err != nil {
			t.Fatalf("a read call whose origin is not the caller's: %v", err)
		}
		// A write call whose destination's key is wrong: the callee must
		// not hand the handler memory the caller may not name.
		badKey := dl
		badKey.Key++
		tail, _ = badKey.AppendBinary(nil)
		hd = callHdr{kind: kindCall, flags: flagDestBuf, handler: hBuf, src: uint32(me), dst: uint32(other)}
		if err := forgedCall(ctx, f, hd, tail); err != nil {
			t.Fatalf("a write call whose destination has the wrong key: %v", err)
		}
		_, err := f.CallReturn(ctx, me, other, hFail, nil)
		if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "handler says no") {
			t.Fatalf("CallReturn of a failing handler: %v", err)
		}
		if err := f.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		if n := ran.Load(); n != 0 {
			t.Errorf("rank %d ran %d refused buffer calls", f.Rank(), n)
		}
		if err := f.Barrier(ctx); err != nil { // both have looked
			t.Fatal(err)
		}
		ok := NewSynchronizer(1, Executed, nil)
		if err := f.CallBufferRead(me, other, hBuf, nil, src, dl, ok); err != nil {
			t.Fatal(err)
		}
		if err := ok.WaitContext(ctx); err != nil {
			t.Fatal(err)
		}
		if err := f.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		if n := ran.Load(); n != 1 || f.DeadErr() != nil {
			t.Fatalf("rank %d after the refusals: %d buffer calls ran, want 1; dead: %v", f.Rank(), n, f.DeadErr())
		}
	})
}

// forgedCall sends a call made below the API, with an Executed
// synchronizer, to the other rank, and waits for its answer (a refusal
// answers too).
func forgedCall(ctx context.Context, f *Fabric, hd callHdr, tail []byte) error {
	s := NewSynchronizer(1, Executed, nil)
	if err := f.syncFlags(s, &hd); err != nil {
		return err
	}
	if err := f.send(1-f.Rank(), hd, nil, tail, nil); err != nil {
		return err
	}
	if err := s.WaitContext(ctx); err != nil {
		return fmt.Errorf("never answered: %w", err)
	}
	return nil
}

// publishRegion makes a region of n bytes that hDest-style handlers hand
// out, and waits until every rank has made its own.
func publishRegion(t *testing.T, ctx context.Context, f *Fabric, dest *atomic.Pointer[alloc.Region], n int) {
	d, err := f.Process().Registry().NewRegion(n, alloc.RegionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dest.Store(d)
	if err := f.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

// peerLocator asks handler h on thread other for a locator of its memory.
func peerLocator(t *testing.T, ctx context.Context, f *Fabric, me, other ThreadID, h HandlerID) alloc.Locator {
	lb, err := f.CallReturn(ctx, me, other, h, nil)
	var dl alloc.Locator
	if err == nil {
		err = dl.UnmarshalBinary(lb)
	}
	if err != nil {
		t.Fatalf("a locator from thread %d: %v", other, err)
	}
	return dl
}

// TestAdvertisedAddresses: a tcp (or ofi-tcp) endpoint that listens on
// every interface advertises the address the rank reached its coordinator
// from, one its peers can reach; a listener on one address is left as it
// is. Transports summarises a mix of shm and tcp peers as such.
func TestAdvertisedAddresses(t *testing.T) {
	t.Setenv(EnvListen, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := &Fabric{log: quiet, launch: launch{coord: ln.Addr().String()}, client: &client{conn: c}}
	for _, tc := range []struct{ listen, advertise, node string }{
		{"0.0.0.0:0", "127.0.0.1", "127.0.0.1"},
		{":0", "127.0.0.1", "127.0.0.1"},
		{"[::]:0", "127.0.0.1", "127.0.0.1"},
		{"10.0.0.7:0", "", "10.0.0.7"},
	} {
		f.cfg = Config{Listen: tc.listen, OFIProvider: "tcp"}
		if got := f.TCPConfig(); got.Listen != tc.listen || got.AdvertiseHost != tc.advertise {
			t.Errorf("Listen %q: tcp listens on %q, advertises %q; want %q", tc.listen, got.Listen, got.AdvertiseHost, tc.advertise)
		}
		if got := f.OFIConfig(); got.Node != tc.node {
			t.Errorf("Listen %q: ofi-tcp binds %q, want %q", tc.listen, got.Node, tc.node)
		}
	}
	for _, tc := range []struct {
		per  []string
		want string
	}{
		{[]string{"loop", "shm", "tcp"}, "shm+tcp"},
		{[]string{"loop", "tcp", "shm", "shm"}, "shm+tcp"},
		{[]string{"loop", "tcp"}, "tcp"},
		{[]string{"loop", "shm"}, "shm"},
		{[]string{"loop", "ofi"}, "ofi"},
		{[]string{"loop"}, "loop"},
	} {
		f.transports = tc.per
		if got := f.Transports(); got != tc.want {
			t.Errorf("peers over %v: Transports() = %q, want %q", tc.per, got, tc.want)
		}
	}
}

// TestSendBuffersReused: a stream of calls of MaxMessage size outruns the
// send buffers' ring (sixteen units) on transports whose sends complete
// later (tcp), and each one still arrives intact; a CallBufferWrite's
// origin is the caller's again when the call returns, so rewriting it at
// once changes nothing the handler sees.
func TestSendBuffersReused(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) { sendBuffersReused(t, tr) })
	}
}

func sendBuffersReused(t *testing.T, transport string) {
	const calls, writes, wsize = 200, 40, 256 << 10
	var dest atomic.Pointer[alloc.Region]
	var good, bad atomic.Int64
	var hBig, hDest, hBuf HandlerID
	job(t, 2, 1, transport, func(h *Handlers) {
		hBig, _ = h.Register("big", func(c *Call, a []byte) ([]byte, error) {
			if len(a) > 4 && hasPattern(a[4:], int(binary.LittleEndian.Uint32(a))) {
				good.Add(1)
			} else {
				bad.Add(1)
			}
			return nil, nil
		})
		hDest, _ = h.Register("dest", func(c *Call, a []byte) ([]byte, error) {
			l, err := dest.Load().Locator(0, wsize)
			if err != nil {
				return nil, err
			}
			return l.MarshalBinary()
		})
		hBuf, _ = h.Register("buf", func(c *Call, a []byte) ([]byte, error) {
			if hasPattern(c.Buffer, int(a[0])) {
				good.Add(1)
			} else {
				bad.Add(1)
			}
			return nil, nil
		})
	}, func(t *testing.T, f *Fabric) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		publishRegion(t, ctx, f, &dest, wsize)
		me, _ := f.Names().Thread(f.Rank(), 0)
		other, _ := f.Names().Thread(1-f.Rank(), 0)
		if f.Rank() == 0 {
			s := NewSynchronizer(calls, Executed, nil)
			args := make([]byte, f.cfg.MaxMessage-callHeader)
			for i := 0; i < calls; i++ {
				binary.LittleEndian.PutUint32(args, uint32(i))
				pattern(args[4:], i)
				if err := f.Call(me, other, hBig, args, s); err != nil {
					t.Fatalf("call %d of %d bytes: %v", i, len(args), err)
				}
			}
			dl := peerLocator(t, ctx, f, me, other, hDest)
			local, _ := f.Process().Registry().NewRegion(wsize, alloc.RegionConfig{})
			orig, _ := local.Memory(0, wsize)
			for i := 0; i < writes; i++ {
				pattern(orig.Bytes(), i)
				// One write at a time: dest is one buffer.
				w := NewSynchronizer(1, Executed, nil)
				if err := f.CallBufferWrite(me, other, hBuf, []byte{byte(i)}, orig, dl, w); err != nil {
					t.Fatal(err)
				}
				clear(orig.Bytes()) // the caller's again
				if err := w.WaitContext(ctx); err != nil {
					t.Fatalf("write %d not run: %v", i, err)
				}
			}
			if err := s.WaitContext(ctx); err != nil {
				t.Fatalf("%d of %d calls not run: %v", s.Count(), calls, err)
			}
		}
		if err := f.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		if f.Rank() == 1 && (good.Load() != calls+writes || bad.Load() != 0) {
			t.Errorf("%d calls intact, %d damaged; want %d intact", good.Load(), bad.Load(), calls+writes)
		}
	})
}

// TestMalformedCallsDropped (bad input): messages whose header the
// receiver cannot parse — an unknown kind, unknown flags — are dropped
// without running anything, and their receive buffers and credits come
// back: after three times the receive window of them, a call still goes
// through and nobody is marked dead.
func TestMalformedCallsDropped(t *testing.T) {
	var ran atomic.Int64
	var hRun HandlerID
	const window = 8
	jobWith(t, Config{Procs: 2, ThreadsPerProcess: 1, RecvBuffers: window}, func(h *Handlers) {
		hRun, _ = h.Register("run", func(c *Call, a []byte) ([]byte, error) { ran.Add(1); return a, nil })
	}, func(t *testing.T, f *Fabric) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		me, _ := f.Names().Thread(f.Rank(), 0)
		other, _ := f.Names().Thread(1-f.Rank(), 0)
		for i := 0; i < 3*window; i++ {
			hd := callHdr{kind: kindCredit + 1, handler: hRun, src: uint32(me), dst: uint32(other)} // an unknown kind
			if i%2 == 1 {
				hd.kind, hd.flags = kindCall, flagsKnown+1 // unknown flags
			}
			if err := f.send(1-f.Rank(), hd, []byte("forged"), nil, nil); err != nil {
				t.Fatalf("sending malformed message %d: %v", i, err)
			}
		}
		out, err := f.CallReturn(ctx, me, other, hRun, []byte("after"))
		if err != nil || string(out) != "after" {
			t.Fatalf("a call after %d malformed messages: %q, %v", 3*window, out, err)
		}
		if err := f.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		if n := ran.Load(); n != 1 || f.DeadErr() != nil {
			t.Fatalf("rank %d ran %d calls, want 1 (the well-formed one); dead: %v", f.Rank(), n, f.DeadErr())
		}
	})
}
