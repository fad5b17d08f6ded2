//go:build ofi

package dtutils

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/seriema-go/seriema/alloc"
)

// The one-sided path (OFIConfig.OneSided) runs the whole transport suite as
// "ofi-rma" (ofi_test.go); these tests check what the suite cannot see:
// that writes and reads really go as fi_writemsg/fi_readmsg, that the two
// paths keep one order on a queue pair, and the fallbacks.

func rmaPieces(p Provider) uint64 { return p.(*ofiProvider).rma.pieces.Load() }

// TestOFIOneSidedIsOneSided: a write ending on an 8-byte boundary goes as
// two fi_writes (body, then the last word), any other write and every read
// as one; a bad key or range sends nothing and completes with
// StatusRemoteAccess.
func TestOFIOneSidedIsOneSided(t *testing.T) {
	a, b := connectPair(t, ofiRMAMake, nil)
	src := a.mem(t, 0, 4096)
	fill(src.Bytes(), 3)
	steps := []struct {
		name   string
		wr     WorkRequest
		pieces uint64
		st     Status
	}{
		{"sealed write", WorkRequest{Op: OpWrite, Local: src, Remote: b.loc(t, 8192, 4096)}, 2, StatusSuccess},
		{"8-byte write", WorkRequest{Op: OpWrite, Local: a.mem(t, 0, 8), Remote: b.loc(t, 16384, 8)}, 1, StatusSuccess},
		{"unaligned write", WorkRequest{Op: OpWrite, Local: a.mem(t, 0, 13), Remote: b.loc(t, 20000, 13)}, 1, StatusSuccess},
		{"read", WorkRequest{Op: OpRead, Local: a.mem(t, 65536, 4096), Remote: b.loc(t, 8192, 4096)}, 1, StatusSuccess},
	}
	bad := b.loc(t, 0, 64)
	bad.Key++
	past := b.loc(t, 0, 64)
	past.Offset = uint64(b.buf.Size()) - 32
	steps = append(steps,
		struct {
			name   string
			wr     WorkRequest
			pieces uint64
			st     Status
		}{"bad key", WorkRequest{Op: OpWrite, Local: a.mem(t, 0, 64), Remote: bad}, 0, StatusRemoteAccess},
		struct {
			name   string
			wr     WorkRequest
			pieces uint64
			st     Status
		}{"past the end", WorkRequest{Op: OpRead, Local: a.mem(t, 0, 64), Remote: past}, 0, StatusRemoteAccess})
	for _, s := range steps {
		before := rmaPieces(a.prov)
		if c := post(t, a.qp, s.wr); c.Status != s.st {
			t.Fatalf("%s: %v, want %v", s.name, c.Status, s.st)
		}
		if got := rmaPieces(a.prov) - before; got != s.pieces {
			t.Errorf("%s: %d fi_writemsg/fi_readmsg, want %d", s.name, got, s.pieces)
		}
	}
	if got := string(b.buf.Bytes()[8192 : 8192+4096]); got != string(src.Bytes()) {
		t.Error("the write did not land")
	}
	if got := string(a.buf.Bytes()[65536 : 65536+4096]); got != string(src.Bytes()) {
		t.Error("the read did not bring the write back")
	}
	for i, v := range b.buf.Bytes()[:64] {
		if v != 0 {
			t.Fatalf("the refused write changed byte %d", i)
		}
	}
}

// TestOFIOneSidedKeepsOrder: one queue pair mixes one-sided writes and
// reads with atomics (frames the target's engine applies) on a few words,
// in random order; every read and every atomic's old value must match a
// sequential model, and completions come in posting order. This is what
// the fence (frames before RMA), the drain (RMA before frames) and the
// write-after-read wait are for.
func TestOFIOneSidedKeepsOrder(t *testing.T) {
	a, b := connectPair(t, ofiRMAMake, nil)
	const words, ops = 4, 3000
	model := make([]uint64, words)
	type expect struct {
		at   int // offset of the result in a's buffer
		want uint64
	}
	var expects []expect
	rng := rand.New(rand.NewPCG(1, 2))
	out := 1 << 20 // results and sources, 8 bytes each, in a's buffer
	for i := 0; i < ops; i++ {
		w := rng.IntN(words)
		remote := b.loc(t, 8*w, 8)
		local := a.mem(t, out, 8)
		wr := WorkRequest{WRID: uint64(i), Signaled: true, Local: local, Remote: remote}
		switch rng.IntN(3) {
		case 0:
			v := rng.Uint64()
			binary.LittleEndian.PutUint64(local.Bytes(), v)
			wr.Op = OpWrite
			model[w] = v
		case 1:
			wr.Op = OpRead
			expects = append(expects, expect{out, model[w]})
		case 2:
			wr.Op, wr.Add = OpFetchAdd, 1
			expects = append(expects, expect{out, model[w]})
			model[w]++
		}
		out += 8
		if err := a.qp.Post(wr); err != nil {
			t.Fatalf("post %d (%v): %v", i, wr.Op, err)
		}
	}
	for i := 0; i < ops; i++ {
		c := wait(t, a.qp.CQ())
		if c.Status != StatusSuccess || c.WRID != uint64(i) {
			t.Fatalf("completion %d: WRID %d, %v", i, c.WRID, c.Status)
		}
	}
	for i, e := range expects {
		if got := binary.LittleEndian.Uint64(a.buf.Bytes()[e.at:]); got != e.want {
			t.Fatalf("result %d: %d, want %d", i, got, e.want)
		}
	}
	for w := 0; w < words; w++ {
		if got := binary.LittleEndian.Uint64(b.buf.Bytes()[8*w:]); got != model[w] {
			t.Fatalf("word %d holds %d, want %d", w, got, model[w])
		}
	}
	if rmaPieces(a.prov) == 0 {
		t.Fatal("nothing went one-sided")
	}
}

