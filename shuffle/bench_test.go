package shuffle

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
)

// BenchmarkRepartition: two processes (in this one) over shm repartition
// 100-byte records, one sending and one receiving thread each; bytes are
// the records each process sends. The 1 KiB buffers in a window of 2048
// are where a receiver's per-buffer work over what waits (its adaptive
// spare, SR's queue of arrivals) once grew with the lag.
func BenchmarkRepartition(b *testing.B) {
	type shape struct {
		buffer, depth int
		adaptive      bool
	}
	for _, d := range []Design{WR, RD, SR} {
		for _, w := range []shape{{16 << 10, 8, false}, {16 << 10, 32, false}, {1 << 10, 2048, false}, {1 << 10, 2048, true}} {
			name := fmt.Sprintf("%v/buffer=%d/depth=%d", d, w.buffer, w.depth)
			if w.adaptive {
				name += "/adaptive"
			}
			b.Run(name, func(b *testing.B) {
				j := newJob(&testing.T{}, transports[1].make, 2, 1, 1, Config{Design: d, BufferBytes: w.buffer, Depth: w.depth, Adaptive: w.adaptive})
				rec := make([]byte, 100)
				b.SetBytes(int64(len(rec)))
				b.ReportAllocs()
				b.ResetTimer()
				ctx := context.Background()
				var wg sync.WaitGroup
				for r := 0; r < 2; r++ {
					wg.Add(2)
					go func() {
						defer wg.Done()
						sh, _ := j.senders[r][0].NewShuffle(Repartition(2))
						for i := 0; i < b.N/2; i++ {
							if err := sh.Put(ctx, i&1, rec); err != nil {
								b.Error(err)
								return
							}
						}
						sh.Close(ctx)
					}()
					go func() {
						defer wg.Done()
						rc := j.receivers[r][0].NewReceive()
						for {
							if _, err := rc.Next(ctx); err == io.EOF {
								return
							} else if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}
