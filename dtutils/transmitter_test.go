package dtutils

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
)

// hammerOps returns the operations per goroutine: the full million without
// the race detector (make test runs that separately), fewer under it.
func hammerOps(transport string) int {
	if v, err := strconv.Atoi(os.Getenv("SERIEMA_HAMMER_OPS")); err == nil && v > 0 {
		return v
	}
	n := 100_000
	if transport == "late" || transport == "loop" {
		n = 1_000_000 // in memory; late runs the whole protocol
	}
	if raceEnabled {
		n /= 20
	}
	return n
}

// TestTransmitterHammer (paper §4.1): 8 goroutines post on one Transmitter.
// The queue pair errors if MaxUnsignaled is ever exceeded, and every circular
// unit is reused only after the write that last read it reached the target.
func TestTransmitterHammer(t *testing.T) {
	// Over loop and shm, writes bypass the protocol (they complete at
	// once); late and tcp run it.
	all := append(transports[:len(transports):len(transports)], struct {
		name string
		make func(t testing.TB, pa, pb *Process) (Provider, Provider)
	}{"late", lateMake})
	for _, tr := range all {
		t.Run(tr.name, func(t *testing.T) {
			const goroutines, slots = 8, 64
			a, b := connectPair(t, tr.make, func(c *ProcessConfig) { c.MaxUnsignaled = 256 })
			// Writes of 8 to 64 bytes with 16 bytes per ticket: weights
			// 1 to 5, so groups hold 7 to 32 operations.
			tx, err := NewTransmitter(a.qp, 256, TransmitterConfig{SignalEvery: 32, SignalBytes: 32 * 16})
			if err != nil {
				t.Fatal(err)
			}
			zone, err := alloc.NewZoneAllocator(a.proc.Registry(), alloc.ZoneConfig{SuperchunkSize: 8 << 20, ChunkSize: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			ops := hammerOps(tr.name)
			remote := b.buf.Bytes()
			var reuses, maxOutstanding atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					ring, err := alloc.NewCircular(zone, alloc.CircularConfig{UnitSize: 64, InitialUnits: 16, MaxUnits: 1024, Growth: alloc.Linear, Align: 8})
					if err != nil {
						t.Error(err)
						return
					}
					type use struct{ slot, value uint64 }
					last := map[int]use{} // unit offset → its last write
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					for i := 0; i < ops; i++ {
						u, err := ring.Next()
						if errors.Is(err, alloc.ErrBusy) {
							if err := tx.Flush(ctx); err != nil {
								t.Error(err)
								return
							}
							u, err = ring.Next()
						}
						if err != nil {
							t.Errorf("goroutine %d op %d: %v", g, i, err)
							return
						}
						if prev, ok := last[u.Offset()]; ok {
							reuses.Add(1)
							got := (*atomic.Uint64)(unsafe.Pointer(&remote[64*prev.slot])).Load()
							if got < prev.value {
								t.Errorf("unit reused before its write completed: slot %d holds %d, write was %d", prev.slot, got, prev.value)
								return
							}
						}
						slot := uint64(g*slots + i%slots)
						value := uint64(i + 1)
						n := 8 * (1 + (i+g)%8)
						m, _ := u.Slice(0, n)
						binary.LittleEndian.PutUint64(m.Bytes(), value)
						loc, _ := b.buf.Locator(int(64*slot), n)
						if err := tx.Write(m, loc); err != nil {
							t.Errorf("goroutine %d op %d: %v", g, i, err)
							return
						}
						last[u.Offset()] = use{slot, value}
						if o := int64(a.qp.Outstanding()); o > maxOutstanding.Load() {
							maxOutstanding.Store(o)
						}
					}
				}(g)
			}
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := tx.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tx.Err(); err != nil {
				t.Fatal(err)
			}
			// Every goroutine's last writes are at the target after Flush.
			for g := 0; g < goroutines; g++ {
				for s := 0; s < slots && s < ops; s++ {
					want := uint64(ops - (ops-1-s)%slots)
					got := (*atomic.Uint64)(unsafe.Pointer(&remote[64*(g*slots+s)])).Load()
					if got != want {
						t.Fatalf("goroutine %d slot %d holds %d, want %d", g, s, got, want)
					}
				}
			}
			if reuses.Load() == 0 {
				t.Fatal("no unit was ever recycled")
			}
			t.Logf("%d goroutines × %d ops: %d reuses, flush number %d, max outstanding unsignaled %d (limit 256)",
				goroutines, ops, reuses.Load(), tx.FlushNumber(), maxOutstanding.Load())
		})
	}
}

