package riutils

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/seriema-go/seriema/dsfabric"
)

// Deterministic checks of the messenger protocol (paper §4.4.1, §4.4.2),
// each bounded by its own deadline and failing with the rule it checks.

// callUntil makes one call with policy Fail, polling while the messenger is
// full, and fails once deadline passes.
func callUntil(m *Messengers, dst dsfabric.ThreadID, h dsfabric.HandlerID, args []byte, deadline time.Time, rule string) error {
	for {
		ok, err := m.call(dst, h, args, nil, Fail)
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sender stalled: %s", rule)
		}
		m.Poll()
	}
}

// fillRing makes calls numbered from i on with policy Fail, without
// polling, until the messenger is full; it returns the next number.
func fillRing(m *Messengers, h dsfabric.HandlerID, i int) (int, error) {
	var args [8]byte
	for ; ; i++ {
		binary.LittleEndian.PutUint64(args[:], uint64(i))
		ok, err := m.call(0, h, args[:], nil, Fail)
		if err != nil || !ok {
			return i, err
		}
	}
}

// awaitCalls polls until seq counts want calls, or fails at deadline.
func awaitCalls(m *Messengers, seq *sequence, want int64, deadline time.Time, rule string) error {
	// Calls out of order are counted and the rest still taken, so that a
	// sender waiting for room finishes and the test fails instead of
	// hanging.
	for seq.total.Load()+seq.bad.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d calls arrived: %s", seq.total.Load(), want, rule)
		}
		m.Poll()
	}
	if seq.bad.Load() != 0 {
		return fmt.Errorf("calls out of order: %s", rule)
	}
	return m.Err()
}

// TestFeedbackAfterWrap (§4.4.1): with two chunks and no growth, the sender
// wraps around the ring fifty times; it may reuse a chunk only when the
// receiver's pushed feedback says it was consumed, so every call arrives
// once, in order, and the sender never stalls.
func TestFeedbackAfterWrap(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail}
	const rule = "feedback must count exactly the chunks consumed, after the ring has wrapped"
	perChunk := (cfg.ChunkSize - recordsStart) / recordSize(8)
	n := 50 * 2 * perChunk
	var seq sequence
	var h dsfabric.HandlerID
	deadline := time.Now().Add(10 * time.Second)
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error { return awaitCalls(m, &seq, int64(n), deadline, rule) },
		func(m *Messengers) error {
			var args [8]byte
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err := callUntil(m, 0, h, args[:], deadline, rule); err != nil {
					return err
				}
			}
			return nil
		})
}

// stallThenFill is the skeleton of the stalled-receiver tests: the sender
// makes phase1 calls, which the receiver runs; the receiver then stops
// polling; the sender calls (policy Fail) until the ring is full and
// checks what it sees (filled gets the number of calls made in all); then
// the receiver runs every call and checks what it sees (drained). Every
// wait has the deadline, and failures name rule.
func stallThenFill(t *testing.T, cfg Config, phase1 int, rule string, filled func(m *Messengers, total int) error, drained func(m *Messengers) error) {
	var seq sequence
	var h dsfabric.HandlerID
	deadline := time.Now().Add(10 * time.Second)
	stalled, total := make(chan struct{}), make(chan int, 1)
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			if err := awaitCalls(m, &seq, int64(phase1), deadline, rule); err != nil {
				return err
			}
			close(stalled) // stop polling
			var n int
			select {
			case n = <-total:
			case <-time.After(time.Until(deadline)):
				return errors.New("the sender never filled the stalled ring")
			}
			if err := awaitCalls(m, &seq, int64(n), deadline, rule); err != nil {
				return err
			}
			return drained(m)
		},
		func(m *Messengers) error {
			var args [8]byte
			i := 0
			for ; i < phase1; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err := callUntil(m, 0, h, args[:], deadline, rule); err != nil {
					return err
				}
			}
			select {
			case <-stalled:
			case <-time.After(time.Until(deadline)):
				return errors.New("the receiver never stalled")
			}
			i, err := fillRing(m, h, i)
			if err != nil {
				return err
			}
			err = filled(m, i) // before the hand-off: drained may read what it saw
			total <- i
			return err
		})
}

