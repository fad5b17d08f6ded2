package riutils

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// TestCallReturnCalleeKilled (reliability): the callee's process dies
// (SIGKILL, in the handler) while a one-sided CallReturn waits for its
// reply; the caller gets ErrRankDead within seconds, over shm and tcp.
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