// TestTransmitterSignalsSelectively: one goroutine, k = 8: exactly one
// operation in 8 is signaled in steady state, so the flush number tracks
// ops/8.
func TestTransmitterSignalsSelectively(t *testing.T) {
	// The late transport: over loop and shm writes complete at once and
	// take no ticket, so they would signal nothing.
	a, b := connectPair(t, lateMake, nil)
	tx, err := NewTransmitter(a.qp, 1024, TransmitterConfig{SignalEvery: 8})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := a.buf.Memory(0, 8)
	dst, _ := b.buf.Locator(0, 8)
	for i := 0; i < 800; i++ {
		if err := tx.Write(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	if f := tx.FlushNumber(); f != 99 {
		t.Errorf("flush number after 800 ops with k=8 is %d, want 99", f)
	}
	if o := a.qp.Outstanding(); o >= 8 {
		t.Errorf("%d unsignaled outstanding with k=8", o)
	}
	if _, err := NewTransmitter(a.qp, 16, TransmitterConfig{SignalEvery: 17}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("SignalEvery above MaxUnsignaled: %v", err)
	}
}

// TestTransmitterSignalsByBytes (§4.1, with a byte bound): an operation
// takes 1 + n/u tickets, u = SignalBytes/k, at most k. In one goroutine the
// flush number is the group of the newest ticket, so it counts tickets.
func TestTransmitterSignalsByBytes(t *testing.T) {
	a, b := connectPair(t, lateMake, nil)
	tx, err := NewTransmitter(a.qp, 1024, TransmitterConfig{SignalEvery: 8, SignalBytes: 800})
	if err != nil {
		t.Fatal(err)
	}
	write := func(n, times int) {
		t.Helper()
		src, _ := a.buf.Memory(0, n)
		dst, _ := b.buf.Locator(0, n)
		for i := 0; i < times; i++ {
			if err := tx.Write(src, dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 8-byte writes weigh 1: tickets 0..799, F = 799/8.
	write(8, 800)
	if f := tx.FlushNumber(); f != 99 {
		t.Fatalf("after 800 writes of 8 bytes F = %d, want 99", f)
	}
	// 400-byte writes weigh 1 + 400/100 = 5: tickets 800, 805, … 1595.
	write(400, 160)
	if f := tx.FlushNumber(); f != 1595/8 {
		t.Fatalf("after 160 writes of 400 bytes F = %d, want %d (5 tickets each)", f, 1595/8)
	}
	// A 10 000-byte write would weigh 101 and is capped at k = 8: ten take
	// tickets 1600 … 1672, one group each, and the 8-byte writes after
	// them fill group 210 with one signaled operation, as in steady state.
	// Uncapped, every one of those 8 would be signaled, F catching up.
	write(10000, 10)
	if f := tx.FlushNumber(); f != 209 {
		t.Fatalf("after 10 writes of 10 000 bytes F = %d, want 209 (8 tickets each)", f)
	}
	write(8, 8)
	if f := tx.FlushNumber(); f != 210 {
		t.Fatalf("8 small writes after large ones moved F to %d, want 210", f)
	}
	if o := a.qp.Outstanding(); o >= 8 {
		t.Errorf("%d unsignaled outstanding with k=8", o)
	}
	if _, err := NewTransmitter(a.qp, 1024, TransmitterConfig{SignalEvery: 8, SignalBytes: 7}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("SignalBytes below SignalEvery: %v", err)
	}
}

// TestTransmitterFailure: a refused operation puts the Transmitter in error
// state, and later posts report it.
func TestTransmitterFailure(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			a, b := connectPair(t, tr.make, nil)
			tx, _ := NewTransmitter(a.qp, 1024, TransmitterConfig{SignalEvery: 4})
			src, _ := a.buf.Memory(0, 8)
			bad, _ := b.buf.Locator(0, 8)
			bad.Key++
			for i := 0; i < 8 && tx.Err() == nil; i++ {
				tx.Write(src, bad)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := tx.Flush(ctx)
			if !errors.Is(err, ErrRemoteAccess) || !errors.Is(tx.Err(), ErrRemoteAccess) {
				t.Fatalf("Flush = %v, Err = %v; want remote access errors", err, tx.Err())
			}
			good, _ := b.buf.Locator(0, 8)
			if err := tx.Write(src, good); !errors.Is(err, ErrRemoteAccess) {
				t.Fatalf("post after failure = %v", err)
			}
			// A signaled operation that fails returns its own failure, on
			// a Transmitter that had none before.
			tx2, _ := NewTransmitter(a.qp, 1024, TransmitterConfig{})
			dst, _ := a.buf.Memory(512, 8)
			if err := tx2.Read(ctx, dst, bad); !errors.Is(err, ErrRemoteAccess) {
				t.Fatalf("a Read from a locator with a wrong key = %v, want ErrRemoteAccess", err)
			}
		})
	}
}

func TestTransmitterReadAndAtomics(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			a, b := connectPair(t, tr.make, nil)
			tx, _ := NewTransmitter(a.qp, 1024, TransmitterConfig{})
			ctx := context.Background()
			binary.LittleEndian.PutUint64(b.buf.Bytes()[64:], 5)
			scratch, _ := a.buf.Memory(0, 8)
			w, _ := b.buf.Locator(64, 8)
			if old, err := tx.FetchAdd(ctx, scratch, w, 3); err != nil || old != 5 {
				t.Fatalf("FetchAdd = %d, %v", old, err)
			}
			if old, err := tx.CompareSwap(ctx, scratch, w, 8, 1); err != nil || old != 8 {
				t.Fatalf("CompareSwap = %d, %v", old, err)
			}
			dst, _ := a.buf.Memory(512, 8)
			if err := tx.Read(ctx, dst, w); err != nil || binary.LittleEndian.Uint64(dst.Bytes()) != 1 {
				t.Fatalf("Read = %d, %v", binary.LittleEndian.Uint64(dst.Bytes()), err)
			}
		})
	}
}

