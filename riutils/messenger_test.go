package riutils

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/internal/jobtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// seqOps is the number of calls per sender in the sequence tests: 10 M when
// SERIEMA_FULL is set (make test runs that without the race detector),
// fewer otherwise.
// stallLimit is how long a sequence test's receiver waits without a new
// call before it reports the calls lost.
const stallLimit = 15 * time.Second

func seqOps() int {
	if os.Getenv("SERIEMA_FULL") != "" {
		return 10_000_000
	}
	if raceEnabled {
		return 20_000
	}
	return 300_000
}

// job starts a fabric in which every worker thread runs body with its
// Messengers; rank 0's test waits for every rank through Close.
func job(t testing.TB, procs, threads int, transport string, cfg Config, reg func(*dsfabric.Handlers), body func(m *Messengers) error) {
	h := dsfabric.NewHandlers()
	reg(h)
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	errs := make(chan error, threads)
	j, err := Start(context.Background(), dsfabric.Config{
		Procs: procs, ThreadsPerProcess: threads, Transport: transport, Handlers: h,
		Args: jobtest.RunArgs(t), Logger: quiet,
	}, cfg, func(w *dsfabric.Worker, m *Messengers) {
		errs <- body(m)
		w.Serve(context.Background()) // until Close
	})
	if err != nil {
		t.Fatal(err)
	}
	f := j.Fabric
	failed := false
	for i := 0; i < threads; i++ {
		if err := <-errs; err != nil {
			t.Errorf("rank %d: %v", f.Rank(), err)
			failed = true
		}
	}
	if failed {
		// Not the barrier below: ranks stuck on what failed here would
		// hold it for its whole minute. Close waits for them at most 30 s,
		// and this rank leaving is what ends them (their peer died).
		f.Close()
		t.FailNow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("rank %d: %v", f.Rank(), err)
	}
}

// TestCallFieldsPerCall: the receiver reuses one dsfabric.Call per thread
// and sets its fields for every call; a plain call right after a
// CallBuffer must see no buffer (the old one points into a chunk that is
// recycled), and every call its own source and destination. Over shm's
// mapped chunks and through the Transmitter (NoMapping).
func TestCallFieldsPerCall(t *testing.T) {
	for _, noMap := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoMapping=%v", noMap), func(t *testing.T) {
			const n = 2000
			var h dsfabric.HandlerID
			var ran, bad atomic.Int64
			cfg := DefaultConfig()
			cfg.NoMapping = noMap
			job(t, 2, 1, "shm", cfg, func(hs *dsfabric.Handlers) {
				h, _ = hs.Register("fields", func(c *dsfabric.Call, a []byte) ([]byte, error) {
					withBuf := len(a) == 1 && a[0] == 1
					switch {
					case withBuf && string(c.Buffer) != "payload",
						!withBuf && c.Buffer != nil,
						c.Src != 1 || c.Dst != 0 || c.Fabric == nil:
						bad.Add(1)
					}
					ran.Add(1)
					return nil, nil
				})
			}, func(m *Messengers) error {
				if m.f.Rank() == 1 {
					for i := 0; i < n; i++ {
						var err error
						if i%2 == 0 {
							err = m.CallBuffer(0, h, []byte{1}, []byte("payload"))
						} else {
							err = m.Call(0, h, []byte{0})
						}
						if err != nil {
							return err
						}
					}
					return nil
				}
				deadline := time.Now().Add(30 * time.Second)
				for ran.Load() < n && time.Now().Before(deadline) {
					m.Poll()
				}
				if ran.Load() != n || bad.Load() != 0 {
					return fmt.Errorf("%d of %d calls ran, %d with wrong fields", ran.Load(), n, bad.Load())
				}
				return nil
			})
		})
	}
}

// sequence is a handler that checks per-sender sequence numbers.
type sequence struct {
	next  [64]uint64 // by sender thread
	total atomic.Int64
	bad   atomic.Int64
	body  bool // the bytes after the number are seqBody's pattern
}

