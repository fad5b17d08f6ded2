package riutils

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// TestCallReturnCalleeKilled (reliability): the callee's process dies
// (SIGKILL, in the handler) while a one-sided CallReturn waits for its
// reply; the caller gets ErrRankDead within seconds, over shm and tcp, and
// so does a Synchronizer's Wait with a call outstanding.
func TestCallReturnCalleeKilled(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			h := dsfabric.NewHandlers()
			die, _ := h.Register("die", func(c *dsfabric.Call, a []byte) ([]byte, error) {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the reply never comes
			})
			f, err := dyingJob(t, tr, h, func(w *dsfabric.Worker, m *Messengers) error {
				if w.Fabric().Rank() == 1 {
					for {
						m.Poll() // until the handler kills this process
					}
				}
				obj, err := m.NewRemoteObject(8)
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err = m.CallReturn(ctx, 1, die, nil, obj)
				switch {
				case errors.Is(err, dsfabric.ErrRankDead):
					// A synchronizer still counting a call to the dead
					// rank stops waiting too.
					sy, err := m.NewSynchronizer(1)
					if err != nil {
						return err
					}
					defer sy.Close()
					if err := sy.Wait(ctx); !errors.Is(err, dsfabric.ErrRankDead) {
						return errors.New("Synchronizer.Wait with a rank dead gave " + errString(err) + ", want ErrRankDead")
					}
					return nil
				case errors.Is(err, context.DeadlineExceeded):
					return errors.New("CallReturn was still waiting 10 s after its callee's process died (it must watch the callee's rank)")
				}
				return errors.New("CallReturn to a callee that died gave " + errString(err) + ", want ErrRankDead")
			})
			if err != nil {
				t.Fatal(err)
			}
			f.Close() // reports rank 1's death
		})
	}
}

// TestUseAfterFabricClose: Messengers kept past their fabric's Close
// refuse every call with ErrClosed instead of touching the unmapped
// chunks and feedback words (each of these faulted before), Poll runs
// nothing, and an Aggregator holding calls reports them lost on Flush.
func TestUseAfterFabricClose(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			var h dsfabric.HandlerID
			var (
				kept *Messengers
				agg  *Aggregator
				obj  *RemoteObject
				syn  *Synchronizer
			)
			job(t, 2, 1, tr, DefaultConfig(), func(hs *dsfabric.Handlers) {
				h, _ = hs.Register("noop", func(c *dsfabric.Call, a []byte) ([]byte, error) { return nil, nil })
			}, func(m *Messengers) error {
				if m.f.Rank() != 0 {
					return nil
				}
				kept = m
				var err error
				if err = m.Call(1, h, []byte{1}); err != nil {
					return err
				}
				if agg, err = m.Aggregator(AggregatorConfig{Mode: Trad}); err != nil {
					return err
				}
				if err = agg.Call(1, h, []byte{2}); err != nil { // kept, not flushed
					return err
				}
				if obj, err = m.NewRemoteObject(8); err != nil {
					return err
				}
				syn, err = m.NewSynchronizer(1)
				return err
			})
			if kept == nil {
				return // rank 1
			}
			if n := kept.Poll(); n != 0 {
				t.Errorf("Poll after Close ran %d calls", n)
			}
			ctx := context.Background()
			calls := map[string]func() error{
				"Call":      func() error { return kept.Call(1, h, nil) },
				"Call self": func() error { return kept.Call(0, h, nil) },
				"Broadcast": func() error { return kept.Broadcast(h, nil) },
				"CallReturn": func() error {
					_, err := kept.CallReturn(ctx, 1, h, nil, obj)
					return err
				},
				"Shutdown":          func() error { return kept.Shutdown(ctx, 1) },
				"Aggregator.Flush":  agg.Flush,
				"Aggregator.Call":   func() error { return agg.Call(1, h, nil) },
				"Synchronizer.Wait": func() error { return syn.Wait(ctx) },
				"NewSynchronizer": func() error {
					_, err := kept.NewSynchronizer(1)
					return err
				},
				"NewRemoteObject": func() error {
					_, err := kept.NewRemoteObject(8)
					return err
				},
			}
			for name, call := range calls {
				if err := call(); !errors.Is(err, ErrClosed) {
					t.Errorf("%s after the fabric closed: %v, want ErrClosed", name, err)
				}
			}
		})
	}
}

