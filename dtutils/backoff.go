package dtutils

import (
	"runtime"
	"time"
)

// Backoff is the waiting discipline of every poll loop here: spin briefly
// (cheap when the answer is microseconds away), then yield the processor,
// then sleep with growing pauses (10 µs steps up to 1 ms), so an idle waiter
// costs almost nothing on a 2-core machine. The sleeping phase is for idle
// waiting only: timers are coarse (see Sleepy), so loops that need low
// latency stop calling Wait once Sleepy reports true and block on a doorbell.
type Backoff struct {
	// Idle, if set, is called once when the waiter starts sleeping on
	// timers: a loop that polls memory written over tcp passes
	// Process.Idle, so that the transport's engine takes over the socket
	// instead of waiting for polls that now come a millisecond apart.
	Idle   func()
	n      int
	sleeps int // timer sleeps taken (tests check loops never reach them early)
}

// Few yields: a goroutine that keeps yielding keeps its P busy, and the
// scheduler then rarely polls the network, so tcp replies wait for sysmon
// (up to 10 ms). Blocking early is both cheaper and faster.
const (
	spinRounds  = 64
	yieldRounds = 4
	maxPause    = time.Millisecond
)

// Wait performs one round of waiting.
func (b *Backoff) Wait() {
	b.n++
	switch {
	case b.n <= spinRounds:
		// Busy: the common case of a reply already on its way.
	case b.n <= spinRounds+yieldRounds:
		runtime.Gosched()
	default:
		if b.sleeps == 0 && b.Idle != nil {
			b.Idle()
		}
		b.sleeps++
		d := time.Duration(b.n-spinRounds-yieldRounds) * 10 * time.Microsecond
		time.Sleep(min(d, maxPause))
	}
}

// Sleepy reports whether the spinning and yielding phases are over: a loop
// with a doorbell should now announce that it sleeps and block on it. A loop
// that calls Wait only while !Sleepy never sleeps on a timer: on Linux a
// timer sleep of even 50 µs costs about a millisecond once the P is idle,
// far longer than a doorbell wake-up.
func (b *Backoff) Sleepy() bool { return b.n >= spinRounds+yieldRounds }

// Reset starts over after progress.
func (b *Backoff) Reset() { b.n, b.sleeps = 0, 0 }

// HotWait waits for something expected soon, where a timer sleep would cost
// far more than the wait itself (about a millisecond on some machines): it
// keeps polling (Wait returns at once) for Spin, yields the processor until
// Yield has passed since the first Wait, and only then backs off to
// sleeping. Yielding a goroutine locked to its thread hands the processor
// over through futexes, so loops on locked threads favour Spin.
type HotWait struct {
	Spin, Yield time.Duration
	// Idle is passed on to the Backoff of the sleeping phase.
	Idle  func()
	start time.Time
	b     Backoff
}

// Wait performs one round of waiting.
func (w *HotWait) Wait() {
	switch d := w.Waited(); {
	case d < w.Spin:
	case d < w.Yield:
		runtime.Gosched()
	default:
		w.b.Idle = w.Idle
		w.b.Wait()
	}
}

// Hot reports whether the spinning and yielding phases are not over: a
// waiter with a doorbell blocks on it once Hot is false.
func (w *HotWait) Hot() bool { return w.Waited() < max(w.Spin, w.Yield) }

// Waited returns how long this wait has lasted (starting it if needed).
func (w *HotWait) Waited() time.Duration {
	now := time.Now()
	if w.start.IsZero() {
		w.start = now
	}
	return now.Sub(w.start)
}

// Waiting reports whether a wait is under way (Wait or Hot was called since
// the last Reset).
func (w *HotWait) Waiting() bool { return !w.start.IsZero() }

// Reset starts over after progress.
func (w *HotWait) Reset() {
	w.start = time.Time{}
	w.b.Reset()
}
