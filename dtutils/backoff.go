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
func (b *Backoff) Reset() { b.n = 0 }
