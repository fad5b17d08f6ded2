package riutils

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// TestMessengersOpen (paper §4.4, "created on first use"): Open sets up the
// messengers to the threads it is given before any call, with their first
// chunks and, where the transport shares memory, the first chunk mapped;
// the calls that follow use them (no further set-up), opening again is a
// no-op, a cancelled context or an invalid thread sets nothing up. The
// first chunk's pages are in memory once set up (the receiver populates
// new chunks), so neither side faults them in one at a time.
func TestMessengersOpen(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			const procs, threads = 2, 2
			var got atomic.Int64 // calls run in this process
			var h dsfabric.HandlerID
			job(t, procs, threads, tr, DefaultConfig(), func(hs *dsfabric.Handlers) {
				h, _ = hs.Register("count", func(*dsfabric.Call, []byte) ([]byte, error) {
					got.Add(1)
					return nil, nil
				})
			}, func(m *Messengers) error {
				all := m.f.Names().Threads()
				cancelled, cancel := context.WithCancel(context.Background())
				cancel()
				if err := m.Open(cancelled, 0); !errors.Is(err, context.Canceled) {
					return fmt.Errorf("Open with a cancelled context: %v, want context.Canceled", err)
				}
				if err := m.Open(context.Background(), dsfabric.ThreadID(all)); !errors.Is(err, dsfabric.ErrBadThread) {
					return fmt.Errorf("Open of thread %d of %d: %v, want ErrBadThread", all, all, err)
				}
				if n := m.Stats().Opened; n != 0 || len(m.out) != 0 {
					return fmt.Errorf("after refused Opens: %d messengers set up (%d in the map), want none", n, len(m.out))
				}
				dsts := make([]dsfabric.ThreadID, all)
				for i := range dsts {
					dsts[i] = dsfabric.ThreadID(i)
				}
				if err := m.Open(context.Background(), dsts...); err != nil {
					return err
				}
				opened := map[dsfabric.ThreadID]*sender{}
				for _, d := range dsts {
					s := m.out[d]
					if s == nil {
						return fmt.Errorf("no messenger to thread %d after Open", d)
					}
					if qp := s.tx.QueuePair(); dtutils.CanMapRemote(qp) {
						if s.direct == nil || !dtutils.Mapped(qp, s.chunks[s.cur]) {
							return fmt.Errorf("messenger to thread %d over %s: first chunk not mapped after Open", d, m.f.Transport(s.rank))
						}
						// Populated by the receiver when it allocated it.
						if n, err := alloc.Resident(s.direct); err != nil || n != len(s.direct)/4096 {
							return fmt.Errorf("messenger to thread %d: %d of the first chunk's %d pages in memory after Open (%v)", d, n, len(s.direct)/4096, err)
						}
					}
					opened[d] = s
				}
				if err := m.Open(context.Background(), dsts...); err != nil {
					return err
				}
				for _, d := range dsts {
					if err := m.Call(d, h, nil); err != nil {
						return err
					}
				}
				for d, s := range opened {
					if m.out[d] != s {
						return fmt.Errorf("the messenger to thread %d was set up again", d)
					}
				}
				if n := m.Stats().Opened; n != int64(all) {
					return fmt.Errorf("%d messengers set up, want %d (one per thread, at Open)", n, all)
				}
				// Every thread of the job calls each thread of this process
				// once: wait for them all, polling this thread's share.
				deadline := time.Now().Add(20 * time.Second)
				for got.Load() < int64(all*threads) {
					if time.Now().After(deadline) {
						return fmt.Errorf("%d of %d calls arrived in 20 s", got.Load(), all*threads)
					}
					if m.Poll() == 0 {
						time.Sleep(10 * time.Microsecond)
					}
				}
				return m.Err()
			})
		})
	}
}
