package riutils

import (
	"context"
	"fmt"
	"sync"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// keeper implements RetryAsync: the calls that find their messenger full
// are kept, in order, and sent by a helper goroutine as room appears. While
// calls to a destination are kept, later ones join them (per-sender FIFO),
// and the helper alone drives that destination's sender, with its own
// registered memory and counters; the thread takes the sender back once the
// queue is empty. Kept calls live in ordinary memory until the helper copies
// them into its own registered memory to write them, so the thread's
// allocator is never shared.
type keeper struct {
	m      *Messengers
	ring   *alloc.LinearCircular // the helper's registered memory
	wake   chan struct{}
	mu     sync.Mutex
	queues map[dsfabric.ThreadID]*keptQueue
	bytes  int
	err    error // the helper's first failure, reported to the thread
	stats  Stats // the helper's calls, rotations and growths
	local  Stats // counted by the helper while it writes, copied into stats
	run    bool  // the helper goroutine is running
	// hold is the process's Hold; tests replace it to lose the race
	// with Close at will.
	hold func() (release func(), err error)
}

type keptQueue struct {
	s      *sender
	recs   [][]byte // sealed records, in order
	active bool     // the helper drives s
}

func newKeeper(m *Messengers, z *alloc.ZoneAllocator) (*keeper, error) {
	// Units as large as the thread's own: a kept call may be as large as
	// a chunk, and one past the unit failed the helper and lost every
	// call kept for its destination.
	ring, err := newRing(z, m.p.cfg.callUnit())
	if err != nil {
		return nil, err
	}
	return &keeper{m: m, ring: ring, wake: make(chan struct{}, 1), queues: map[dsfabric.ThreadID]*keptQueue{}, hold: m.proc.Hold}, nil
}

// call sends at once if nothing is kept for s's destination and there is
// room, else keeps the call (ErrFull past MaxAsyncBytes).
func (k *keeper) call(s *sender, h dsfabric.HandlerID, args, buf []byte) error {
	k.mu.Lock()
	if err := k.err; err != nil {
		k.mu.Unlock()
		return err
	}
	q := k.queues[s.dst]
	if q == nil || !q.active {
		k.mu.Unlock()
		// The thread drives s: try to write now.
		ok, err := k.m.callTo(s, h, args, buf, Fail)
		if ok || err != nil {
			return err
		}
		k.mu.Lock()
		if q = k.queues[s.dst]; q == nil {
			q = &keptQueue{s: s}
			k.queues[s.dst] = q
		}
	}
	size := recordSize(len(args) + len(buf))
	if k.bytes+size > k.m.p.cfg.MaxAsyncBytes {
		n := k.bytes
		k.mu.Unlock()
		return fmt.Errorf("%w: %d bytes already kept (MaxAsyncBytes %d)", ErrFull, n, k.m.p.cfg.MaxAsyncBytes)
	}
	if !k.run {
		// The helper writes into the process's memory from a goroutine
		// the fabric's Close does not wait for: it holds the memory until
		// it ends (at the close). Taken before the call is kept: a Hold
		// that fails lost a race with Close, and the call, which no
		// helper would ever send, fails rather than vanish.
		release, err := k.hold()
		if err != nil {
			k.mu.Unlock()
			return errFabricClosed
		}
		k.run = true
		go k.helper(release)
	}
	rec := make([]byte, size)
	putRecord(rec, h, k.m.self, args, buf)
	q.recs = append(q.recs, rec)
	k.bytes += size
	if !q.active {
		// Hand the sender over: from now on only the helper touches it.
		q.active = true
		s.ring, s.st = k.ring, &k.local
	}
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
	return nil
}

// status returns the bytes kept and the helper's first failure.
func (k *keeper) status() (int, error) {
	if k == nil {
		return 0, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.bytes, k.err
}

// idle reports whether the thread drives dst's sender (no helper at work
// on it).
func (k *keeper) idle(dst dsfabric.ThreadID) bool {
	if k == nil {
		return true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	q := k.queues[dst]
	return q == nil || !q.active
}

// busy returns how many destinations the helper drives.
func (k *keeper) busy() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, q := range k.queues {
		if q.active {
			n++
		}
	}
	return n
}

// own waits, running this thread's calls, until the thread drives s (an
// Aggregator or a shutdown must not write while kept calls go out).
func (m *Messengers) own(s *sender) error {
	if m.keeper.idle(s.dst) {
		return nil // the common case, without setting up a wait
	}
	return m.ownContext(context.Background(), s)
}

// ownContext is own that gives up when ctx is done (Shutdown's wait).
func (m *Messengers) ownContext(ctx context.Context, s *sender) error {
	w := m.replyWait()
	for !m.keeper.idle(s.dst) {
		if m.proc.Closed() {
			// The helper stopped at the close and never hands s back.
			return fmt.Errorf("%w: calls kept for thread %d were not sent", errFabricClosed, s.dst)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("riutils: waiting for the calls kept for thread %d to go out: %w", s.dst, err)
		}
		if m.Poll() > 0 {
			w.Reset()
		} else {
			w.Wait()
		}
	}
	return nil
}

// kept returns the bytes kept for dst.
func (k *keeper) kept(dst dsfabric.ThreadID) int {
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	if q := k.queues[dst]; q != nil {
		for _, r := range q.recs {
			n += len(r)
		}
	}
	return n
}

// helper sends kept calls while their messengers have room, and sleeps
// when nothing is kept; it ends with the fabric, and then releases its
// hold on the process's memory.
func (k *keeper) helper(release func()) {
	defer release()
	var b dtutils.Backoff
	for {
		select {
		case <-k.wake:
		case <-k.m.f.Done():
			return
		}
		b.Reset()
		for {
			sent, waiting := k.drain()
			if !waiting {
				break
			}
			if sent {
				b.Reset()
				continue
			}
			select {
			case <-k.m.f.Done():
				return
			default:
			}
			b.Wait() // the receivers are behind: an idle wait is fine here
		}
	}
}

// drain sends what fits now; waiting reports calls still kept.
func (k *keeper) drain() (sent, waiting bool) {
	k.mu.Lock()
	var qs []*keptQueue
	for _, q := range k.queues {
		if q.active {
			qs = append(qs, q)
		}
	}
	k.mu.Unlock()
	for _, q := range qs {
		for {
			k.mu.Lock()
			if len(q.recs) == 0 {
				// Hand the sender back to the thread.
				q.active = false
				q.s.ring, q.s.st = k.m.ring, &k.m.stats
				k.mu.Unlock()
				break
			}
			rec := q.recs[0]
			k.mu.Unlock()
			if k.m.proc.Closed() {
				return false, false // the fabric closed: nothing more goes out
			}
			ok, err := q.s.reserve(len(rec), Fail)
			if err == nil && ok {
				var mem alloc.Memory
				if mem, err = allocFrom(k.ring, q.s.tx, len(rec)); err == nil {
					copy(mem.Bytes(), rec)
					err = q.s.write(mem)
				}
			}
			k.mu.Lock()
			if err != nil {
				if k.err == nil {
					k.err = fmt.Errorf("riutils: sending kept calls to thread %d: %w", q.s.dst, err)
				}
				for _, r := range q.recs {
					k.bytes -= len(r)
				}
				q.recs = nil
				k.mu.Unlock()
				continue
			}
			if !ok {
				k.mu.Unlock()
				waiting = true
				break
			}
			q.recs[0] = nil
			q.recs = q.recs[1:]
			k.bytes -= len(rec)
			k.stats = k.local
			k.mu.Unlock()
			sent = true
		}
	}
	return sent, waiting
}
