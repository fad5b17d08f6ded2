package riutils

import (
	"fmt"
	"sync/atomic"
	"testing"

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
