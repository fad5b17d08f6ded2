package riutils

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/internal/jobtest"
)

// TestCallReturnCalleeKilled (reliability): the callee's process dies
// (SIGKILL, in the handler) while a one-sided CallReturn waits for its
// reply; the caller gets ErrRankDead within seconds, over shm and tcp.
func TestCallReturnCalleeKilled(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			h := dsfabric.NewHandlers()
			die, _ := h.Register("die", func(c *dsfabric.Call, a []byte) ([]byte, error) {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the reply never comes
			})
			cfg := DefaultConfig()
			cfg.Logger = quiet
			p, err := NewProcess(h, cfg)
			if err != nil {
				t.Fatal(err)
			}
			start := make(chan struct{})
			result := make(chan error, 1)
			f, err := dsfabric.Start(context.Background(), dsfabric.Config{
				Procs: 2, Transport: tr, Handlers: h, Args: jobtest.RunArgs(t), Logger: quiet,
				Worker: func(w *dsfabric.Worker) {
					<-start
					m, err := p.Messengers(0)
					if err != nil {
						result <- err
						return
					}
					if w.Fabric().Rank() == 1 {
						for {
							m.Poll() // until the handler kills this process
						}
					}
					obj, err := m.NewRemoteObject(8)
					if err != nil {
						result <- err
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_, err = m.CallReturn(ctx, 1, die, nil, obj)
					switch {
					case errors.Is(err, dsfabric.ErrRankDead):
						result <- nil
					case errors.Is(err, context.DeadlineExceeded):
						result <- errors.New("CallReturn was still waiting 10 s after its callee's process died (it must watch the callee's rank)")
					default:
						result <- errors.New("CallReturn to a callee that died gave " + errString(err) + ", want ErrRankDead")
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Bind(f); err != nil {
				t.Fatal(err)
			}
			close(start)
			if err := <-result; err != nil {
				t.Fatal(err)
			}
			f.Close() // reports rank 1's death
		})
	}
}
