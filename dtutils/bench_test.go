package dtutils

import (
	"context"
	"fmt"
	"testing"

	"github.com/seriema-go/seriema/alloc"
)

var benchSizes = []int{8, 64, 256, 4096}

// BenchmarkTransmitterWrite: one-sided writes through a Transmitter (the
// paper's "DTutils (auto)"), one goroutine, per transport and size.
func BenchmarkTransmitterWrite(b *testing.B) {
	for _, tr := range transports {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", tr.name, size), func(b *testing.B) {
				a, p := connectPair(b, tr.make, nil)
				tx, err := NewTransmitter(a.qp, a.proc.Config().MaxUnsignaled, TransmitterConfig{})
				if err != nil {
					b.Fatal(err)
				}
				src := a.mem(b, 0, size)
				dsts := make([]alloc.Locator, (1<<20)/size)
				for i := range dsts {
					dsts[i] = p.loc(b, i*size, size)
				}
				b.ReportAllocs()
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := tx.Write(src, dsts[i%len(dsts)]); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkReadRoundTrip: a signaled 8-byte Read waited for: the
// transport's round-trip latency.
func BenchmarkReadRoundTrip(b *testing.B) {
	for _, tr := range transports {
		b.Run(tr.name, func(b *testing.B) {
			a, p := connectPair(b, tr.make, nil)
			tx, _ := NewTransmitter(a.qp, a.proc.Config().MaxUnsignaled, TransmitterConfig{})
			dst := a.mem(b, 0, 8)
			src := p.loc(b, 0, 8)
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(8)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := tx.Read(ctx, dst, src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQueuePairWrite: raw unsignaled posts with a signaled one every
// 64 (selective signaling by hand: "DTutils (+ss)").
func BenchmarkQueuePairWrite(b *testing.B) {
	for _, tr := range transports {
		b.Run(tr.name+"/64", func(b *testing.B) {
			a, p := connectPair(b, tr.make, nil)
			src := a.mem(b, 0, 64)
			dst := p.loc(b, 0, 64)
			var cs [4]Completion
			b.ReportAllocs()
			b.SetBytes(64)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sig := i%64 == 63
				if err := a.qp.Post(WorkRequest{Op: OpWrite, Signaled: sig, Local: src, Remote: dst}); err != nil {
					b.Fatal(err)
				}
				if sig {
					if _, err := a.qp.CQ().Wait(context.Background(), cs[:]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
