package riutils

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// TestCallReturnRemoteObject (DESIGN §6): one-sided call-and-return across
// processes over shm and tcp, typed and raw, with error results, unknown
// handlers, results too big for the object, and a call to oneself.
func TestCallReturnRemoteObject(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			var hInc, hFail, hBig, hStop dsfabric.HandlerID
			var stop atomic.Bool
			job(t, 2, 1, tr, DefaultConfig(), func(hs *dsfabric.Handlers) {
				hInc, _ = dsfabric.RegisterTyped(hs, "inc", func(c *dsfabric.Call, v int) (int, error) { return v + 1, nil })
				hFail, _ = hs.Register("fail", func(c *dsfabric.Call, a []byte) ([]byte, error) { return nil, errors.New("no thanks") })
				hBig, _ = hs.Register("big", func(c *dsfabric.Call, a []byte) ([]byte, error) { return make([]byte, 100), nil })
				hStop, _ = hs.Register("stop", func(c *dsfabric.Call, a []byte) ([]byte, error) { stop.Store(true); return nil, nil })
			}, func(m *Messengers) error {
				if m.ID() == 1 {
					for !stop.Load() {
						m.Poll()
					}
					return m.Err()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				obj, err := m.NewRemoteObject(64)
				if err != nil {
					return err
				}
				for i := 0; i < 1000; i++ {
					v, err := CallReturnTyped[int](ctx, m, 1, hInc, i, obj)
					if err != nil || v != i+1 {
						return fmt.Errorf("call %d: %d, %v", i, v, err)
					}
				}
				if v, err := CallReturnTyped[int](ctx, m, 0, hInc, 41, obj); err != nil || v != 42 {
					return fmt.Errorf("call to oneself: %d, %v", v, err)
				}
				if _, err := m.CallReturn(ctx, 1, hFail, nil, obj); !errors.Is(err, dsfabric.ErrRemote) || !strings.Contains(err.Error(), "no thanks") {
					return fmt.Errorf("failing handler: %v", err)
				}
				if _, err := m.CallReturn(ctx, 1, dsfabric.IDOf("nope"), nil, obj); !errors.Is(err, dsfabric.ErrRemote) || !strings.Contains(err.Error(), "unknown handler") {
					return fmt.Errorf("unknown handler: %v", err)
				}
				if _, err := m.CallReturn(ctx, 1, hBig, nil, obj); !errors.Is(err, dsfabric.ErrRemote) || !strings.Contains(err.Error(), "does not fit") {
					return fmt.Errorf("oversize result: %v", err)
				}
				if v, err := CallReturnTyped[int](ctx, m, 1, hInc, 7, obj); err != nil || v != 8 {
					return fmt.Errorf("after errors: %d, %v", v, err)
				}
				return m.Call(1, hStop, nil)
			})
		})
	}
}