// TestFeedbackCountsConsumedChunks (§4.4.1), deterministic: with two
// chunks and no growth, the receiver consumes chunk 0 and stalls half-way
// through chunk 1. The sender may then finish chunk 1 and reuse chunk 0 —
// three chunks' worth of calls — but not chunk 1, which is still being
// read: with feedback one ahead it takes a fourth and overwrites it.
func TestFeedbackCountsConsumedChunks(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail}
	const rule = "feedback must count exactly the chunks consumed: the sender reused the chunk the receiver was still reading"
	perChunk := (cfg.ChunkSize - recordsStart) / recordSize(8)
	stallThenFill(t, cfg, perChunk+perChunk/2, rule,
		func(m *Messengers, total int) error {
			if total != 3*perChunk {
				return fmt.Errorf("the sender took %d calls before the stalled receiver's ring was full, want %d: %s", total, 3*perChunk, rule)
			}
			return nil
		},
		func(m *Messengers) error { return nil })
}

// TestGrowthInTheMiddle (§4.4.1): the sender grows its ring while its
// current chunk is the first of the ring, not the last: the new chunks go
// right after the current one on both sides, so the rings stay symmetric
// and every call arrives in order. The receiver stalls half-way through
// chunk 1; the sender fills chunk 1, reuses the consumed chunk 0, and must
// grow when chunk 1 is next.
func TestGrowthInTheMiddle(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 6, Policy: Fail}
	const rule = "grown chunks must be inserted right after the current chunk, the same way on both sides"
	perChunk := (cfg.ChunkSize - recordsStart) / recordSize(8)
	var snd *Messengers
	stallThenFill(t, cfg, perChunk+perChunk/2, rule,
		func(m *Messengers, total int) error {
			snd = m
			if g := m.Stats().Grows; g != 2 {
				return fmt.Errorf("test set-up: %d grows, want 2", g)
			}
			if s := m.out[0]; len(s.chunks) != cfg.MaxChunks {
				return fmt.Errorf("test set-up: %d chunks, want %d", len(s.chunks), cfg.MaxChunks)
			}
			return nil
		},
		func(m *Messengers) error { return ringsSymmetric(snd.out[0], m.rx.in[0]) })
}

// TestFlushDeliversEveryCall (§4.4.2): the receiver stalls on purpose until
// every sender has made all its calls — ovfl calls overflow into the local
// queue, trad calls wait in a partly filled batch — then polls; Flush must
// deliver every call, 1 → 1 and 2 → 1, over shm and tcp.
func TestFlushDeliversEveryCall(t *testing.T) {
	for _, mode := range []Mode{Trad, Ovfl} {
		for _, tr := range testTransports {
			for _, senders := range []int{1, 2} {
				name := fmt.Sprintf("%s-%s-%dto1", map[Mode]string{Trad: "trad", Ovfl: "ovfl"}[mode], tr, senders)
				t.Run(name, func(t *testing.T) { flushDelivers(t, mode, tr, senders) })
			}
		}
	}
}

func flushDelivers(t *testing.T, mode Mode, tr string, senders int) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Retry}
	rule := "trad Flush must send the partly filled batch"
	// One full 4 KiB batch (a run of 8-byte calls) and a small partial
	// one: they fit the stalled ring.
	n := (4096-innerHeader)/8 + 20
	if mode == Ovfl {
		rule = "ovfl Flush must send every call kept in the overflow queue"
		n = 3000 // far more than the stalled ring holds
	}
	var seq sequence
	var sent atomic.Int64 // senders done calling (a send-based service call)
	var h, hSent dsfabric.HandlerID
	job(t, senders+1, 1, tr, cfg, func(hs *dsfabric.Handlers) {
		h, _ = hs.Register("seq", seq.handler)
		hSent, _ = hs.Register("sent", func(c *dsfabric.Call, a []byte) ([]byte, error) { sent.Add(1); return nil, nil })
	}, func(m *Messengers) error {
		deadline := time.Now().Add(10 * time.Second)
		if m.ID() == 0 {
			for sent.Load() < int64(senders) { // stalled: no Poll
				if time.Now().After(deadline) {
					return errors.New("the senders never finished calling")
				}
				time.Sleep(time.Millisecond)
			}
			return awaitCalls(m, &seq, int64(senders*n), deadline, rule)
		}
		a, err := m.Aggregator(AggregatorConfig{Mode: mode, FlushSize: 4096})
		if err != nil {
			return err
		}
		var args [8]byte
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(args[:], uint64(i))
			if err := a.Call(0, h, args[:]); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		if mode == Ovfl && a.Exceeding() == 0 {
			return errors.New("test set-up: no call overflowed")
		}
		if err := m.f.CallService(m.ID(), 0, hSent, nil, nil); err != nil {
			return err
		}
		return a.Flush()
	})
}

