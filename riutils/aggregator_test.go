package riutils

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// TestAggregatorTradBatches (paper §4.4.2): trad sends whole batches, far
// fewer records than calls, each call still run once in order; a stream of
// 8-byte calls to one handler takes 8 bytes a call.
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
			// One handler, one argument size: a batch is one run, 8 bytes
			// a call under one inner header (docs/wire.md, "Batch").
			perBatch := (4096 - innerHeader) / 8
			if rec := m.Stats().Calls; rec > int64(n/perBatch+2) {
				return fmt.Errorf("%d records for %d calls: not batched (%d calls fit a batch)", rec, n, perBatch)
			}
			return nil
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
}

// flushKept flushes an ovfl Aggregator under policy Fail until nothing is
// kept: each Flush sends what there is room for, and the receiver makes
// room as it runs the calls.
func flushKept(a *Aggregator) error {
	for deadline := time.Now().Add(30 * time.Second); a.Exceeding() != 0; {
		if ex := a.Exceeding(); ex < 0 {
			return fmt.Errorf("%d bytes kept: the count went below zero", ex)
		}
		if err := a.Flush(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d bytes still kept after 30 s of Flush", a.Exceeding())
		}
	}
	return nil
}

// TestAggregatorOvflExceeding: under policy Fail, while the receiver does
// not poll, ovfl keeps calls locally up to MaxExceeding, or until the
// messengers' record memory is used up if that comes first, then fails
// with ErrFull and keeps nothing more; once the receiver polls, Flush
// delivers every accepted call in order.
func TestAggregatorOvflExceeding(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail}
	for _, c := range []struct {
		name        string
		maxEx, size int
	}{{"MaxExceeding", 32 << 10, 8}, {"record memory", 64 << 20, 2000}} {
		t.Run(c.name, func(t *testing.T) {
			withStalledReceiver(t, cfg, func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) error {
				a, err := m.Aggregator(AggregatorConfig{Mode: Ovfl, MaxExceeding: c.maxEx})
				if err != nil {
					return err
				}
				args := make([]byte, c.size)
				i := 0
				for ; i < 1<<22; i++ {
					binary.LittleEndian.PutUint64(args, uint64(i))
					err = a.Call(0, h, args)
					if err != nil {
						break
					}
				}
				if !errors.Is(err, ErrFull) {
					return fmt.Errorf("after %d calls: %v, want ErrFull", i, err)
				}
				ex := a.Exceeding()
				if ex == 0 || ex > c.maxEx {
					return fmt.Errorf("%d bytes kept locally, want (0, %d]", ex, c.maxEx)
				}
				if err := a.Call(0, h, args); !errors.Is(err, ErrFull) || a.Exceeding() != ex {
					return fmt.Errorf("a call past the bound: %v, %d bytes kept; want ErrFull, %d", err, a.Exceeding(), ex)
				}
				accepted <- i
				return flushKept(a)
			})
		})
	}
}

// TestAggregatorOvflBatchesKeptCalls (paper §4.4.2: ovfl performs "local
// aggregation only when an underlying messenger cannot make progress"):
// the calls ovfl keeps while its messenger is full go out batched, many to
// a record, once the receiver makes room, and every call still arrives
// once, in order.
func TestAggregatorOvflBatchesKeptCalls(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail}
	const kept = 5000
	withStalledReceiver(t, cfg, func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) error {
		a, err := m.Aggregator(AggregatorConfig{Mode: Ovfl, FlushSize: 4096, MaxExceeding: 1 << 20})
		if err != nil {
			return err
		}
		var args [8]byte
		i := 0
		call := func() error {
			binary.LittleEndian.PutUint64(args[:], uint64(i))
			i++
			return a.Call(0, h, args[:])
		}
		for a.Exceeding() == 0 { // until the messenger is full: this call is kept
			if err := call(); err != nil {
				return err
			}
		}
		for k := 1; k < kept; k++ {
			if err := call(); err != nil {
				return err
			}
		}
		before := m.Stats().Calls
		accepted <- i
		if err := flushKept(a); err != nil {
			return err
		}
		perBatch := 4096 / innerSize(8, 0)
		if rec := m.Stats().Calls - before; rec > int64(kept/perBatch+2) {
			return fmt.Errorf("%d kept calls went out in %d records: not batched (%d fit a batch)", kept, rec, perBatch)
		}
		return nil
	})
}

