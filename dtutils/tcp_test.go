package dtutils

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

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
	peerDiesMidStream(t, a, b)
}

// peerDiesMidStream closes b's provider while a streams writes to it.
func peerDiesMidStream(t *testing.T, a, b side) {
	src := a.mem(t, 0, 4096)
	dst := b.loc(t, 0, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cs [64]Completion
	// collect waits for n completions, in order: successes, then losses.
	collect := func(n int) (ok, lost int) {
		t.Helper()
		for ok+lost < n {
			k, err := a.qp.CQ().Wait(ctx, cs[:])
			if err != nil {
				t.Fatalf("hang: %d of %d completions (%d ok, %d lost): %v", ok+lost, n, ok, lost, err)
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
		return ok, lost
	}
	post := func(i int) error {
		return a.qp.Post(WorkRequest{Op: OpWrite, WRID: uint64(i), Signaled: true, Local: src, Remote: dst})
	}
	// The stream works: 100 writes complete.
	for i := 0; i < 100; i++ {
		if err := post(i); err != nil {
			t.Fatal(err)
		}
	}
	if ok, lost := collect(100); ok != 100 || lost != 0 {
		t.Fatalf("before the death: %d ok, %d lost of 100", ok, lost)
	}
	// The peer closes while writes stream: every posted write completes
	// (success, then connection lost, in order) or the post itself fails.
	const n = 2000
	closed := make(chan struct{})
	posted, postFailed := 0, false
	for i := 0; i < n; i++ {
		if i == 10 {
			go func() { b.prov.Close(); close(closed) }()
		}
		if err := post(100 + i); err != nil {
			if !errors.Is(err, ErrConnectionLost) {
				t.Fatalf("post %d: %v", i, err)
			}
			postFailed = true
			break
		}
		posted++
	}
	<-closed
	ok, lost := collect(posted)
	if !postFailed && lost == 0 {
		// Everything posted went through before the close: the death must
		// still be reported, to the next post.
		if err := post(0); !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("the peer closed but nothing reported it (%d posted, all ok; next post: %v)", posted, err)
		}
	}
	if err := a.qp.Post(WorkRequest{Op: OpNop, Signaled: true}); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("post after loss: %v", err)
	}
	t.Logf("%d posted while the peer closed: %d completed, %d reported lost, post failed %v", posted, ok, lost, postFailed)
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
		for _, tr := range []uint8{transportLoop, transportSHM, transportTCP, transportOFI} {
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

// FuzzRing: a peer's corrupt ring header is refused, never trusted; and a
// ring made here carries whatever entries go in back out, whole and in
// order, and reads back its own shape (round trip).
func FuzzRing(f *testing.F) {
	mem := make([]byte, ringBytes(8, recvDescSize))
	initRing(mem, 8, recvDescSize)
	f.Add(mem[:ringHeader], uint8(3), uint8(40))
	f.Fuzz(func(t *testing.T, data []byte, logCap, entry uint8) {
		if r, err := openRing(data); err == nil && uint64(len(data)) < uint64(ringBytes(int(r.capacity), r.entry)) {
			t.Fatalf("accepted a ring larger than its memory")
		}
		capacity, size := 2<<(logCap%6), 8*(1+int(entry)%16)
		if _, err := initRing(make([]byte, ringBytes(1, size)), 1, size); err == nil {
			t.Fatal("a ring of one cell was accepted: it cannot tell full from empty")
		}
		mem := make([]byte, ringBytes(capacity, size))
		if _, err := initRing(mem, capacity, size); err != nil {
			t.Fatal(err)
		}
		r, err := openRing(mem)
		if err != nil || int(r.capacity) != capacity || r.entry != size {
			t.Fatalf("ring of %d × %d bytes reopened as %+v (%v)", capacity, size, r, err)
		}
		var in [][]byte
		for len(data) > 0 && len(in) < capacity {
			e := make([]byte, size)
			data = data[copy(e, data):]
			if !r.enqueue(e) {
				t.Fatalf("ring of %d refused entry %d", capacity, len(in))
			}
			in = append(in, e)
		}
		if len(in) == capacity && r.enqueue(make([]byte, size)) {
			t.Fatal("a full ring took one more entry")
		}
		out := make([]byte, size)
		for i, e := range in {
			if !r.dequeue(out) || !bytes.Equal(out, e) {
				t.Fatalf("entry %d came back as %x, want %x", i, out, e)
			}
		}
		if r.dequeue(out) {
			t.Fatal("an empty ring gave an entry")
		}
	})
}

// TestTCPForeignDialerRefused (reliability: a second job cannot reach this
// one's memory): a connection that does not name one of this provider's
// queue pairs by its random token — another job, a port scanner — is
// closed before anything it sends is read as an operation, and so is one
// whose hello ends short; the real pair keeps working.
func TestTCPForeignDialerRefused(t *testing.T) {
	a, b := tcpPair(t)
	fill(b.buf.Bytes(), 3)
	before := append([]byte(nil), b.buf.Bytes()...)
	addr := b.prov.(*tcpProvider).addr
	for _, hello := range [][]byte{make([]byte, helloSize), bytes.Repeat([]byte{0xff}, helloSize), {1, 2, 3, 4, 5}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if len(hello) < helloSize {
			// A hello cut short: the dialer says no more.
			c.Write(hello)
			c.(*net.TCPConn).CloseWrite()
		} else {
			// A hello naming no queue pair, then what would be a write frame.
			c.Write(append(hello, bytes.Repeat([]byte{7}, 4096)...))
		}
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

// TestTCPEngineDeliversWithoutPollers: nobody calls Progress on either
// side, so the connections' engines must notice (no polling rate) and carry
// the operations themselves — a write that spans many socket reads lands
// whole, last word last, and a read comes back — promptly.
func TestTCPEngineDeliversWithoutPollers(t *testing.T) {
	a, b := tcpPair(t)
	const n = 3 << 19 // many socket reads; source and read-back fit the 4 MiB test region
	src, dst := a.mem(t, 0, n), b.loc(t, 0, n)
	fill(src.Bytes(), 7)
	if err := a.qp.Post(WorkRequest{Op: OpWrite, Local: src, Remote: dst}); err != nil {
		t.Fatal(err)
	}
	got := b.buf.Bytes()[:n]
	deadline := time.Now().Add(5 * time.Second)
	for !bytes.Equal(got, src.Bytes()) { // plain loads: no Progress here
		if time.Now().After(deadline) {
			t.Fatal("an unsignaled write with no poller on either side did not land within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	// A read, waited for with a context (the completion queue's Wait
	// sleeps on its doorbell after a short hot phase).
	back := a.mem(t, n, n)
	if err := a.qp.Post(WorkRequest{Op: OpRead, Local: back, Remote: dst, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, a.qp.CQ()); c.Status != StatusSuccess || !bytes.Equal(back.Bytes(), src.Bytes()) {
		t.Fatalf("read back: %v, equal %v", c.Status, bytes.Equal(back.Bytes(), src.Bytes()))
	}
}

// fakePeer is a connected, authenticated tcp peer that the test drives by
// hand: q accepted its hello, and the test writes frames on c.
type fakePeer struct {
	c   net.Conn
	q   *tcpQP
	b   side
	reg alloc.Locator // 64 bytes of q's process memory
}

func newFakePeer(t *testing.T) fakePeer { t.Helper(); return newFakePeerWith(t, nil) }

// newFakePeerWith is newFakePeer with q's process configured by mut.
func newFakePeerWith(t *testing.T, mut func(*ProcessConfig)) fakePeer {
	t.Helper()
	b := side{proc: newProcess(t, 1, mut)}
	var err error
	if b.prov, err = NewTCP(b.proc, DefaultTCPConfig()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.prov.Close() })
	qp, err := b.prov.NewQueuePair()
	if err != nil {
		t.Fatal(err)
	}
	if b.buf, err = b.proc.Registry().NewRegion(4096, alloc.RegionConfig{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	q := qp.(*tcpQP)
	// Token 1 is below any real token (they are random and odd), so q
	// waits for our dial.
	peerEP := endpoint{transport: transportTCP, rank: 0, token: 1, addr: "127.0.0.1:1"}.marshal()
	errc := make(chan error, 1)
	go func() { errc <- q.Connect(peerEP) }()
	c, err := net.Dial("tcp", b.prov.(*tcpProvider).addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var h [helloSize]byte
	binary.LittleEndian.PutUint64(h[0:], q.token)
	binary.LittleEndian.PutUint64(h[8:], 1)
	if _, err := c.Write(h[:]); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("the queue pair refused an authenticated peer: %v", err)
	}
	return fakePeer{c: c, q: q, b: b, reg: b.loc(t, 0, 64)}
}

// send writes one frame (header and payload as given, however wrong).
func (p fakePeer) send(t *testing.T, f frame, payload []byte) {
	t.Helper()
	var hdr [frameHeader]byte
	f.put(hdr[:])
	if _, err := p.c.Write(append(hdr[:], payload...)); err != nil {
		t.Fatal(err)
	}
}

// closed reports whether q closed the connection within 5 s.
func (p fakePeer) closed() bool {
	p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [4096]byte
	for {
		_, err := p.c.Read(b[:])
		if err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// TestTCPMalformedFramesFromPeer: a connected, authenticated peer that
// sends frames which parse but break the protocol loses its connection,
// with the queue pair's pending operations failed (not hung), and memory
// untouched; a well-formed write outside the registered bounds is refused
// with a status and the connection lives on.
func TestTCPMalformedFramesFromPeer(t *testing.T) {
	for _, c := range []struct {
		name    string
		f       func(p fakePeer) frame
		payload int
	}{
		{"write length differs from its payload", func(p fakePeer) frame {
			return frame{op: uint8(OpWrite), region: p.reg.Region, key: p.reg.Key, length: 32, payload: 16}
		}, 16},
		{"unknown opcode", func(p fakePeer) frame { return frame{op: 0x3f} }, 0},
		{"reserved flag bits", func(p fakePeer) frame {
			return frame{op: uint8(OpWrite), flags: 0x80, region: p.reg.Region, key: p.reg.Key, length: 8, payload: 8}
		}, 8},
		{"response to nothing pending", func(p fakePeer) frame {
			return frame{op: uint8(OpFetchAdd) | frameResp, wrid: 12345, payload: 8}
		}, 8},
		{"payload over MaxTransfer", func(p fakePeer) frame {
			return frame{op: uint8(OpSend), payload: 1<<31 + 1}
		}, 0},
		{"call reply capacity over MaxTransfer", func(p fakePeer) frame {
			return frame{op: uint8(OpCall), flags: flagSignaled, wrid: 7, length: 1<<31 + 1, payload: 8}
		}, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newFakePeer(t)
			fill(p.b.buf.Bytes(), 9)
			before := append([]byte(nil), p.b.buf.Bytes()...)
			// An operation of q's own, pending until the peer answers.
			if err := p.q.Post(WorkRequest{Op: OpFetchAdd, Local: p.b.mem(t, 64, 8), Remote: alloc.Locator{RegionRef: alloc.RegionRef{Process: 0}, Length: 8}, Add: 1, Signaled: true}); err != nil {
				t.Fatal(err)
			}
			p.send(t, c.f(p), bytes.Repeat([]byte{0xee}, c.payload))
			if !p.closed() {
				t.Fatal("the queue pair kept a connection that broke the protocol")
			}
			if got := wait(t, p.q.CQ()); got.Status != StatusConnectionLost {
				t.Fatalf("the pending operation completed with %v, want %v", got.Status, StatusConnectionLost)
			}
			if err := p.q.Post(WorkRequest{Op: OpWrite, Local: p.b.mem(t, 0, 8), Remote: alloc.Locator{RegionRef: alloc.RegionRef{Process: 0}, Length: 8}}); !errors.Is(err, ErrConnectionLost) {
				t.Fatalf("a post after the drop returned %v, want ErrConnectionLost", err)
			}
			if !bytes.Equal(before[:64], p.b.buf.Bytes()[:64]) {
				t.Fatal("a malformed frame changed registered memory")
			}
		})
	}
	t.Run("write out of bounds is refused, connection kept", func(t *testing.T) {
		p := newFakePeer(t)
		fill(p.b.buf.Bytes(), 9)
		before := append([]byte(nil), p.b.buf.Bytes()...)
		for _, f := range []frame{
			{op: uint8(OpWrite), flags: flagSignaled, wrid: 1, region: p.reg.Region, key: p.reg.Key, off: 4090, length: 16, payload: 16},
			{op: uint8(OpWrite), flags: flagSignaled, wrid: 2, region: p.reg.Region, key: p.reg.Key ^ 1, length: 16, payload: 16},
			{op: uint8(OpWrite), flags: flagSignaled, wrid: 3, region: p.reg.Region + 99, key: p.reg.Key, length: 16, payload: 16},
		} {
			p.send(t, f, bytes.Repeat([]byte{0xee}, 16))
			var r [frameHeader]byte
			p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(p.c, r[:]); err != nil {
				t.Fatalf("no response to write %d: %v", f.wrid, err)
			}
			got, err := parseFrame(r[:], 1<<20)
			if err != nil || got.wrid != f.wrid || got.status != StatusRemoteAccess {
				t.Fatalf("write %d: response %+v (%v), want StatusRemoteAccess", f.wrid, got, err)
			}
		}
		if !bytes.Equal(before, p.b.buf.Bytes()) {
			t.Fatal("a refused write changed registered memory")
		}
	})
	t.Run("read response of the wrong length", func(t *testing.T) {
		p := newFakePeer(t)
		fill(p.b.buf.Bytes(), 9)
		before := append([]byte(nil), p.b.buf.Bytes()...)
		if err := p.q.Post(WorkRequest{Op: OpRead, WRID: 77, Local: p.b.mem(t, 64, 16), Remote: alloc.Locator{RegionRef: alloc.RegionRef{Process: 0}, Length: 16}, Signaled: true}); err != nil {
			t.Fatal(err)
		}
		// Answered with 8 bytes where 16 were asked for.
		p.send(t, frame{op: uint8(OpRead) | frameResp, flags: flagSignaled, wrid: 77, length: 8, payload: 8}, bytes.Repeat([]byte{0xee}, 8))
		if !p.closed() {
			t.Fatal("the queue pair kept a connection that answered a read with the wrong length")
		}
		if got := wait(t, p.q.CQ()); got.WRID != 77 || got.Status != StatusConnectionLost {
			t.Fatalf("the read completed %+v, want StatusConnectionLost", got)
		}
		if !bytes.Equal(before, p.b.buf.Bytes()) {
			t.Fatal("a read response of the wrong length changed registered memory")
		}
	})
	t.Run("read longer than MaxTransfer is refused, connection kept", func(t *testing.T) {
		p := newFakePeerWith(t, func(c *ProcessConfig) { c.MaxTransfer, c.CallBytes = 1024, 1024 })
		// Inside the 4096-byte region, past the process's MaxTransfer.
		p.send(t, frame{op: uint8(OpRead), flags: flagSignaled, wrid: 5, region: p.reg.Region, key: p.reg.Key, length: 2048}, nil)
		var r [frameHeader]byte
		p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(p.c, r[:]); err != nil {
			t.Fatalf("no response to the read: %v", err)
		}
		got, err := parseFrame(r[:], 1<<20)
		if err != nil || got.wrid != 5 || got.status != StatusRemoteAccess || got.payload != 0 {
			t.Fatalf("response %+v (%v), want StatusRemoteAccess and no data", got, err)
		}
		// The connection lives on: a read within the limit is answered.
		p.send(t, frame{op: uint8(OpRead), flags: flagSignaled, wrid: 6, region: p.reg.Region, key: p.reg.Key, length: 16}, nil)
		if _, err := io.ReadFull(p.c, r[:]); err != nil {
			t.Fatalf("no response to the second read: %v", err)
		}
		if got, err = parseFrame(r[:], 1<<20); err != nil || got.wrid != 6 || got.status != StatusSuccess || got.payload != 16 {
			t.Fatalf("second read: response %+v (%v)", got, err)
		}
	})
}

// FuzzOFIHeader: the ofi message header decodes only what encodes back the
// same, with a known kind and a body exactly when (and as long as) the kind
// carries one; region questions and answers decode only what encodes back.
func FuzzOFIHeader(f *testing.F) {
	ask := ofiRegionAsk{region: 3, key: 0xfeed}.append(nil)
	answer := ofiRegionAnswer{region: 3, status: ofiRegionYes, key: 0xfeed, length: 4096, addr: 1 << 40, mrKey: 77}.append(nil)
	for _, h := range []ofiMsgHeader{{token: 7, kind: ofiKindData, seq: 1}, {token: 9, kind: ofiKindClose, seq: 1 << 31}, {kind: ofiKindProbe}, {kind: ofiKindAck}, {kind: ofiKindRegionAsk}, {kind: ofiKindRegionAnswer}} {
		b := make([]byte, ofiHeader, ofiHeader+64)
		h.put(b)
		switch h.kind {
		case ofiKindData:
			b = append(b, 1, 2, 3, 4)
		case ofiKindRegionAsk:
			b = append(b, ask...)
		case ofiKindRegionAnswer:
			b = append(b, answer...)
		}
		f.Add(b)
	}
	f.Add([]byte{1, 2})
	bodies := map[uint8]int{ofiKindRegionAsk: ofiRegionAskBody, ofiKindRegionAnswer: ofiRegionAnswerBody}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := parseOFIHeader(data)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error not wrapping ErrBadFrame: %v", err)
			}
			return
		}
		body := len(data) - ofiHeader
		switch n, ok := bodies[h.kind]; {
		case ok && body != n:
			t.Fatalf("accepted kind %d with a %d-byte body", h.kind, body)
		case !ok && (h.kind < ofiKindData || h.kind > ofiKindAck || (h.kind == ofiKindData) != (body > 0)):
			t.Fatalf("accepted %+v with %d bytes", h, len(data))
		}
		var again [ofiHeader]byte
		h.put(again[:])
		if !bytes.Equal(again[:], data[:ofiHeader]) {
			t.Fatal("re-encoding differs")
		}
		switch h.kind {
		case ofiKindRegionAsk:
			a, err := parseRegionAsk(data[ofiHeader:])
			if err != nil {
				if !errors.Is(err, ErrBadFrame) {
					t.Fatalf("error not wrapping ErrBadFrame: %v", err)
				}
				return
			}
			if !bytes.Equal(a.append(nil), data[ofiHeader:]) {
				t.Fatal("region question re-encodes differently")
			}
		case ofiKindRegionAnswer:
			a, err := parseRegionAnswer(data[ofiHeader:])
			if err != nil {
				if !errors.Is(err, ErrBadFrame) {
					t.Fatalf("error not wrapping ErrBadFrame: %v", err)
				}
				return
			}
			if !bytes.Equal(a.append(nil), data[ofiHeader:]) {
				t.Fatal("region answer re-encodes differently")
			}
		}
	})
}

// TestTCPCloseWaitsForApply: Close does not return while the engine is
// applying a write into registered memory, so the memory may be released
// as soon as it returns (the engine once wrote into a region the
// process's Close had unmapped, and the process faulted).
func TestTCPCloseWaitsForApply(t *testing.T) {
	entered := make(chan struct{})
	var left atomic.Bool
	var once sync.Once
	w := newWritePair(t, transports[1].make, 1<<20, func(_, qb QueuePair) {
		qb.(*tcpQP).applying = func() {
			once.Do(func() {
				close(entered)
				time.Sleep(100 * time.Millisecond)
				left.Store(true)
			})
		}
	})
	defer w.a.Close()
	if err := w.qa.Post(WorkRequest{Op: OpWrite, Local: w.src, Remote: w.dst}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the write never reached the target's engine")
	}
	w.b.Close()
	if !left.Load() {
		t.Fatal("Close returned while the engine was still writing into memory")
	}
}

// TestTCPIdleEngineBacksOff: an engine watching an idle connection waits
// longer and longer in poll(2) (it woke 50 times a second per connection:
// 7 % of a core per process in an idle 16-process job), is back at its
// shortest wait after traffic, and still leaves its wait at once for a
// write and for Close.
func TestTCPIdleEngineBacksOff(t *testing.T) {
	type look struct {
		ms int
		at time.Time
	}
	bounds := make(chan look, 1024)
	w := newWritePair(t, transports[1].make, 4096, func(_, qb QueuePair) {
		q := qb.(*tcpQP)
		q.watchMax = 1 << 30 // no cap within the test: the bound only doubles
		q.watchWait = func(ms int) {
			select {
			case bounds <- look{ms, time.Now()}:
			default:
			}
		}
	})
	defer w.a.Close()
	// next returns the bound of the engine's next wait.
	next := func(what string) look {
		t.Helper()
		select {
		case w := <-bounds:
			return w
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the engine made no wait in 10 s", what)
		}
		return look{}
	}
	// Nobody polls: after the connection's own traffic the engine's waits
	// double from watchTimeout. 20+40+80+160 ms pass before the 320.
	// grow waits until the bound reaches ms, checking each step.
	grow := func(ms int, what string) {
		t.Helper()
		prev := next(what)
		for i := 0; prev.ms < ms; i++ {
			if i == 30 {
				t.Fatalf("%s: after 30 waits the bound is %d ms, short of %d", what, prev.ms, ms)
			}
			b := next(what)
			switch {
			case b.ms == watchTimeout: // the wait ended on an event
			case b.ms != 2*prev.ms:
				t.Fatalf("%s: an empty wait of %d ms was followed by one of %d", what, prev.ms, b.ms)
			case b.at.Sub(prev.at) < time.Duration(prev.ms)*time.Millisecond:
				// poll(2) ends early only on an event, which resets the bound
				t.Fatalf("%s: an empty wait bounded at %d ms took %v", what, prev.ms, b.at.Sub(prev.at))
			}
			prev = b
		}
	}
	grow(320, "idle")
	// A write wakes it from that wait; the next is short again.
	fill(w.src.Bytes(), 3)
	if err := w.qa.Post(WorkRequest{Op: OpWrite, Local: w.src, Remote: w.dst, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, w.qa.CQ()); c.Status != StatusSuccess {
		t.Fatalf("write: %v", c.Status)
	}
	if b := next("after a write"); b.ms != watchTimeout {
		t.Fatalf("after a write the engine waits up to %d ms, want %d", b.ms, watchTimeout)
	}
	// Close ends a long wait at once: let it grow to 1280 ms, then close.
	grow(1280, "idle again")
	start := time.Now()
	w.b.Close()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v: it waited for the engine's poll(2) to time out", d)
	}
}

// TestTCPEngineRearmsAfterFlush: with nobody polling on either side,
// bursts of unsignaled writes from several goroutines each land promptly.
// Posters that queue while the engine is awake make no system call (the
// engine re-arms its eventfd only after it has flushed, and then looks
// for frames queued meanwhile); a re-arm that lost those frames, or never
// happened, would leave a burst waiting for a poll(2) timeout, which
// doubles while it waits for nothing (no cap here), past the deadline.
func TestTCPEngineRearmsAfterFlush(t *testing.T) {
	const posters, each, bursts = 4, 50, 12
	w := newWritePair(t, transports[1].make, posters*each*8, func(qa, qb QueuePair) {
		qa.(*tcpQP).watchMax = 1 << 30
		qb.(*tcpQP).watchMax = 1 << 30
	})
	defer w.a.Close()
	defer w.b.Close()
	dst := w.dst
	landed, err := w.pb.Registry().Resolve(dst)
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= bursts; k++ {
		var wg sync.WaitGroup
		errs := make(chan error, posters)
		for g := 0; g < posters; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					src, _ := w.src.Slice((g*each+i)*8, 8)
					binary.LittleEndian.PutUint64(src.Bytes(), uint64(k*1000+i+1))
					to, _ := dst.Sub(uint64(g*8), 8)
					if err := w.qa.Post(WorkRequest{Op: OpWrite, Local: src, Remote: to}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Second)
		for g := 0; g < posters; g++ {
			word := (*atomic.Uint64)(unsafe.Pointer(&landed[g*8]))
			for word.Load() != uint64(k*1000+each) { // plain loads: no Progress
				if time.Now().After(deadline) {
					t.Fatalf("burst %d: poster %d's last write had not landed after 1 s (slot holds %d)", k, g, word.Load())
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		time.Sleep(time.Duration(k) * 5 * time.Millisecond) // the engines go back to poll(2), their bounds growing
	}
}