// TestTransmitterWriteImm: a WriteImm through the Transmitter lands its
// data, consumes one posted receive at the target with its immediate, and
// one with no receive posted fails the Transmitter with ErrReceiverNotReady.
func TestTransmitterWriteImm(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			a, b := connectPair(t, tr.make, nil)
			tx, err := NewTransmitter(a.qp, 1024, TransmitterConfig{SignalEvery: 2})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const n = 5
			for i := 0; i < n; i++ {
				if err := b.proc.PostRecv(b.mem(t, 64*i, 8), uint64(300+i)); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < n; i++ {
				src := a.mem(t, 256*i, 24)
				fill(src.Bytes(), i)
				if err := tx.WriteImm(src, b.loc(t, 8192+256*i, 24), uint32(40+i)); err != nil {
					t.Fatalf("WriteImm %d: %v", i, err)
				}
			}
			if err := tx.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			for i := 0; i < n; i++ {
				r := wait(t, b.proc.RecvCQ())
				if r.Op != OpRecvImm || r.Status != StatusSuccess || r.WRID != uint64(300+i) || r.Imm != uint32(40+i) || r.Bytes != 24 {
					t.Fatalf("receive %d: %+v", i, r)
				}
				want := make([]byte, 24)
				fill(want, i)
				if got := b.buf.Bytes()[8192+256*i : 8192+256*i+24]; !bytes.Equal(got, want) {
					t.Fatalf("write %d landed %x, want %x", i, got, want)
				}
			}
			if tx.Poll() < 0 || tx.Err() != nil {
				t.Fatalf("after the writes: Err = %v", tx.Err())
			}
			// No receive left at the target: the write is refused, and the
			// Transmitter reports it, as a verbs queue pair would.
			src := a.mem(t, 0, 8)
			tx.WriteImm(src, b.loc(t, 0, 8), 1)
			if err := tx.Flush(ctx); !errors.Is(err, ErrReceiverNotReady) || !errors.Is(tx.Err(), ErrReceiverNotReady) {
				t.Fatalf("WriteImm with no receive posted: Flush = %v, Err = %v", err, tx.Err())
			}
		})
	}
}
