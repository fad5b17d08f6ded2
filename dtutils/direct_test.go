package dtutils

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

// The shm hot path (syncQP.writeNow): a Transmitter's unsignaled write over
// shm is a bounds check against a cached mapping, the copy and its seal.
// These tests hold it to every check Post makes, after the mapping is
// cached, and to the recycling it allows.

// TestSHMWriteTakesNoTicket: writes over shm complete at once, so they
// neither signal nor leave anything outstanding, and land.
func TestSHMWriteTakesNoTicket(t *testing.T) {
	a, b := connectPair(t, transportByName(t, "shm").make, nil)
	tx, err := NewTransmitter(a.qp, 64, TransmitterConfig{SignalEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10000; i++ {
		src := a.mem(t, 8*(i%512), 8)
		binary.LittleEndian.PutUint64(src.Bytes(), uint64(i))
		if err := tx.Write(src, b.loc(t, 8*(i%4096), 8)); err != nil {
			t.Fatal(err)
		}
	}
	if f, o := tx.FlushNumber(), a.qp.Outstanding(); f != 0 || o != 0 {
		t.Errorf("after 10000 shm writes: flush number %d, %d outstanding; want 0 and 0", f, o)
	}
	for i := 10000 - 4096; i < 10000; i++ {
		if v := binary.LittleEndian.Uint64(b.buf.Bytes()[8*(i%4096):]); v != uint64(i) {
			t.Fatalf("slot %d holds %d, want %d", i%4096, v, i)
		}
	}
}

// TestTransmitterWriteChecksEveryAccess: once a region's mapping is cached,
// a write with the wrong key, past the region's end, of the wrong length
// or to another process is still refused, and nothing lands.
func TestTransmitterWriteChecksEveryAccess(t *testing.T) {
	cases := []struct {
		name string
		bad  func(l alloc.Locator) alloc.Locator
		want error
	}{
		{"key", func(l alloc.Locator) alloc.Locator { l.Key ^= 1; return l }, ErrRemoteAccess},
		{"past-end", func(l alloc.Locator) alloc.Locator { l.Offset = 4<<20 - 4; return l }, ErrRemoteAccess},
		{"offset-overflow", func(l alloc.Locator) alloc.Locator { l.Offset = ^uint64(0) - 3; return l }, ErrRemoteAccess},
		{"length", func(l alloc.Locator) alloc.Locator { l.Length = 16; return l }, ErrBadRequest},
		{"process", func(l alloc.Locator) alloc.Locator { l.Process = 7; return l }, ErrRemoteAccess},
		{"region", func(l alloc.Locator) alloc.Locator { l.Region += 100; return l }, ErrRemoteAccess},
	}
	for _, tr := range transports {
		for _, c := range cases {
			t.Run(tr.name+"/"+c.name, func(t *testing.T) {
				a, b := connectPair(t, tr.make, nil)
				tx, _ := NewTransmitter(a.qp, 1024, TransmitterConfig{SignalEvery: 4})
				src := a.mem(t, 0, 8)
				copy(src.Bytes(), "sentinel")
				good := b.loc(t, 0, 8)
				if err := tx.Write(src, good); err != nil { // maps and caches the region
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := tx.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				before := bytes.Clone(b.buf.Bytes())
				copy(src.Bytes(), "trespass")
				err := tx.Write(src, c.bad(good))
				if err == nil {
					err = tx.Flush(ctx)
				}
				if !errors.Is(err, c.want) {
					t.Fatalf("bad write: %v, want %v", err, c.want)
				}
				if !bytes.Equal(before, b.buf.Bytes()) {
					t.Fatal("a refused write changed the target region")
				}
			})
		}
	}
}

// TestSyncWriteRecyclesAtOnce: on a synchronous transport a written
// buffer is reusable when Write returns, so a circular allocator of two
// units serves any number of writes without a Flush.
func TestSyncWriteRecyclesAtOnce(t *testing.T) {
	for _, name := range []string{"loop", "shm"} {
		t.Run(name, func(t *testing.T) {
			a, b := connectPair(t, transportByName(t, name).make, nil)
			tx, _ := NewTransmitter(a.qp, 1024, TransmitterConfig{})
			zone, err := alloc.NewZoneAllocator(a.proc.Registry(), alloc.ZoneConfig{SuperchunkSize: 1 << 20, ChunkSize: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			ring, err := alloc.NewLinearCircular(zone, alloc.CircularConfig{UnitSize: 4096, InitialUnits: 2, MaxUnits: 2, Align: 8})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 20000; i++ {
				m, err := ring.Alloc(64)
				if err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
				if err := tx.Write(m, b.loc(t, 64*(i%1024), 64)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func transportByName(t testing.TB, name string) struct {
	name string
	make func(t testing.TB, pa, pb *Process) (Provider, Provider)
} {
	for _, tr := range transports {
		if tr.name == name {
			return tr
		}
	}
	t.Fatalf("no transport %q", name)
	panic("unreachable")
}

// TestSyncSendNow: over loop and shm a Transmitter's Send delivers at once
// (no ticket, nothing outstanding, its buffer recycled), and a send that
// finds no receive posted, or one too small, is that call's error: the
// queue pair is not failed, and the next send, once a receive is posted,
// lands.
func TestSyncSendNow(t *testing.T) {
	for _, name := range []string{"loop", "shm"} {
		t.Run(name, func(t *testing.T) {
			a, b := connectPair(t, transportByName(t, name).make, nil)
			tx, _ := NewTransmitter(a.qp, 64, TransmitterConfig{SignalEvery: 4})
			msg := a.mem(t, 0, 16)
			copy(msg.Bytes(), "sixteen bytes ok")
			if err := tx.Send(msg, 7); !errors.Is(err, ErrReceiverNotReady) {
				t.Fatalf("send with no receive posted: %v, want ErrReceiverNotReady", err)
			}
			if err := b.proc.PostRecv(b.mem(t, 0, 8), 1); err != nil {
				t.Fatal(err)
			}
			if err := tx.Send(msg, 7); !errors.Is(err, ErrLength) {
				t.Fatalf("send into an 8-byte receive: %v, want ErrLength", err)
			}
			var cs [4]Completion
			if n := b.proc.RecvCQ().Poll(cs[:]); n != 1 || cs[0].Status != StatusLength {
				t.Fatalf("receiver saw %v, want one StatusLength completion", cs[:n])
			}
			for i := 0; i < 100; i++ {
				if err := b.proc.PostRecv(b.mem(t, 64, 16), uint64(i)); err != nil {
					t.Fatal(err)
				}
				if err := tx.Send(msg, uint32(i)); err != nil {
					t.Fatalf("send %d after the failures: %v", i, err)
				}
				if n := b.proc.RecvCQ().Poll(cs[:]); n != 1 || cs[0].Status != StatusSuccess || cs[0].Imm != uint32(i) || cs[0].Bytes != 16 {
					t.Fatalf("send %d: receiver saw %+v", i, cs[:n])
				}
			}
			if !bytes.Equal(b.mem(t, 64, 16).Bytes(), msg.Bytes()) {
				t.Fatal("the message did not land")
			}
			if f, o, err := tx.FlushNumber(), a.qp.Outstanding(), tx.Err(); f != 0 || o != 0 || err != nil {
				t.Errorf("flush number %d, %d outstanding, error %v; want 0, 0, nil", f, o, err)
			}
		})
	}
}

// TestTransmitterSendChecksMaxTransfer: a send longer than the process's
// MaxTransfer is refused with ErrBadRequest on every transport, even
// where the peer posted a receive large enough for it, and nothing
// arrives.
func TestTransmitterSendChecksMaxTransfer(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			a, b := connectPair(t, tr.make, func(c *ProcessConfig) { c.MaxTransfer, c.CallBytes = 1024, 1024 })
			if err := b.proc.PostRecv(b.mem(t, 0, 4096), 1); err != nil {
				t.Fatal(err)
			}
			tx, _ := NewTransmitter(a.qp, 1024, TransmitterConfig{SignalEvery: 4})
			if err := tx.Send(a.mem(t, 0, 2048), 0); !errors.Is(err, ErrBadRequest) {
				t.Fatalf("a 2048-byte send with MaxTransfer 1024: %v, want ErrBadRequest", err)
			}
			if err := tx.Send(a.mem(t, 0, 1024), 0); err != nil {
				t.Fatalf("a send at the limit: %v", err)
			}
			if c := wait(t, b.proc.RecvCQ()); c.Status != StatusSuccess || c.Bytes != 1024 {
				t.Fatalf("the receive completed %+v, want the 1024-byte send", c)
			}
		})
	}
}