// seqBody fills b with call v's pattern, checked by a sequence with body.
func seqBody(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v) + byte(i)
	}
}

func (s *sequence) handler(c *dsfabric.Call, args []byte) ([]byte, error) {
	v := binary.LittleEndian.Uint64(args)
	if v != s.next[c.Src] {
		s.bad.Add(1)
		return nil, fmt.Errorf("from %d: got %d, want %d", c.Src, v, s.next[c.Src])
	}
	if s.body {
		for i, x := range args[8:] {
			if x != byte(v)+byte(i) {
				s.bad.Add(1)
				return nil, fmt.Errorf("from %d: call %d of %d bytes: byte %d is %d, want %d", c.Src, v, len(args), 8+i, x, byte(v)+byte(i))
			}
		}
	}
	s.next[c.Src]++
	s.total.Add(1)
	return nil, nil
}

// TestMessengerSequence (paper §4.4): calls with sequence numbers, 1 sender
// → 1 receiver and 3 senders → 1 receiver, over shm and tcp, through a bare
// Messenger (write) and an Aggregator in trad and ovfl modes: nothing lost,
// duplicated or reordered per sender. Over shm the messengers build calls
// in the receiver's mapped chunks (checked), and once more through the
// Transmitter (Config.NoMapping, "shm-tx").
func TestMessengerSequence(t *testing.T) {
	for _, mode := range []string{"write", "trad", "ovfl"} {
		for _, tr := range append(testTransports, "shm-tx") {
			for _, senders := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s-%s-%dto1", mode, tr, senders), func(t *testing.T) { sequenceJob(t, mode, tr, senders) })
			}
		}
	}
}

func sequenceJob(t *testing.T, mode, tr string, senders int) {
	n := seqOps()
	if tr == "tcp" && os.Getenv("SERIEMA_FULL") == "" {
		n /= 10
	}
	var seq sequence
	var h dsfabric.HandlerID
	cfg := DefaultConfig()
	cfg.ChunkSize = 64 << 10 // many rotations
	if tr == "shm-tx" {
		tr, cfg.NoMapping = "shm", true
	}
	mapped := tr == "shm" && !cfg.NoMapping
	job(t, senders+1, 1, tr, cfg, func(hs *dsfabric.Handlers) {
		h, _ = hs.Register("seq", seq.handler)
	}, func(m *Messengers) error {
		if m.ID() != 0 {
			call := m.Call
			flush := func() error { return nil }
			if mode != "write" {
				am := Trad
				if mode == "ovfl" {
					am = Ovfl
				}
				a, err := m.Aggregator(AggregatorConfig{Mode: am})
				if err != nil {
					return err
				}
				call, flush = a.Call, a.Flush
			}
			var args [24]byte
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err := call(0, h, args[:8+8*(i%3)]); err != nil {
					return err
				}
			}
			if s := m.out[0]; s == nil || (s.direct != nil) != mapped {
				return fmt.Errorf("messenger to thread 0 builds calls in a mapped chunk: %v, want %v", s != nil && s.direct != nil, mapped)
			}
			return flush()
		}
		// Lost calls show as a stall: give up when no call has arrived for
		// stallLimit (a healthy run delivers thousands a second, even
		// under the race detector), not after a bound on the whole run.
		last, since := int64(-1), time.Now()
		for seq.total.Load() < int64(senders*n) && time.Since(since) < stallLimit && m.Err() == nil {
			if got := seq.total.Load(); got != last {
				last, since = got, time.Now()
			}
			if m.Poll() == 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
		if got := seq.total.Load(); got != int64(senders*n) || seq.bad.Load() != 0 {
			return fmt.Errorf("received %d of %d calls, %d out of order (messenger error: %v)", got, senders*n, seq.bad.Load(), m.Err())
		}
		return m.Err()
	})
}
