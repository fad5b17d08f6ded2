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

// TestCallReturnRemoteObject (docs/design.md §6): one-sided call-and-return across
// processes over shm and tcp, typed and raw, with error results, unknown
// handlers, results too big for the object, and a call to oneself.
func TestCallReturnRemoteObject(t *testing.T) {
	for _, tr := range testTransports {
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
					return serveUntil(m, &stop)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				obj, err := m.NewRemoteObject(64)
				if err != nil {
					return err
				}
				for _, n := range []int{-1, m.p.cfg.MaxPayload() + 1} {
					if _, err := m.NewRemoteObject(n); !errors.Is(err, ErrTooLarge) {
						return fmt.Errorf("a RemoteObject of %d bytes (MaxPayload %d): %v, want ErrTooLarge", n, m.p.cfg.MaxPayload(), err)
					}
				}
				o, err := m.NewRemoteObject(m.p.cfg.MaxPayload())
				if err != nil || o.Capacity() != m.p.cfg.MaxPayload() {
					return fmt.Errorf("a RemoteObject of MaxPayload bytes: %v", err)
				}
				if err := o.Close(m); err != nil {
					return err
				}
				if err := o.Close(m); err != nil {
					return fmt.Errorf("a second Close: %v, want nothing done", err)
				}
				if _, err := m.CallReturn(ctx, 1, hInc, nil, o); !errors.Is(err, ErrClosed) {
					return fmt.Errorf("CallReturn with a closed RemoteObject: %v, want ErrClosed", err)
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
				rv, err := NewRemoteValue[int](m, 16)
				if err != nil {
					return err
				}
				defer rv.Close()
				if v, err := rv.Call(ctx, 1, hInc, 99); err != nil || v != 100 {
					return fmt.Errorf("RemoteValue: %d, %v", v, err)
				}
				return m.Call(1, hStop, nil)
			})
		})
	}
}

// TestBroadcastOneSided: every thread of a 2×2 job broadcasts once; every
// thread runs each broadcast exactly once, with its buffer.
func TestBroadcastOneSided(t *testing.T) {
	var hB dsfabric.HandlerID
	var got [4]atomic.Int64 // by local thread rank × source thread
	var bad atomic.Int64
	job(t, 2, 2, "", DefaultConfig(), func(hs *dsfabric.Handlers) {
		hB, _ = hs.Register("bcast", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if string(c.Buffer) != "buf" || len(a) != 1 || a[0] != byte(c.Src) {
				bad.Add(1)
			}
			got[c.Fabric.Names().ThreadRank(c.Dst)].Add(1)
			return nil, nil
		})
	}, func(m *Messengers) error {
		if err := m.BroadcastBuffer(hB, []byte{byte(m.ID())}, []byte("buf")); err != nil {
			return err
		}
		me := m.f.Names().ThreadRank(m.ID())
		deadline := time.Now().Add(30 * time.Second)
		for got[me].Load() < 4 && time.Now().Before(deadline) {
			m.Poll()
		}
		if n := got[me].Load(); n != 4 || bad.Load() != 0 {
			return fmt.Errorf("thread %d ran %d broadcasts (%d malformed), want 4", m.ID(), n, bad.Load())
		}
		// Keep serving: other threads may still be waiting for our writes' turn.
		for i := 0; i < 1000; i++ {
			m.Poll()
		}
		return m.Err()
	})
}