// TestAggregatorOvflKeepsLargeCalls (§4.4.2): a call larger than a batch
// that finds the messenger full is kept as a record of its own, behind the
// batch of small calls kept before it, and counts against MaxExceeding
// like any other kept call; once the receiver polls, small and large calls
// arrive once, in order, with their bytes intact.
func TestAggregatorOvflKeepsLargeCalls(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail}
	const flush, large, maxEx = 1024, 3000, 48 << 10
	withStalledSequence(t, cfg, &sequence{body: true},
		func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) (err error) {
			defer unblockOnError(accepted, &err)
			a, err := m.Aggregator(AggregatorConfig{Mode: Ovfl, FlushSize: flush, MaxExceeding: maxEx})
			if err != nil {
				return err
			}
			args := make([]byte, large)
			i := 0
			call := func(size int) error {
				binary.LittleEndian.PutUint64(args, uint64(i))
				seqBody(args[8:size], uint64(i))
				if err := a.Call(0, h, args[:size]); err != nil {
					return err
				}
				i++
				return nil
			}
			sizes := []int{8, 8, large}
			for a.Exceeding() == 0 { // until the messenger is full
				if err := call(sizes[i%3]); err != nil {
					return err
				}
			}
			// Small calls kept in a batch, then a large one behind it.
			for k := 0; k < 6; k++ {
				if err := call(sizes[i%3]); err != nil {
					return err
				}
			}
			if ex := a.Exceeding(); ex < large {
				return fmt.Errorf("%d bytes kept after large calls found the messenger full, want at least %d", ex, large)
			}
			for err == nil {
				err = call(large)
			}
			ex := a.Exceeding()
			if !errors.Is(err, ErrFull) || ex > maxEx || ex+large <= maxEx-recordSize(0) {
				return fmt.Errorf("large calls kept up to %d bytes (MaxExceeding %d), then %v; want ErrFull within a call of the bound", ex, maxEx, err)
			}
			if err := call(large); !errors.Is(err, ErrFull) || a.Exceeding() != ex {
				return fmt.Errorf("a large call past the bound: %v, %d bytes kept; want ErrFull, %d", err, a.Exceeding(), ex)
			}
			accepted <- i
			return flushKept(a)
		})
}

// TestAggregatorOvflRetryWaitsAtBound: under policy Retry a call that
// would pass MaxExceeding waits for room instead of failing, as a full
// messenger's Call does: a stream far longer than the bound to a receiver
// that starts late and then runs slower than the sender gets no error,
// never keeps more than the bound, and every call runs once, in order.
func TestAggregatorOvflRetryWaitsAtBound(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Retry}
	const n, maxEx = 50000, 4 << 10
	var seq sequence
	var h dsfabric.HandlerID
	var kept atomic.Int64
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) {
		h, _ = hs.Register("seq", func(c *dsfabric.Call, args []byte) ([]byte, error) {
			// Slower than the sender (a sleep would last 50 µs or more).
			for t0 := time.Now(); time.Since(t0) < 200*time.Nanosecond; {
			}
			return seq.handler(c, args)
		})
	},
		func(m *Messengers) error {
			// Late, so that the sender fills the messenger and the bound
			// and must wait there.
			time.Sleep(50 * time.Millisecond)
			// 20 s: the stream takes well under a second even under -race.
			return awaitCalls(m, &seq, n, time.Now().Add(20*time.Second), "ovfl must deliver every call once, in order")
		},
		func(m *Messengers) error {
			a, err := m.Aggregator(AggregatorConfig{Mode: Ovfl, MaxExceeding: maxEx})
			if err != nil {
				return err
			}
			var args [8]byte
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err := a.Call(0, h, args[:]); err != nil {
					return fmt.Errorf("call %d: %w", i, err)
				}
				ex := a.Exceeding()
				if ex > maxEx {
					return fmt.Errorf("%d bytes kept, MaxExceeding %d", ex, maxEx)
				}
				kept.Store(max(kept.Load(), int64(ex)))
			}
			return a.Flush()
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
	if kept.Load() == 0 {
		t.Fatal("no call was ever kept: the receiver kept up and the test checked nothing")
	}
}

// TestAggregatorOvflKeepsWithoutAllocating: keeping calls while the
// messenger is full is ovfl's normal work under a slow receiver (paper
// §4.4.2), so a kept call allocates nothing on the heap: its record is in
// registered memory, and learning that the ring is still full costs no
// error value.
func TestAggregatorOvflKeepsWithoutAllocating(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Retry}
	withStalledReceiver(t, cfg, func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) error {
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
}

