package riutils

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/internal/jobtest"
)

// TestTCPResetMidStream (reliability): the sending process dies (SIGKILL,
// its connections reset by the kernel) while large one-sided calls stream
// to the receiver over tcp. Every call the receiver ran is whole (checksum),
// the death is noticed, calls towards the dead rank fail with ErrRankDead
// and nothing hangs.
func TestTCPResetMidStream(t *testing.T) {
	h := dsfabric.NewHandlers()
	var ran, bad atomic.Int64
	hBig, _ := h.Register("big", func(c *dsfabric.Call, a []byte) ([]byte, error) {
		if len(a) != 4 || crc32.ChecksumIEEE(c.Buffer) != binary.LittleEndian.Uint32(a) {
			bad.Add(1)
		}
		ran.Add(1)
		return nil, nil
	})
	f, err := dyingJob(t, "tcp", h, func(w *dsfabric.Worker, m *Messengers) error {
		if w.Fabric().Rank() == 1 {
			buf := make([]byte, 48<<10)
			for i := 0; ; i++ {
				for j := range buf {
					buf[j] = byte(i + j*7)
				}
				if err := m.CallBuffer(0, hBig, binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(buf)), buf); err != nil {
					return err
				}
				if i == 300 {
					syscall.Kill(os.Getpid(), syscall.SIGKILL) // mid-stream: frames still in flight
				}
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		for w.Fabric().DeadErr() == nil {
			if m.Poll() == 0 && time.Now().After(deadline) {
				return errors.New("the sender's death was not noticed within 60 s")
			}
		}
		for i := 0; i < 100; i++ {
			m.Poll() // whatever arrived before the reset
		}
		if err := m.Call(1, hBig, make([]byte, 4)); !errors.Is(err, dsfabric.ErrRankDead) {
			return errors.New("a call to the dead rank gave " + errString(err))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n == 0 || bad.Load() != 0 {
		t.Errorf("%d calls ran, %d of them corrupted", n, bad.Load())
	}
	if err := f.Close(); err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("Close: %v, want an error naming rank 1", err)
	}
}

// dyingJob runs body on the one worker of each rank of a two-process job
// over transport tr, in which rank 1 is expected to die, and returns the
// fabric (for the test to close) and the first result a body returned —
// in rank 0, whose body must return; rank 1's process dies before.
func dyingJob(t *testing.T, tr string, h *dsfabric.Handlers, body func(w *dsfabric.Worker, m *Messengers) error) (*dsfabric.Fabric, error) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Logger = quiet
	result := make(chan error, 2)
	j, err := Start(context.Background(), dsfabric.Config{
		Procs: 2, Transport: tr, Handlers: h, Args: jobtest.RunArgs(t), Logger: quiet,
	}, cfg, func(w *dsfabric.Worker, m *Messengers) { result <- body(w, m) })
	if err != nil {
		t.Fatal(err)
	}
	return j.Fabric, <-result
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