// TestReplySealCarriesSequence (§4.4.3): a reply slot reused by the next
// CallReturn still holds the previous reply; only a seal made with the new
// call's sequence number completes the wait.
func TestReplySealCarriesSequence(t *testing.T) {
	var echo dsfabric.HandlerID
	var stop atomic.Bool
	twoThreads(t, DefaultConfig(), func(hs *dsfabric.Handlers) {
		echo, _ = hs.Register("echo", func(c *dsfabric.Call, a []byte) ([]byte, error) { return a, nil })
	},
		func(m *Messengers) error { return serveUntil(m, &stop) },
		func(m *Messengers) error {
			defer stop.Store(true)
			obj, err := m.NewRemoteObject(8)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := byte(1); i <= 50; i++ {
				out, err := m.CallReturn(ctx, 0, echo, []byte{i}, obj)
				if err != nil {
					return err
				}
				if len(out) != 1 || out[0] != i {
					return fmt.Errorf("call %d returned %v: a reply is complete only when its seal carries the call's sequence number", i, out)
				}
			}
			return nil
		})
}

// TestDiscoveryWaitsForChunks (§4.4, no-setup allocation): the receiving
// thread scans its inbox whenever any sender's allocation set the fresh
// flag, so it may meet an entry that has no chunks yet. Starting a
// messenger on it would leave that sender's calls unread for good (a
// flaky 3-to-1 sequence test on CI lost one whole sender); the entry must
// wait for the scan its own allocation brings.
func TestDiscoveryWaitsForChunks(t *testing.T) {
	ib := &inbox{senders: xsync.NewMapOf[dsfabric.ThreadID, *incoming]()}
	in := &incoming{}
	ib.senders.Store(1, in)
	ib.fresh.Store(true) // set by another sender's allocation
	m := &Messengers{inbox: ib}
	m.pollIn()
	if in.taken || len(m.rx.in) != 0 {
		t.Fatalf("an entry without chunks became a messenger (taken %v, %d receivers)", in.taken, len(m.rx.in))
	}
}

// TestPollOneLap (§4.4.1): a poll runs at most one lap of a messenger's
// ring. Each chunk's feedback lets the sender refill it, so a sender that
// keeps up with the receiver would otherwise keep one Poll running for as
// long as it sends, and the thread's other messengers and its own work
// would wait. Deterministic: the sender fills the ring before the receiver
// polls, and after each chunk finished the receiver waits until the
// sender has filled the next one.
func TestPollOneLap(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail}
	const rule = "one Poll finishes at most one lap of a messenger's chunks"
	var seq sequence
	var h dsfabric.HandlerID
	var stop atomic.Bool
	filled, sent := make(chan struct{}), make(chan int, 1)
	deadline := time.Now().Add(20 * time.Second)
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			select {
			case <-filled:
			case <-time.After(time.Until(deadline)):
				return errors.New("the sender never filled the ring")
			}
			finished, chunks := 0, 0
			m.afterFinish = func(r *receiver) {
				finished, chunks = finished+1, len(r.chunks)
				for finished <= 4*chunks && word(r.chunks[r.cur], offProducer).Load()&prodRotate == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Microsecond)
				}
			}
			m.Poll()
			m.afterFinish = nil
			stop.Store(true)
			if finished == 0 || finished > chunks {
				return fmt.Errorf("one Poll finished %d chunks of a %d-chunk ring: %s", finished, chunks, rule)
			}
			for { // the sender may be waiting for room: keep polling
				select {
				case n := <-sent:
					return awaitCalls(m, &seq, int64(n), deadline, rule)
				default:
					m.Poll()
				}
			}
		},
		func(m *Messengers) (err error) {
			var args [8]byte
			i := 0
			defer func() { sent <- i }()
			if i, err = fillRing(m, h, 0); err != nil { // nobody polls yet
				return err
			}
			close(filled)
			for ; !stop.Load(); i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err := callUntil(m, 0, h, args[:], deadline, rule); err != nil {
					return err
				}
			}
			return nil
		})
}
