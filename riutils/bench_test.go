package riutils

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// BenchmarkCall: calls from one thread to another of the same process
// (the micro benchmark's send, write, trad and ovfl modes in one process;
// send goes through dsfabric over loop, the others one-sided over shm),
// the receiver running each. Allocations are counted over
// both threads: the hot path of sender and receiver allocates nothing.
func BenchmarkCall(b *testing.B) {
	for _, mode := range []string{"send", "write", "trad", "ovfl"} {
		for _, size := range []int{8, 64} {
			b.Run(fmt.Sprintf("%s/%d", mode, size), func(b *testing.B) {
				var h dsfabric.HandlerID
				var ran atomic.Int64
				var stop atomic.Bool
				b.ReportAllocs()
				b.SetBytes(int64(size))
				twoThreads(b, DefaultConfig(), func(hs *dsfabric.Handlers) {
					h, _ = hs.Register("bench", func(c *dsfabric.Call, a []byte) ([]byte, error) { ran.Add(1); return nil, nil })
				}, func(m *Messengers) error {
					if mode != "send" {
						return serveUntil(m, &stop)
					}
					w := m.f.Worker(m.f.Names().ThreadRank(m.self))
					for !stop.Load() {
						w.Poll()
					}
					return nil
				},
					func(m *Messengers) error {
						defer stop.Store(true)
						call := func(a []byte) error { return m.Call(0, h, a) }
						flush := func() error { return nil }
						switch mode {
						case "send":
							call = func(a []byte) error { return m.f.Call(m.self, 0, h, a, nil) }
						case "trad", "ovfl":
							md := Trad
							if mode == "ovfl" {
								md = Ovfl
							}
							agg, err := m.Aggregator(AggregatorConfig{Mode: md})
							if err != nil {
								return err
							}
							call = func(a []byte) error { return agg.Call(0, h, a) }
							flush = agg.Flush
						}
						args := make([]byte, size)
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							args[0] = byte(i)
							if err := call(args); err != nil {
								return err
							}
						}
						if err := flush(); err != nil {
							return err
						}
						for ran.Load() < int64(b.N) {
							m.Poll()
						}
						b.StopTimer()
						return nil
					})
			})
		}
	}
}

// BenchmarkOvflKept (paper §4.4.2): what an ovfl call costs while its
// messenger is full and the call is kept locally, the work ovfl does for a
// sender that runs ahead of its receiver. Rounds of keptPerRound calls are
// timed with the receiver stalled; between rounds, untimed, it takes them
// all. Per op: one kept call.
func BenchmarkOvflKept(b *testing.B) {
	const keptPerRound = 20000
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail}
	var h dsfabric.HandlerID
	var ran atomic.Int64
	var poll, stop atomic.Bool
	b.ReportAllocs()
	b.SetBytes(8)
	twoThreads(b, cfg, func(hs *dsfabric.Handlers) {
		h, _ = hs.Register("bench", func(c *dsfabric.Call, a []byte) ([]byte, error) { ran.Add(1); return nil, nil })
	}, func(m *Messengers) error {
		for !stop.Load() {
			if !poll.Load() {
				time.Sleep(10 * time.Microsecond) // stalled: stay off the sender's core
			} else if m.Poll() == 0 {
				runtime.Gosched()
			}
		}
		return m.Err()
	}, func(m *Messengers) error {
		defer stop.Store(true)
		a, err := m.Aggregator(AggregatorConfig{Mode: Ovfl, MaxExceeding: 64 << 20})
		if err != nil {
			return err
		}
		args := make([]byte, 8)
		calls := int64(0)
		call := func() error {
			calls++
			return a.Call(0, h, args)
		}
		// deliver lets the receiver run every call made so far.
		deliver := func() error {
			poll.Store(true)
			for a.Exceeding() != 0 || ran.Load() != calls {
				if err := a.Flush(); err != nil {
					return err
				}
				runtime.Gosched()
			}
			return nil
		}
		b.ResetTimer()
		for done := 0; done < b.N; {
			b.StopTimer()
			// Deliver the last round, then fill the messenger: from here
			// on every call is kept.
			if err := deliver(); err != nil {
				return err
			}
			poll.Store(false)
			for a.Exceeding() == 0 {
				if err := call(); err != nil {
					return err
				}
			}
			n := min(keptPerRound, b.N-done)
			b.StartTimer()
			for i := 0; i < n; i++ {
				if err := call(); err != nil {
					return err
				}
			}
			done += n
		}
		b.StopTimer()
		return deliver()
	})
}
