package dtutils

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// CompletionQueue delivers completions. Poll never blocks; Wait spins, yields,
// then sleeps until a completion arrives or ctx ends. Both are safe for
// concurrent use.
type CompletionQueue interface {
	// Poll moves up to len(dst) completions into dst and returns how many.
	Poll(dst []Completion) int
	// Wait is Poll that waits for at least one completion.
	Wait(ctx context.Context, dst []Completion) (int, error)
}

// memCQ is the in-process completion queue of a queue pair's send side: a
// growable ring under a mutex (allocation-free once grown), with a doorbell
// that producers ring only when a waiter said it sleeps.
type memCQ struct {
	mu       sync.Mutex
	buf      []Completion
	head, n  int
	acct     *sqAccount
	sleepers atomic.Int32
	bell     chan struct{}
	// progress, when set, is the queue pair's progress engine: an empty
	// Poll drives it, so the poller itself reads the completion off the
	// wire rather than waiting for a goroutine to be scheduled.
	progress func() bool
	// idle, when set, is called before a waiter sleeps on the doorbell.
	idle func()
}

func newMemCQ(acct *sqAccount) *memCQ {
	return &memCQ{buf: make([]Completion, 64), acct: acct, bell: make(chan struct{}, 1)}
}

func (q *memCQ) push(c Completion) {
	q.mu.Lock()
	if q.n == len(q.buf) {
		nb := make([]Completion, 2*len(q.buf))
		for i := 0; i < q.n; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = c
	q.n++
	q.mu.Unlock()
	if q.sleepers.Load() > 0 {
		select {
		case q.bell <- struct{}{}:
		default:
		}
	}
}

func (q *memCQ) Poll(dst []Completion) int {
	n := q.poll(dst)
	if n == 0 && len(dst) > 0 && q.progress != nil && q.progress() {
		n = q.poll(dst)
	}
	return n
}

func (q *memCQ) poll(dst []Completion) int {
	q.mu.Lock()
	k := min(len(dst), q.n)
	for i := 0; i < k; i++ {
		dst[i] = q.buf[q.head]
		q.head = (q.head + 1) % len(q.buf)
	}
	q.n -= k
	q.mu.Unlock()
	for i := 0; i < k; i++ {
		if dst[i].hasRet {
			q.acct.retire(dst[i].retire)
		}
	}
	return k
}

func (q *memCQ) Wait(ctx context.Context, dst []Completion) (int, error) {
	return waitOn(ctx, q, dst)
}

// sleep blocks until a producer rings the bell or ctx ends.
func (q *memCQ) sleep(ctx context.Context, dst []Completion) int {
	q.sleepers.Add(1)
	defer q.sleepers.Add(-1)
	if n := q.poll(dst); n > 0 { // a push between our last poll and the announcement
		return n
	}
	if q.idle != nil {
		q.idle()
	}
	select {
	case <-q.bell:
	case <-ctx.Done():
	}
	return 0
}

// sleeper is a completion queue that can block until a producer rings.
type sleeper interface {
	Poll(dst []Completion) int
	// sleep announces a sleeper, re-polls, then blocks until woken, ctx
	// ends or a bound passes; it returns what the re-poll found.
	sleep(ctx context.Context, dst []Completion) int
}

// waitOn is the Wait of every completion queue: poll, spin and yield
// briefly, then sleep on the doorbell.
// hotWait is how long a completion-queue waiter keeps polling, yielding the
// processor, before it sleeps on the doorbell.
const hotWait = 50 * time.Microsecond

func waitOn(ctx context.Context, q sleeper, dst []Completion) (int, error) {
	// Poll, spinning then yielding, for hotWait before sleeping: a sender
	// of a steady stream then never pays a futex wake-up per message.
	w := HotWait{Spin: 2 * time.Microsecond, Yield: hotWait}
	for {
		if n := q.Poll(dst); n > 0 {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if w.Hot() {
			w.Wait()
			continue
		}
		if n := q.sleep(ctx, dst); n > 0 {
			return n, nil
		}
		w.Reset()
	}
}
