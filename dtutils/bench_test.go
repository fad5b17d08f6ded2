package dtutils

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// BenchmarkSendRecv: a stream of sends into the peer's shared receive
// queue, which a second goroutine polls and reposts at once, as dsfabric's
// routing does; the sender keeps at most the posted receives in flight (a
// credit count, as dsfabric's). What one send-based message costs below
// dsfabric, per transport and size.
func BenchmarkSendRecv(b *testing.B) {
	for _, tr := range transports {
		for _, size := range []int{8, 64, 256} {
			for _, inPlace := range []bool{false, true} {
				name := fmt.Sprintf("%s/%d", tr.name, size)
				if inPlace {
					name += "/inplace" // PollRecvInPlace: the receives stay posted
				}
				b.Run(name, func(b *testing.B) { benchSendRecv(b, tr.make, size, inPlace) })
			}
		}
	}
}

func benchSendRecv(b *testing.B, mk func(testing.TB, *Process, *Process) (Provider, Provider), size int, inPlace bool) {
	const posted = 32
	a, p := connectPair(b, mk, func(c *ProcessConfig) { c.ReceiveSlots = 2 * posted })
	tx, err := NewTransmitter(a.qp, a.proc.Config().MaxUnsignaled, TransmitterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	bufs := make([]alloc.Memory, posted)
	for i := range bufs {
		bufs[i] = p.mem(b, i*size, size)
		if err := p.proc.PostRecv(bufs[i], uint64(i)); err != nil {
			b.Fatal(err)
		}
	}
	src := a.mem(b, 0, size)
	src.Bytes()[0] = 0xa5
	var consumed atomic.Int64
	var stop atomic.Bool // the sender failed: nothing more will come
	defer stop.Store(true)
	done := make(chan error, 1)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	go func() {
		var cs [16]Completion
		var inl [len(cs) * InlineMax]byte
		w := benchWait()
		for got := 0; got < b.N && !stop.Load(); {
			var n int
			if inPlace {
				n = p.proc.PollRecvInPlace(cs[:], inl[:])
			} else {
				n = p.proc.PollRecv(cs[:])
			}
			if n == 0 {
				p.proc.Progress()
				w.Wait()
				continue
			}
			w.Reset()
			for i, c := range cs[:n] {
				// The handler reads the message.
				msg := inl[i*InlineMax:]
				if !c.InPlace {
					msg = bufs[c.WRID].Bytes()
				}
				if c.Status != StatusSuccess || c.Bytes != size || msg[0] != 0xa5 {
					done <- fmt.Errorf("receive %d: status %v, %d bytes", got, c.Status, c.Bytes)
					return
				}
				if c.InPlace {
					continue
				}
				if err := p.proc.PostRecv(bufs[c.WRID], c.WRID); err != nil {
					done <- err
					return
				}
			}
			got += n
			consumed.Add(int64(n))
		}
		done <- nil
	}()
	w := benchWait()
	for i := 0; i < b.N; i++ {
		for int64(i)-consumed.Load() >= posted {
			a.proc.Progress()
			w.Wait()
		}
		w.Reset()
		if err := tx.Send(src, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRingStream: one goroutine enqueues entries of the given size
// into the shared-memory ring that the receive queue and completion queue
// are built of, a second dequeues and reads them. What one message would
// cost if a small send's payload travelled inside its completion (one ring
// operation on each side instead of BenchmarkSendRecv's four plus the
// payload's line): the price of the design alternative docs/benchmarks.md
// discusses for send / write.
func BenchmarkRingStream(b *testing.B) {
	for _, entry := range []int{24, 56, 120} { // a 32-, 64- or 128-byte cell
		b.Run(fmt.Sprintf("%d", entry), func(b *testing.B) {
			mem := make([]byte, ringBytes(256, entry))
			r, err := initRing(mem, 256, entry)
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan error, 1)
			b.ReportAllocs()
			b.SetBytes(int64(entry))
			b.ResetTimer()
			go func() {
				e := make([]byte, entry)
				w := benchWait()
				for i := 0; i < b.N; {
					if !r.dequeue(e) {
						w.Wait()
						continue
					}
					w.Reset()
					if e[0] != byte(i) {
						done <- fmt.Errorf("entry %d carries %d", i, e[0])
						return
					}
					i++
				}
				done <- nil
			}()
			e := make([]byte, entry)
			w := benchWait()
			for i := 0; i < b.N; {
				e[0] = byte(i)
				if !r.enqueue(e) {
					w.Wait()
					continue
				}
				w.Reset()
				i++
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// benchWait is the wait of the streaming benchmarks' loops: both sides stay
// hot, so that they measure the data path and not the wake-ups of the
// sleeping phase.
func benchWait() HotWait { return HotWait{Spin: 50 * time.Microsecond, Yield: time.Second} }
