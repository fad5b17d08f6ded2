package dsfabric

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seriema-go/seriema/internal/jobtest"
)

// TestCallReturnCalleeKilled (reliability): the callee's process dies
// (SIGKILL, in the handler) while a send-based CallReturn waits for its
// reply; the caller gets ErrRankDead within seconds, over shm and tcp.
func TestCallReturnCalleeKilled(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			h := NewHandlers()
			die, _ := h.Register("die", func(c *Call, a []byte) ([]byte, error) {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the reply never comes
			})
			result := make(chan error, 1)
			f, err := Start(context.Background(), Config{
				Procs: 2, Transport: tr, Handlers: h, Args: jobtest.RunArgs(t), Logger: quiet,
				Worker: func(w *Worker) {
					if w.Fabric().Rank() == 1 {
						w.Serve(context.Background()) // runs die
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					callee, _ := w.Fabric().Names().Thread(1, 0)
					_, err := w.Fabric().CallReturn(ctx, w.ID(), callee, die, nil)
					switch {
					case errors.Is(err, ErrRankDead):
						result <- nil
					case errors.Is(err, context.DeadlineExceeded):
						result <- errors.New("CallReturn was still waiting 10 s after its callee's process died (a death must fail the calls waiting on that rank)")
					default:
						result <- errors.New("CallReturn to a callee that died gave " + errString(err) + ", want ErrRankDead")
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-result; err != nil {
				t.Fatal(err)
			}
			// Close reports rank 1's death, and returns: its last barrier
			// must not wait for a dead rank.
			closed := make(chan error, 1)
			go func() { closed <- f.Close() }()
			select {
			case err := <-closed:
				if err == nil || !strings.Contains(err.Error(), "rank 1") {
					t.Fatalf("Close after rank 1 died gave %v, want an error naming rank 1", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Close was still waiting 15 s after rank 1 died (a barrier waits only for live ranks)")
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestMalformedControlCutsRankOff (reliability, bad input): a rank that
// sends rank 0 a malformed coordinator message (a barrier without its
// sequence) is cut off and reported dead with the reason, on both sides,
// and barriers go on without it. Before, the short frame counted as an
// arrival at barrier 0.
func TestMalformedControlCutsRankOff(t *testing.T) {
	f, err := Start(context.Background(), Config{Procs: 2, Args: jobtest.RunArgs(t), Logger: quiet, BootstrapTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	other := 1 - f.Rank()
	if f.Rank() == 1 {
		if err := f.client.send([]byte{msgBarrier}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.deadErr(other) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("rank %d: rank %d still live 10 s after the malformed message", f.Rank(), other)
		}
		time.Sleep(time.Millisecond)
	}
	if err := f.deadErr(other); !errors.Is(err, ErrRankDead) || (f.Rank() == 0 && !strings.Contains(err.Error(), "malformed")) {
		t.Fatalf("rank %d: %v, want ErrRankDead (at rank 0 with the reason)", f.Rank(), err)
	}
	if f.Rank() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.Barrier(ctx); err != nil {
			t.Fatalf("a barrier after rank 1 was cut off: %v", err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatalf("rank %d: Close still waiting 15 s after its peer was cut off", f.Rank())
	}
}
