package dtutils

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

func tcpPair(t testing.TB) (side, side) { return connectPair(t, transports[1].make, nil) }

// TestTCPRandomAccessNeverEscapes: random operations with random keys,
// regions, offsets and lengths either succeed inside the target region or
// are refused; bytes outside the ranges that succeeded never change.
func TestTCPRandomAccessNeverEscapes(t *testing.T) {
	a, b := tcpPair(t)
	// A guard region next to the target: nothing may ever touch it.
	guard, err := b.proc.Registry().NewRegion(1<<20, alloc.RegionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fill(guard.Bytes(), 9)
	guardCopy := append([]byte(nil), guard.Bytes()...)
	shadow := append([]byte(nil), b.buf.Bytes()...)
	rng := rand.New(rand.NewPCG(1, 2))
	good := b.loc(t, 0, 0)
	src := a.mem(t, 0, 1<<16)
	fill(src.Bytes(), 4)
	for i := 0; i < 3000; i++ {
		l := good
		switch rng.IntN(5) {
		case 0:
			l.Key = rng.Uint64()
		case 1:
			l.Region = rng.Uint32N(8)
		case 2:
			l.Offset = rng.Uint64()
		}
		size := uint64(rng.IntN(1 << 16))
		if l.Offset == 0 || rng.IntN(2) == 0 {
			l.Offset = uint64(rng.IntN(b.buf.Size() + 1<<16))
		}
		l.Length = size
		c := post(t, a.qp, WorkRequest{Op: OpWrite, Local: memT{src}.m(t, int(size)), Remote: l})
		inside := l.Region == good.Region && l.Key == good.Key && l.Offset+size <= uint64(b.buf.Size()) && l.Offset+size >= l.Offset
		if inside != (c.Status == StatusSuccess) {
			t.Fatalf("op %d: %+v → %v (inside: %v)", i, l, c.Status, inside)
		}
		if inside {
			copy(shadow[l.Offset:], src.Bytes()[:size])
		}
	}
	if !bytes.Equal(shadow, b.buf.Bytes()) {
		t.Fatal("target region differs from the writes that succeeded")
	}
	if !bytes.Equal(guardCopy, guard.Bytes()) {
		t.Fatal("a region no request named was modified")
	}
}

type memT struct{ alloc.Memory }

func (m memT) m(t testing.TB, n int) alloc.Memory {
	s, err := m.Memory.Slice(0, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTCPPeerDiesMidStream: operations in flight when the peer goes away
// complete with StatusConnectionLost; later posts fail; nothing hangs.
func TestTCPPeerDiesMidStream(t *testing.T) {
	a, b := tcpPair(t)
	src := a.mem(t, 0, 4096)
	dst := b.loc(t, 0, 4096)
	const n = 2000
	go func() {
		time.Sleep(2 * time.Millisecond)
		b.prov.Close()
	}()
	posted := 0
	for i := 0; i < n; i++ {
		if err := a.qp.Post(WorkRequest{Op: OpWrite, WRID: uint64(i), Signaled: true, Local: src, Remote: dst}); err != nil {
			if !errors.Is(err, ErrConnectionLost) {
				t.Fatalf("post %d: %v", i, err)
			}
			break
		}
		posted++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cs [64]Completion
	ok, lost := 0, 0
	for ok+lost < posted {
		k, err := a.qp.CQ().Wait(ctx, cs[:])
		if err != nil {
			t.Fatalf("hang: %d of %d completions (%d ok, %d lost): %v", ok+lost, posted, ok, lost, err)
		}
		for _, c := range cs[:k] {
			switch c.Status {
			case StatusSuccess:
				if lost > 0 {
					t.Fatal("a success completed after a connection-lost completion: out of order")
				}
				ok++
			case StatusConnectionLost:
				lost++
			default:
				t.Fatalf("unexpected %+v", c)
			}
		}
	}
	if err := a.qp.Post(WorkRequest{Op: OpNop, Signaled: true}); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("post after loss: %v", err)
	}
	t.Logf("%d posted: %d completed, %d reported lost", posted, ok, lost)
}

func FuzzTCPFrame(f *testing.F) {
	var b [frameHeader]byte
	for _, fr := range []frame{
		{op: uint8(OpWrite), flags: flagSignaled, payload: 8, length: 8, region: 1, key: 2},
		{op: uint8(OpRead) | frameResp, payload: 16, length: 16},
		{op: uint8(OpFetchAdd), arg1: 1, length: 8},
		{op: uint8(OpSend), payload: 100},
		{op: uint8(OpNop)},
	} {
		fr.put(b[:])
		f.Add(append([]byte(nil), b[:]...))
	}
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := parseFrame(data, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error not wrapping ErrBadFrame: %v", err)
			}
			return
		}
		if int(fr.payload) > 1<<20 || Op(fr.op&^frameResp) >= numOps || fr.status >= numStatus {
			t.Fatalf("accepted %+v", fr)
		}
		var again [frameHeader]byte
		fr.put(again[:])
		if !bytes.Equal(again[:], data[:frameHeader]) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzEndpoint(f *testing.F) {
	f.Add(endpoint{transport: transportTCP, rank: 1, token: 2, addr: "127.0.0.1:1"}.marshal())
	f.Add(endpoint{transport: transportSHM, rank: 1, token: 2, srqRegion: 3, srqKey: 4, addr: "/tmp/x.sock"}.marshal())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, tr := range []uint8{transportLoop, transportSHM, transportTCP} {
			ep, err := parseEndpoint(data, tr)
			if err != nil {
				if !errors.Is(err, ErrBadEndpoint) {
					t.Fatal(err)
				}
				continue
			}
			if !bytes.Equal(ep.marshal(), data) {
				t.Fatalf("re-encoding differs")
			}
		}
	})
}

func FuzzRing(f *testing.F) {
	mem := make([]byte, ringBytes(8, recvDescSize))
	initRing(mem, 8, recvDescSize)
	f.Add(mem[:ringHeader])
	f.Fuzz(func(t *testing.T, data []byte) {
		// A peer's corrupt ring header must be refused, never trusted.
		r, err := openRing(data)
		if err != nil {
			return
		}
		if uint64(len(data)) < uint64(ringBytes(int(r.capacity), r.entry)) {
			t.Fatalf("accepted a ring larger than its memory")
		}
	})
}

// TestTCPForeignDialerRefused (reliability: a second job cannot reach this
// one's memory): a connection that does not name one of this provider's
// queue pairs by its random token — another job, a port scanner — is
// closed before anything it sends is read as an operation, and the real
// pair keeps working.
func TestTCPForeignDialerRefused(t *testing.T) {
	a, b := tcpPair(t)
	fill(b.buf.Bytes(), 3)
	before := append([]byte(nil), b.buf.Bytes()...)
	addr := b.prov.(*tcpProvider).addr
	for _, hello := range [][]byte{make([]byte, helloSize), bytes.Repeat([]byte{0xff}, helloSize)} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// A hello naming no queue pair, then what would be a write frame.
		c.Write(append(hello, bytes.Repeat([]byte{7}, 4096)...))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 1))
		var ne net.Error
		if err == nil || n != 0 || (errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("a foreign connection stayed open (read %d bytes, %v)", n, err)
		}
		c.Close()
	}
	if !bytes.Equal(before, b.buf.Bytes()) {
		t.Fatal("a foreign connection changed registered memory")
	}
	src := a.mem(t, 0, 64)
	fill(src.Bytes(), 5)
	if c := post(t, a.qp, WorkRequest{Op: OpWrite, Local: src, Remote: b.loc(t, 0, 64)}); c.Status != StatusSuccess {
		t.Fatalf("the job's own pair stopped working: %v", c.Status)
	}
}
