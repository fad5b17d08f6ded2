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
// the records each process sends.
func BenchmarkRepartition(b *testing.B) {
	for _, d := range []Design{WR, RD, SR} {
		for _, depth := range []int{8, 32} {
			b.Run(fmt.Sprintf("%v/depth=%d", d, depth), func(b *testing.B) {
				j := newJob(&testing.T{}, transports[1].make, 2, 1, 1, Config{Design: d, Depth: depth})
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
