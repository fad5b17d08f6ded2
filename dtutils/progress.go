package dtutils

import (
	"sync"
	"sync/atomic"
	"time"
)

// Progress engines. A transport whose remote operations need a local CPU to
// land (tcp: bytes in a socket must be read and applied) registers an
// engine with its Process. Every thread that polls — a receiving worker, a
// waiter for a reply or a completion — drives the engines itself through
// Process.Progress, so an operation lands on a thread that is already
// running instead of waiting for a goroutine to be scheduled: on a machine
// whose cores are all busy polling, that hand-off used to cost tens of
// microseconds per hop and milliseconds at the tail. Each engine still has
// its own goroutine for when nobody polls.
//
// This is libfabric's manual-progress model (FI_PROGRESS_MANUAL): the
// application's polls make progress.

// progressor is one engine.
type progressor interface {
	// progress does whatever is ready without blocking and reports whether
	// it did anything. It must be cheap when nothing is ready and must not
	// wait for a lock another progress call holds.
	progress() bool
	// idle says that a thread is about to sleep on a doorbell rather than
	// keep polling: the engine should watch for itself now.
	idle()
}

type progressList struct {
	mu   sync.Mutex
	list atomic.Pointer[[]progressor] // copy-on-write: Progress takes no lock
	// calls counts Progress calls: an engine's fallback goroutine stands by
	// while it keeps changing (some thread polls) and watches the socket
	// itself once it stops.
	calls atomic.Uint64
}

func (l *progressList) add(p progressor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var next []progressor
	if cur := l.list.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, p)
	l.list.Store(&next)
}

func (l *progressList) remove(p progressor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.list.Load()
	if cur == nil {
		return
	}
	next := make([]progressor, 0, len(*cur))
	for _, q := range *cur {
		if q != p {
			next = append(next, q)
		}
	}
	l.list.Store(&next)
}

// Progress drives every progress engine of the process once, without
// blocking, and reports how many made progress. Poll loops call it; it
// costs one atomic load when no transport of the process needs it (shm,
// loop), and about one non-blocking system call per tcp connection
// otherwise.
func (p *Process) Progress() int {
	l := p.progress.list.Load()
	if l == nil || len(*l) == 0 {
		return 0
	}
	p.progress.calls.Add(1)
	n := 0
	for _, e := range *l {
		if e.progress() {
			n++
		}
	}
	return n
}

// Idle tells the progress engines that the calling thread stops polling
// and will sleep until a doorbell rings: each engine watches its socket
// itself from now on, instead of after its stand-by interval.
func (p *Process) Idle() {
	if l := p.progress.list.Load(); l != nil {
		for _, e := range *l {
			e.idle()
		}
	}
}

// standByWhilePolled is the stand-by phase of an engine goroutine: it
// returns true once threads of the process stop polling (fewer than
// activeCalls Progress calls in a standBy interval) or hint fires, and
// false when done closes. tick, if set, runs every interval. timer must
// be armed for standBy; it is re-armed on each tick.
func standByWhilePolled(calls *atomic.Uint64, timer *time.Timer, hint, done <-chan struct{}, tick func()) bool {
	for last := calls.Load(); ; {
		select {
		case <-done:
			return false
		case <-hint:
			return true
		case <-timer.C:
			timer.Reset(standBy)
			if tick != nil {
				tick()
			}
			now := calls.Load()
			if now-last < activeCalls {
				return true
			}
			last = now
		}
	}
}
