package dsfabric

import (
	"context"
	"sync"
	"time"

	"github.com/seriema-go/seriema/dtutils"
)

// Worker is a worker thread: a goroutine locked to its OS thread (pinned
// when Config.Pin is set) that runs the calls addressed to it, in arrival
// order, when it polls.
type Worker struct {
	f    *Fabric
	id   ThreadID
	mu   sync.Mutex
	q    []queued
	bell chan struct{}
	idle bool
}

// queued is a call handed from a service thread to a worker.
type queued struct {
	h    callHdr
	args []byte // a copy
	buf  []byte // the CallBuffer buffer (a copy, or registered memory)
}

// ID returns the worker's ThreadID.
func (w *Worker) ID() ThreadID { return w.id }

// Fabric returns the worker's fabric.
func (w *Worker) Fabric() *Fabric { return w.f }

func (w *Worker) push(q queued) {
	w.mu.Lock()
	w.q = append(w.q, q)
	w.mu.Unlock()
	w.wake()
}

func (w *Worker) wake() {
	select {
	case w.bell <- struct{}{}:
	default:
	}
}

// Poll runs every call queued for this worker and returns how many ran.
func (w *Worker) Poll() int {
	w.mu.Lock()
	batch := w.q
	w.q = nil
	w.mu.Unlock()
	for _, q := range batch {
		w.f.run(q.h, q.args, q.buf, w.id)
	}
	return len(batch)
}

// Serve polls until ctx ends or the fabric closes, sleeping when idle.
func (w *Worker) Serve(ctx context.Context) {
	hot := w.f.cfg.HotPeriod
	b := dtutils.HotWait{Spin: min(2*time.Microsecond, hot), Yield: hot}
	for {
		if w.Poll() > 0 {
			b.Reset()
			continue
		}
		if ctx.Err() != nil || w.f.ctx.Err() != nil {
			return
		}
		if b.Hot() {
			b.Wait()
			continue
		}
		b.Reset()
		select {
		case <-w.bell:
		case <-ctx.Done():
		case <-w.f.ctx.Done():
		}
	}
}
