package riutils

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// TestAggregatorTradBatches (paper §4.4.2): trad sends whole batches, far
// fewer records than calls, each call still run once in order.
func TestAggregatorTradBatches(t *testing.T) {
	var seq sequence
	var h dsfabric.HandlerID
	const n = 50000
	twoThreads(t, DefaultConfig(), func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			return awaitCalls(m, &seq, n, time.Now().Add(30*time.Second), "trad must deliver every call once, in order")
		},
		func(m *Messengers) error {
			a, err := m.Aggregator(AggregatorConfig{Mode: Trad, FlushSize: 4096})
			if err != nil {
				return err
			}
			var args [8]byte
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err := a.Call(0, h, args[:]); err != nil {
					return err
				}
			}
			if err := a.Flush(); err != nil {
				return err
			}
			perBatch := 4096 / innerSize(8)
			if rec := m.Stats().Calls; rec > int64(n/perBatch+2) {
				return fmt.Errorf("%d records for %d calls: not batched (%d calls fit a batch)", rec, n, perBatch)
			}
			return nil
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
}

// TestAggregatorOvflExceeding: while the receiver does not poll, ovfl keeps
// calls locally up to MaxExceeding, then fails with ErrFull; once the
// receiver polls, Flush delivers every accepted call in order.
func TestAggregatorOvflExceeding(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Retry}
	var seq sequence
	var h dsfabric.HandlerID
	accepted := make(chan int, 1)
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		stalledReceiver(&seq, accepted),
		func(m *Messengers) error {
			const maxEx = 32 << 10
			a, err := m.Aggregator(AggregatorConfig{Mode: Ovfl, MaxExceeding: maxEx})
			if err != nil {
				return err
			}
			var args [8]byte
			i := 0
			for ; i < 100000; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				err = a.Call(0, h, args[:])
				if err != nil {
					break
				}
			}
			if !errors.Is(err, ErrFull) {
				return fmt.Errorf("after %d calls: %v, want ErrFull", i, err)
			}
			if ex := a.Exceeding(); ex == 0 || ex > maxEx {
				return fmt.Errorf("%d bytes kept locally, want (0, %d]", ex, maxEx)
			}
			accepted <- i
			if err := a.Flush(); err != nil { // Retry: waits for the receiver
				return err
			}
			if a.Exceeding() != 0 {
				return fmt.Errorf("%d bytes still kept after Flush", a.Exceeding())
			}
			return nil
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
}

// TestAggregatorOvflKeepsWithoutAllocating: keeping calls while the
// messenger is full is ovfl's normal work under a slow receiver (paper
// §4.4.2), so a kept call allocates nothing on the heap: its record is in
// registered memory, and learning that the ring is still full costs no
// error value.
func TestAggregatorOvflKeepsWithoutAllocating(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Retry}
	var seq sequence
	var h dsfabric.HandlerID
	accepted := make(chan int, 1)
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		stalledReceiver(&seq, accepted),
		func(m *Messengers) error {
			a, err := m.Aggregator(AggregatorConfig{Mode: Ovfl, MaxExceeding: 4 << 20})
			if err != nil {
				return err
			}
			var args [8]byte
			i := 0
			call := func() {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err == nil {
					err = a.Call(0, h, args[:])
				}
				i++
			}
			for a.Exceeding() == 0 && i < 100000 && err == nil {
				call() // until the two chunks are full
			}
			for k := 0; k < 1000 && err == nil; k++ {
				call() // the kept list grows to its working size
			}
			allocs := testing.AllocsPerRun(2000, call)
			if err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
			if a.Exceeding() == 0 {
				return errors.New("the messenger never filled: the test measured nothing")
			}
			accepted <- i
			if err := a.Flush(); err != nil {
				return err
			}
			if allocs != 0 {
				return fmt.Errorf("%v heap allocations per kept call, want 0", allocs)
			}
			return nil
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
}