// TestOFIOneSidedPeerWithout: a peer without OneSided answers that it takes
// messages; writes and reads to it then go as frames and still work.
func TestOFIOneSidedPeerWithout(t *testing.T) {
	pa, pb := newProcess(t, 0, nil), newProcess(t, 1, nil)
	on := ofiTestConfig("")
	on.OneSided = true
	pvA, err := NewOFI(pa, on)
	if err != nil {
		t.Fatal(err)
	}
	pvB, err := NewOFI(pb, ofiTestConfig(""))
	if err != nil {
		pvA.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { pvA.Close(); pvB.Close() })
	a, b := side{proc: pa, prov: pvA}, side{proc: pb, prov: pvB}
	if a.qp, b.qp, err = ConnectPair(pvA, pvB); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*side{&a, &b} {
		if s.buf, err = s.proc.Registry().NewRegion(1<<20, alloc.RegionConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	src := a.mem(t, 0, 256)
	fill(src.Bytes(), 9)
	if c := post(t, a.qp, WorkRequest{Op: OpWrite, Local: src, Remote: b.loc(t, 512, 256)}); c.Status != StatusSuccess {
		t.Fatal(c.Status)
	}
	if c := post(t, a.qp, WorkRequest{Op: OpRead, Local: a.mem(t, 4096, 256), Remote: b.loc(t, 512, 256)}); c.Status != StatusSuccess {
		t.Fatal(c.Status)
	}
	if string(a.buf.Bytes()[4096:4096+256]) != string(src.Bytes()) {
		t.Fatal("write and read-back differ")
	}
	if n := rmaPieces(pvA); n != 0 {
		t.Fatalf("%d one-sided operations to a peer without OneSided", n)
	}
}

// TestOFIOneSidedRelease: a region a peer wrote into one-sided is
// deregistered when it is released (the registry's OnRelease hook), and a
// locator with another key for its ID is refused.
func TestOFIOneSidedRelease(t *testing.T) {
	a, b := connectPair(t, ofiRMAMake, nil)
	r2, err := b.proc.Registry().NewRegion(64<<10, alloc.RegionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := r2.Locator(0, 64)
	if c := post(t, a.qp, WorkRequest{Op: OpWrite, Local: a.mem(t, 0, 64), Remote: l}); c.Status != StatusSuccess {
		t.Fatal(c.Status)
	}
	rb := b.prov.(*ofiProvider).rma
	registered := func() bool {
		rb.mu.Lock()
		defer rb.mu.Unlock()
		_, ok := rb.mrs[r2.ID()]
		return ok
	}
	if !registered() {
		t.Fatal("the target did not register the region on the first question")
	}
	if err := b.proc.Registry().Release(r2); err != nil {
		t.Fatal(err)
	}
	if registered() {
		t.Fatal("a released region is still registered with libfabric")
	}
	l.Key++
	if c := post(t, a.qp, WorkRequest{Op: OpWrite, Local: a.mem(t, 0, 64), Remote: l}); c.Status != StatusRemoteAccess {
		t.Fatalf("write to a released region with another key: %v", c.Status)
	}
	// The queue pair still works.
	if c := post(t, a.qp, WorkRequest{Op: OpWrite, Local: a.mem(t, 0, 64), Remote: b.loc(t, 0, 64)}); c.Status != StatusSuccess {
		t.Fatal(c.Status)
	}
}