// TestFlushAfterFabricClose: calls RetryAsync still kept when the fabric
// closes can never go out (the helper stops at the close); Messengers.Flush
// then reports them lost with ErrClosed. Before, it waited for them for
// ever. Rank 1's first call sleeps, so that rank 0 closes with calls kept.
func TestFlushAfterFabricClose(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: RetryAsync, MaxAsyncBytes: 1 << 20}
	var h dsfabric.HandlerID
	var kept *Messengers
	var slept atomic.Bool
	job(t, 2, 1, "", cfg, func(hs *dsfabric.Handlers) {
		h, _ = hs.Register("slow", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if !slept.Swap(true) {
				time.Sleep(3 * time.Second)
			}
			return nil, nil
		})
	}, func(m *Messengers) error {
		if m.f.Rank() != 0 {
			return nil
		}
		kept = m
		for i := 0; m.Kept() == 0; i++ {
			if i > 1<<16 {
				return errors.New("the messenger never filled")
			}
			if err := m.Call(1, h, []byte{1}); err != nil {
				return err
			}
		}
		return nil
	})
	if kept == nil {
		return // rank 1
	}
	if kept.Kept() == 0 {
		t.Fatal("every kept call went out before the close: the test did not exercise Flush after it")
	}
	done := make(chan error, 1)
	go func() { done <- kept.Flush() }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Flush with calls kept past the close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Flush with calls kept past the close still waits after 10 s")
	}
}

// TestPollerOutlivesFabric: a Poller serving on a goroutine of its own
// with a context that never ends (the fabric's Close does not wait for
// it) stops when the fabric closes, and its Polls afterwards run nothing.
// Before, Serve polled on into the unmapped chunks.
func TestPollerOutlivesFabric(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			var h dsfabric.HandlerID
			var ran atomic.Int64
			served := make(chan *Poller, 1)
			serveDone := make(chan struct{})
			job(t, 2, 2, tr, DefaultConfig(), func(hs *dsfabric.Handlers) {
				h, _ = hs.Register("count", func(c *dsfabric.Call, a []byte) ([]byte, error) { ran.Add(1); return nil, nil })
			}, func(m *Messengers) error {
				const calls = 1000
				switch {
				case m.f.Rank() == 0 && m.f.Names().ThreadRank(m.ID()) == 1:
					pl, err := m.p.NewPoller(1)
					if err != nil {
						return err
					}
					served <- pl
					go func() { pl.Serve(context.Background()); close(serveDone) }()
					deadline := time.Now().Add(30 * time.Second)
					for ran.Load() < calls && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					if n := ran.Load(); n < calls {
						return fmt.Errorf("the Poller ran %d of %d calls", n, calls)
					}
					return nil
				case m.f.Rank() == 1 && m.f.Names().ThreadRank(m.ID()) == 0:
					dst, _ := m.f.Names().Thread(0, 1)
					for i := 0; i < calls; i++ {
						if err := m.Call(dst, h, []byte{1}); err != nil {
							return err
						}
					}
				}
				return nil
			})
			select {
			case pl := <-served: // rank 0
				select {
				case <-serveDone:
				case <-time.After(10 * time.Second):
					t.Fatal("the Poller's Serve still runs 10 s after the fabric closed")
				}
				if n := pl.Poll(); n != 0 {
					t.Errorf("Poll after the fabric closed ran %d calls", n)
				}
			default: // rank 1
			}
		})
	}
}
