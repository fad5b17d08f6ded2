package riutils

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// TestSection3_AllocationRequestsChecked (the paper's no-setup chunk
// allocation, a service call on the receiver's process): a request for a
// thread of another process, or for more chunks than a messenger may
// hold, is refused.
func TestSection3_AllocationRequestsChecked(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ChunkSize = 64 << 10
	job(t, 2, 1, "", cfg, func(*dsfabric.Handlers) {}, func(m *Messengers) error {
		if m.f.Rank() != 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		fb, _ := m.fbReg.Memory(0, 8)
		there, _ := m.f.Names().Thread(1, 0)
		for _, tc := range []struct {
			what string
			req  allocReq
		}{
			{"for a thread of another process", allocReq{src: m.self, dst: m.self, count: 1, size: cfg.ChunkSize, feedback: fb.Locator()}},
			{"of more than MaxChunks", allocReq{src: m.self, dst: there, count: cfg.MaxChunks + 1, size: cfg.ChunkSize, feedback: fb.Locator()}},
			{"of no chunks", allocReq{src: m.self, dst: there, count: 0, size: cfg.ChunkSize, feedback: fb.Locator()}},
			{"of another chunk size", allocReq{src: m.self, dst: there, count: 1, size: 2 * cfg.ChunkSize, feedback: fb.Locator()}},
		} {
			_, err := m.f.CallServiceReturn(ctx, m.self, 1, m.p.allocID, tc.req.marshal())
			if !errors.Is(err, dsfabric.ErrRemote) || !strings.Contains(err.Error(), "allocation of") {
				return fmt.Errorf("an allocation request %s: %v, want a refusal", tc.what, err)
			}
		}
		return nil
	})
}

// TestStagingRingsRecycled: calls staged in registered memory (tcp, or
// NoMapping over shm) pass through the small-record ring (64 units of
// 64 KiB) ten times over, its units reused as their writes complete, and
// every call arrives intact and in order.
func TestStagingRingsRecycled(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.NoMapping = true
			const calls = 20000
			var h dsfabric.HandlerID
			var next, bad atomic.Int64
			job(t, 2, 1, tr, cfg, func(hs *dsfabric.Handlers) {
				h, _ = hs.Register("staged", func(c *dsfabric.Call, a []byte) ([]byte, error) {
					if len(a) != 2000 || binary.LittleEndian.Uint64(a) != uint64(next.Load()) || a[1999] != byte(next.Load()) {
						bad.Add(1)
					}
					next.Add(1)
					return nil, nil
				})
			}, func(m *Messengers) error {
				if m.f.Rank() == 1 {
					deadline := time.Now().Add(30 * time.Second)
					for next.Load() < calls && time.Now().Before(deadline) {
						m.Poll()
					}
					if next.Load() != calls || bad.Load() != 0 {
						return fmt.Errorf("%d calls arrived (%d out of order or damaged), want %d", next.Load(), bad.Load(), calls)
					}
					return m.Err()
				}
				dst, _ := m.f.Names().Thread(1, 0)
				args := make([]byte, 2000)
				for i := 0; i < calls; i++ {
					binary.LittleEndian.PutUint64(args, uint64(i))
					args[1999] = byte(i)
					if err := m.Call(dst, h, args); err != nil {
						return fmt.Errorf("call %d: %w", i, err)
					}
				}
				return nil
			})
		})
	}
}