// TestAggregatorRuns (docs/wire.md, "Batch"): consecutive calls of one
// handler with one argument size share one inner header, a run. A script
// that starts, extends and breaks runs every way it can — another handler,
// another size, a buffer, empty arguments, more calls than a run counts,
// arguments of the largest size a run takes and one byte more, a batch
// filling up — arrives exactly as made, in order: in trad, and in ovfl,
// whose calls are kept in batches while the receiver stalls.
func TestAggregatorRuns(t *testing.T) {
	type call struct {
		h         int
		args, buf []byte
	}
	var script []call
	add := func(n, h, size int, buf []byte) {
		for i := 0; i < n; i++ {
			a := make([]byte, size)
			for j := range a {
				a[j] = byte(len(script) + 7*j)
			}
			script = append(script, call{h, a, buf})
		}
	}
	add(20000, 0, 8, nil) // across batches: 64 KiB hold 8191
	add(5, 1, 3, nil)
	add(1, 1, 3, []byte("xy"))
	add(4, 1, 3, nil)
	add(maxRunCalls+10, 0, 0, nil)
	for i := 0; i < 100; i++ {
		add(1, i%2, 8, nil)
	}
	for i := 0; i < 200; i++ {
		add(1, 0, 1+i%20, nil)
	}
	add(50, 1, 13, nil)
	add(2, 0, maxRunArgs, nil)
	add(2, 0, maxRunArgs+1, nil)
	add(3, 1, 8, []byte("buffer"))
	add(20, 1, 16, nil)

	for _, mode := range []Mode{Trad, Ovfl} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := Config{ChunkSize: 256 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Retry}
			if mode == Ovfl {
				cfg.Policy = Fail // a full messenger keeps calls rather than waits
			}
			var hs [2]dsfabric.HandlerID
			var got []call
			accepted := make(chan int, 1)
			twoThreads(t, cfg, func(r *dsfabric.Handlers) {
				for i := range hs {
					hs[i], _ = r.Register(fmt.Sprint("run", i), func(c *dsfabric.Call, args []byte) ([]byte, error) {
						got = append(got, call{i, bytes.Clone(args), bytes.Clone(c.Buffer)})
						return nil, nil
					})
				}
			},
				func(m *Messengers) error {
					if mode == Ovfl { // stalled: the sender's calls are kept
						<-accepted
					}
					// Each call is checked as it arrives, and a broken
					// messenger ends the wait: a bug fails in well under a
					// second, not at the deadline.
					checked := 0
					for deadline := time.Now().Add(20 * time.Second); checked < len(script); {
						if m.Poll() == 0 {
							if err := m.Err(); err != nil {
								return fmt.Errorf("after %d of %d calls: %w", checked, len(script), err)
							}
							if time.Now().After(deadline) {
								return fmt.Errorf("%d of %d calls arrived", len(got), len(script))
							}
						}
						for ; checked < len(got); checked++ {
							if checked == len(script) {
								return fmt.Errorf("%d calls arrived for %d made", len(got), len(script))
							}
							g, c := got[checked], script[checked]
							if g.h != c.h || !bytes.Equal(g.args, c.args) || !bytes.Equal(g.buf, c.buf) {
								return fmt.Errorf("call %d arrived as handler %d, %d argument bytes, buffer %q; made as handler %d, %d bytes, %q", checked, g.h, len(g.args), g.buf, c.h, len(c.args), c.buf)
							}
						}
					}
					return m.Err()
				},
				func(m *Messengers) error {
					a, err := m.Aggregator(AggregatorConfig{Mode: mode, FlushSize: 64 << 10, MaxExceeding: 4 << 20})
					if err != nil {
						return err
					}
					kept := 0
					for i, c := range script {
						if err := a.CallBuffer(0, hs[c.h], c.args, c.buf); err != nil {
							return fmt.Errorf("call %d: %w", i, err)
						}
						kept = max(kept, a.Exceeding())
					}
					accepted <- len(script)
					if mode == Trad {
						return a.Flush()
					}
					if kept == 0 {
						return errors.New("ovfl kept no call: its batches were not tested")
					}
					return flushKept(a)
				})
		})
	}
}

// unknownCalls counts the warnings about calls to unknown handlers.
type unknownCalls struct{ n *atomic.Int64 }

func (u unknownCalls) Enabled(context.Context, slog.Level) bool { return true }
func (u unknownCalls) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "unknown handler") {
		u.n.Add(1)
	}
	return nil
}
func (u unknownCalls) WithAttrs([]slog.Attr) slog.Handler { return u }
func (u unknownCalls) WithGroup(string) slog.Handler      { return u }

// TestAggregatorRunUnknownHandler: a run of calls to a handler the
// receiver does not know is counted call by call in Stats and reported
// once per run, not once per call (a batch of 8-byte calls would log 511
// lines), and the calls after it still run.
func TestAggregatorRunUnknownHandler(t *testing.T) {
	const unknown, known = 3000, 10
	var warnings atomic.Int64
	cfg := DefaultConfig()
	cfg.Logger = slog.New(unknownCalls{&warnings})
	var seq sequence
	var h dsfabric.HandlerID
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			if err := awaitCalls(m, &seq, known, time.Now().Add(20*time.Second), "the calls after a run to an unknown handler must run"); err != nil {
				return err
			}
			if s := m.Stats(); s.UnknownHandlers != unknown {
				return fmt.Errorf("%d calls to an unknown handler counted, want %d", s.UnknownHandlers, unknown)
			}
			return nil
		},
		func(m *Messengers) error {
			a, err := m.Aggregator(AggregatorConfig{Mode: Trad, FlushSize: 4096})
			if err != nil {
				return err
			}
			var args [8]byte
			for i := 0; i < unknown; i++ {
				if err := a.Call(0, dsfabric.IDOf("riutils-test.nobody"), args[:]); err != nil {
					return err
				}
			}
			for i := 0; i < known; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err := a.Call(0, h, args[:]); err != nil {
					return err
				}
			}
			return a.Flush()
		})
	// 3000 calls fill six batches: one run each.
	if n := warnings.Load(); n < 1 || n > unknown/((4096-innerHeader)/8)+2 {
		t.Fatalf("%d warnings for %d calls to an unknown handler in runs, want one per run", n, unknown)
	}
}
