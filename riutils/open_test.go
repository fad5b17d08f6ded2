package riutils

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

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
// new chunks), and mapped in the sender's page tables (mapChunk), so
// neither side faults them in one at a time.
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
				if len(m.opening) != 0 {
					return errors.New("Open with a cancelled context started an allocation")
				}
				if err := m.Open(context.Background(), dsfabric.ThreadID(all)); !errors.Is(err, dsfabric.ErrBadThread) {
					return fmt.Errorf("Open of thread %d of %d: %v, want ErrBadThread", all, all, err)
				}
				if n := m.Stats().Opened; n != 0 || len(m.out) != 0 {
					return fmt.Errorf("after refused Opens: %d messengers set up (%d in the map), want none", n, len(m.out))
				}
				// The rings calls are built in are populated as well
				// (newRing): their first lap writes records without a
				// fault a page.
				for name, r := range map[string]*alloc.LinearCircular{"call": m.ring, "small-call": m.small} {
					b, err := r.Alloc(16 << 10)
					if err != nil {
						return err
					}
					n, err := alloc.Resident(b.Bytes())
					b.Done()
					if err != nil || n < len(b.Bytes())/4096 {
						return fmt.Errorf("%s ring: %d of a %d-byte segment's pages in memory before its first write (%v)", name, n, len(b.Bytes()), err)
					}
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
						// Mapped here by the sender on the chunk's first
						// fill: the transport maps a region's resident pages
						// when it first maps the region, which may be before
						// this chunk was allocated in it.
						// (Not checked where /proc/self/pagemap cannot be
						// read.)
						n, err := mappedPages(s.direct)
						unreadable := errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist)
						if !unreadable && (err != nil || n != len(s.direct)/4096) {
							return fmt.Errorf("messenger to thread %d: %d of the first chunk's %d pages mapped in this process after Open (%v)", d, n, len(s.direct)/4096, err)
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

// mappedPages counts the 4 KiB pages of b (page-aligned) that have an
// entry in this process's page tables (bit 63 of /proc/self/pagemap),
// without touching b: a page in memory but not mapped here faults on this
// process's first touch all the same.
func mappedPages(b []byte) (int, error) {
	if len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%4096 != 0 {
		return 0, fmt.Errorf("%d bytes at %p: not a page-aligned range", len(b), unsafe.SliceData(b))
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	pages := (len(b) + 4095) / 4096
	vec := make([]byte, 8*pages)
	if _, err := f.ReadAt(vec, int64(uintptr(unsafe.Pointer(&b[0]))/4096*8)); err != nil {
		return 0, err
	}
	n := 0
	for i := 0; i < pages; i++ {
		n += int(vec[8*i+7] >> 7) // little-endian: bit 63 is the top bit of the last byte
	}
	return n, nil
}

// TestOpenContextDuringAllocation (paper §4.4, messenger set-up): a ctx
// that ends while the destination's process has not answered the
// allocation ends Open's wait with ctx's error, without setting anything
// up; the allocation is not abandoned (the destination would otherwise
// hold chunks for this thread that it reads before those of a second
// request): the first call afterwards takes it over, no second request
// is made, and the call arrives.
func TestOpenContextDuringAllocation(t *testing.T) {
	p, err := NewProcess(dsfabric.NewHandlers(), Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int32
	var hold atomic.Bool
	gate := make(chan struct{})
	p.beforeAlloc = func() {
		requests.Add(1)
		if hold.Load() {
			<-gate
		}
	}
	var got atomic.Int32
	h, err := p.handlers.Register("count", func(*dsfabric.Call, []byte) ([]byte, error) {
		got.Add(1)
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	j, err := start(context.Background(), dsfabric.Config{Procs: 1, ThreadsPerProcess: 2, Handlers: p.handlers, Logger: quiet}, p,
		func(w *dsfabric.Worker, m *Messengers) {
			if w.Fabric().Names().ThreadRank(w.ID()) == 1 {
				Serve(w, m)
				return
			}
			result <- func() error {
				hold.Store(true)
				// Without ctx honoured, Open waits for the gate: open it
				// late rather than hang.
				late := time.AfterFunc(3*time.Second, func() { close(gate) })
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				t0 := time.Now()
				err := m.Open(ctx, 1)
				waited := time.Since(t0)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || waited > 2*time.Second {
					return fmt.Errorf("Open while the allocation is held: %v after %v, want context.DeadlineExceeded within 2 s", err, waited)
				}
				if n := m.Stats().Opened; n != 0 || m.out[1] != nil {
					return fmt.Errorf("after a cancelled Open: %d messengers set up, want none", n)
				}
				if late.Stop() {
					close(gate)
				}
				if err := m.Call(1, h, nil); err != nil {
					return err
				}
				if n := requests.Load(); n != 1 {
					return fmt.Errorf("%d allocation requests for the messenger to thread 1, want 1 (the first call takes over the one Open left)", n)
				}
				if n := m.Stats().Opened; n != 1 {
					return fmt.Errorf("%d messengers set up after the call, want 1", n)
				}
				if err := m.Flush(); err != nil {
					return err
				}
				arrive := func(n int32) error {
					deadline := time.Now().Add(20 * time.Second)
					for got.Load() < n {
						if time.Now().After(deadline) {
							return fmt.Errorf("%d of %d calls to thread 1 arrived in 20 s", got.Load(), n)
						}
						time.Sleep(time.Millisecond)
					}
					return nil
				}
				if err := arrive(1); err != nil {
					return err
				}
				// Nothing is left pending: a messenger set up again after a
				// shutdown asks for chunks of its own.
				if err := m.Shutdown(context.Background(), 1); err != nil {
					return err
				}
				if err := m.Call(1, h, nil); err != nil {
					return err
				}
				if n := requests.Load(); n != 2 {
					return fmt.Errorf("%d allocation requests after a shutdown and a new call, want 2", n)
				}
				if err := m.Flush(); err != nil {
					return err
				}
				return arrive(2)
			}()
			Serve(w, m)
		})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	select {
	case err := <-result:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the test body did not finish in 60 s")
	}
}
