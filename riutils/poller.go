package riutils

import (
	"context"
	"fmt"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// Poller is a process-level consumer: it runs the calls written to some
// worker threads on their behalf (their handlers run on the Poller's
// goroutine, with Call.Dst naming the thread), so that a thread busy with
// long computations — or blocked — does not hold its callers up. The
// threads keep sending through their own Messengers; their Poll then only
// sends calls that RetryAsync kept. One goroutine drives a Poller.
type Poller struct {
	ms   []*Messengers
	proc *dtutils.Process
}

// NewPoller takes over the receiving side of local worker threads threads
// (all of them when none are named). Create it before those threads poll
// for the first time.
func (p *Process) NewPoller(threads ...int) (*Poller, error) {
	f := p.f.Load()
	if f == nil {
		return nil, ErrNotBound
	}
	if len(threads) == 0 {
		for t := 0; t < f.Names().ThreadsPerProcess; t++ {
			threads = append(threads, t)
		}
	}
	pl := &Poller{proc: f.Process()}
	for _, t := range threads {
		m, err := p.Messengers(t)
		if err != nil {
			return nil, err
		}
		if m.delegated {
			return nil, fmt.Errorf("%w: thread %d already has a Poller", ErrBadConfig, m.self)
		}
		pl.ms = append(pl.ms, m)
	}
	// A Poller runs on a goroutine of its own, which the fabric's Close
	// does not wait for: it holds the process's memory, so that a Poll
	// under way when the fabric closes still reads mapped chunks; the hold
	// goes when the Poller is collected.
	if _, err := dtutils.HoldFor(f.Process(), pl); err != nil {
		return nil, errFabricClosed
	}
	for _, m := range pl.ms {
		m.delegated = true
	}
	return pl, nil
}

// Poll runs the calls written to the Poller's threads and returns how many
// ran.
func (pl *Poller) Poll() int {
	if pl.proc.Closed() {
		return 0 // the fabric closed: nothing more comes
	}
	n := 0
	if len(pl.ms) > 0 {
		pl.proc.Progress()
	}
	for _, m := range pl.ms {
		n += m.pollIn()
	}
	return n
}

// Serve polls until ctx ends or the fabric closes, backing off when there
// is nothing to run.
func (pl *Poller) Serve(ctx context.Context) {
	b := dtutils.Backoff{Idle: pl.proc.Idle}
	for ctx.Err() == nil && !pl.proc.Closed() {
		if pl.Poll() > 0 {
			b.Reset()
		} else {
			b.Wait()
		}
	}
}

// Threads returns the threads the Poller serves.
func (pl *Poller) Threads() []dsfabric.ThreadID {
	out := make([]dsfabric.ThreadID, len(pl.ms))
	for i, m := range pl.ms {
		out[i] = m.self
	}
	return out
}

// Stats returns the calls received and those for unknown handlers, summed
// over the Poller's threads. Call it from the Poller's goroutine.
func (pl *Poller) Stats() Stats {
	var s Stats
	for _, m := range pl.ms {
		s.Received += m.rx.stats.Received
		s.UnknownHandlers += m.rx.stats.UnknownHandlers
	}
	return s
}

// Err returns the first protocol error of the Poller's incoming messengers.
// Call it from the Poller's goroutine.
func (pl *Poller) Err() error {
	for _, m := range pl.ms {
		if err := m.Err(); err != nil {
			return err
		}
	}
	return nil
}
