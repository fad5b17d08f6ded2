package dtutils

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/seriema-go/seriema/alloc"
)

// FuzzRecvCompl feeds the receive completion ring entries as a corrupt or
// hostile peer could write them (the ring lives in memory shared with every
// shm peer): polling never panics, never copies more than the receive it
// took holds, and an inline entry that finds no receive is dropped and
// counted, not delivered.
func FuzzRecvCompl(f *testing.F) {
	var e [recvComplSize]byte
	putRecvComplHdr(e[:], Completion{Op: OpRecv, Bytes: 8, Src: 1}, complInline)
	f.Add(e[:], uint8(2), uint16(64))
	putRecvCompl(e[:], Completion{Op: OpRecv, WRID: 7, Bytes: 3})
	f.Add(e[:], uint8(0), uint16(8))
	binary.LittleEndian.PutUint32(e[0:], 1<<31)
	e[14] = 0xff
	f.Add(e[:], uint8(1), uint16(1))
	f.Fuzz(func(t *testing.T, entries []byte, posted uint8, size uint16) {
		p := newProcess(t, 0, func(c *ProcessConfig) { c.ReceiveSlots = 8 })
		r, err := p.Registry().NewRegion(8<<16, alloc.RegionConfig{Name: "fuzz"})
		if err != nil {
			t.Fatal(err)
		}
		n := int(posted % 8)
		sz := 1 + int(size)%(1<<16-1)
		for i := 0; i < n; i++ {
			m, _ := r.Memory(i<<16, sz)
			if err := p.PostRecv(m, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		cells := enqueueCells(t, p, entries)
		var cs [16]Completion
		got := p.RecvCQ().Poll(cs[:])
		left, strays, k := n, 0, 0
		for _, cell := range cells {
			want, inline := getRecvCompl(cell[:])
			if inline && left == 0 {
				strays++
				continue
			}
			if k >= got {
				t.Fatalf("%d completions for %d entries", got, len(cells))
			}
			c := cs[k]
			k++
			if !inline {
				if c != want {
					t.Fatalf("completion %+v, want it as written: %+v", c, want)
				}
				continue
			}
			left--
			fits := want.Bytes <= sz && want.Bytes <= recvInlineMax
			if c.WRID >= uint64(n) || !fits && (c.Status != StatusLength || c.Bytes != 0) || fits && (c.Status != want.Status || c.Bytes != want.Bytes) {
				t.Fatalf("inline entry %+v into a %d-byte receive completed as %+v", want, sz, c)
			}
		}
		if k != got || strays != int(p.strays.Load()) {
			t.Fatalf("%d completions and %d strays, want %d and %d", got, p.strays.Load(), k, strays)
		}
	})
}

// enqueueCells writes entries into p's completion ring as a peer could,
// one cell per recvComplSize bytes (at most 8), and returns the cells.
func enqueueCells(t *testing.T, p *Process, entries []byte) [][recvComplSize]byte {
	var cells [][recvComplSize]byte
	for len(entries) > 0 && len(cells) < 8 {
		var cell [recvComplSize]byte
		entries = entries[copy(cell[:], entries):]
		if !p.rcq.enqueue(cell[:]) {
			t.Fatalf("the ring refused entry %d", len(cells))
		}
		cells = append(cells, cell)
	}
	return cells
}

// FuzzRecvComplInPlace polls entries as a peer could write them through
// PollRecvInPlace: an inline one comes back in place with its message (or
// StatusLength for a corrupt length) and counts its receive posted again,
// any other as written; none is lost or invented.
func FuzzRecvComplInPlace(f *testing.F) {
	var e [recvComplSize]byte
	putRecvComplHdr(e[:], Completion{Op: OpRecv, Bytes: 8, Src: 1, Imm: 5}, complInline)
	copy(e[recvComplHdr:], "8 bytes!")
	f.Add(e[:])
	putRecvCompl(e[:], Completion{Op: OpRecv, WRID: 7, Bytes: 3})
	f.Add(e[:])
	binary.LittleEndian.PutUint32(e[0:], 1<<31)
	e[14] = 0xff
	f.Add(e[:])
	f.Fuzz(func(t *testing.T, entries []byte) {
		p := newProcess(t, 0, func(c *ProcessConfig) { c.ReceiveSlots = 8 })
		cells := enqueueCells(t, p, entries)
		ready := p.cnt.ready.Load()
		var cs [16]Completion
		buf := make([]byte, len(cs)*InlineMax)
		got := p.PollRecvInPlace(cs[:], buf)
		if got != len(cells) {
			t.Fatalf("%d completions for %d entries", got, len(cells))
		}
		inline := 0
		for i, cell := range cells {
			want, inl := getRecvCompl(cell[:])
			c := cs[i]
			if !inl {
				if c != want {
					t.Fatalf("completion %+v, want it as written: %+v", c, want)
				}
				continue
			}
			inline++
			want.InPlace = true
			if want.Bytes > InlineMax {
				want.Status, want.Bytes = StatusLength, 0
			}
			if c != want || !bytes.Equal(buf[i*InlineMax:][:c.Bytes], cell[recvComplHdr:recvComplHdr+c.Bytes]) {
				t.Fatalf("inline entry %d completed as %+v, want %+v and its message", i, c, want)
			}
		}
		if r := p.cnt.ready.Load(); r != ready+uint64(inline) || p.posted.Load() != uint64(inline) || p.polled.Load() != uint64(got) {
			t.Fatalf("ready %d→%d, posted %d, polled %d after %d entries, %d inline", ready, r, p.posted.Load(), p.polled.Load(), got, inline)
		}
	})
}

// FuzzOpenQueues attaches to a receive-queue region with arbitrary
// contents, as a peer's memory could hold: it is refused or every part
// lies inside it.
func FuzzOpenQueues(f *testing.F) {
	p := newProcess(f, 0, func(c *ProcessConfig) { c.ReceiveSlots = 4; c.CallSlots = 2; c.CallBytes = 64 })
	f.Add(append([]byte(nil), p.region.Bytes()...))
	f.Add(p.region.Bytes()[:queueLayout(4).call])
	// A completion ring of another capacity, or of other entries, beside
	// the receive queue (a peer of another version).
	l := queueLayout(4)
	for _, c := range []struct{ capacity, entry int }{{2, recvComplSize}, {4, recvComplSize - 8}} {
		mem := append([]byte(nil), p.region.Bytes()...)
		if _, err := initRing(mem[l.rcq:l.cnt], c.capacity, c.entry); err != nil {
			f.Fatal(err)
		}
		f.Add(mem)
	}
	f.Fuzz(func(t *testing.T, mem []byte) {
		var seen atomic.Uint64
		rs, _, err := openQueues(mem, &seen)
		if err != nil {
			return
		}
		l := queueLayout(int(rs.srq.capacity))
		if l.call > len(mem) || rs.rcq.capacity != rs.srq.capacity || rs.rcq.entry != recvComplSize {
			t.Fatalf("accepted a %d-byte region laid out as %+v", len(mem), l)
		}
	})
}

// TestInlineSendAfterRegionRelease: a receive whose region was released
// after it was posted completes with StatusRemoteAccess, even though the
// delivery before it cached that region.
func TestInlineSendAfterRegionRelease(t *testing.T) {
	for _, name := range []string{"loop", "shm"} {
		t.Run(name, func(t *testing.T) {
			a, b := connectPair(t, transportByName(t, name).make, nil)
			r, err := b.proc.Registry().NewRegion(4096, alloc.RegionConfig{Name: "inbox"})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				m, _ := r.Memory(64*i, 64)
				if err := b.proc.PostRecv(m, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			msg := a.mem(t, 0, 16)
			fill(msg.Bytes(), 1)
			for i := 0; i < 2; i++ {
				if c := post(t, a.qp, WorkRequest{Op: OpSend, Local: msg}); c.Status != StatusSuccess {
					t.Fatalf("send %d: %+v", i, c)
				}
			}
			if c := wait(t, b.proc.RecvCQ()); c.Status != StatusSuccess || c.WRID != 0 || r.Bytes()[15] != msg.Bytes()[15] {
				t.Fatalf("first receive: %+v", c)
			}
			b.proc.Registry().Release(r)
			if c := wait(t, b.proc.RecvCQ()); c.Status != StatusRemoteAccess || c.WRID != 1 {
				t.Fatalf("receive in a released region: %+v", c)
			}
		})
	}
}
