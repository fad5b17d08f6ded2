package dsfabric

import (
	"context"
	"time"

	"github.com/seriema-go/seriema/dtutils"
)

// Worker is a worker thread: a goroutine locked to its OS thread (pinned
// when Config.Pin is set) that runs the calls addressed to it, in arrival
// order, when it polls.
type Worker struct {
	f      *Fabric
	id     ThreadID
	in     inbox
	spare  spare    // the inbox's other half, swapped in by Poll
	own    inbox    // while this worker routes (f.rx held): its calls, lock-free
	owning bool     // own holds the inbox taken in this routing round
	inPoll bool     // Poll runs: a handler's Poll only routes
	call   Call     // handed to each handler this worker runs
	asleep pollMark // 1 while Serve sleeps on the receive queue's doorbell
	polled pollMark // set by Poll, cleared by the service thread
}

// ID returns the worker's ThreadID.
func (w *Worker) ID() ThreadID { return w.id }

// Fabric returns the worker's fabric.
func (w *Worker) Fabric() *Fabric { return w.f }

// deliver queues a copy of a routed message, waking the worker if Serve
// sleeps.
func (w *Worker) deliver(h callHdr, args, tail []byte, src int) {
	if w.f.self == w {
		if !w.owning {
			w.own.q, w.own.arena = w.in.take(&w.spare)
			w.owning = true
		}
		w.own.add(h, args, tail, src, false)
		return
	}
	w.in.put(h, args, tail, src, false)
	if w.asleep.Load() != 0 {
		w.f.proc.WakeRecv()
	}
}

// Poll routes the messages that have arrived for this process (unless
// another thread is routing them), then runs every call queued for this
// worker and returns how many ran.
//
// A handler that calls Poll (of its own worker) only routes: the calls
// queued behind it run once it returns, in order.
func (w *Worker) Poll() int {
	if w.polled.Load() == 0 {
		w.polled.Store(1)
	}
	if w.inPoll {
		w.f.tryRoute()
		return 0
	}
	w.inPoll = true
	defer func() { w.inPoll = false }()
	n := 0
	if q, a, ok := w.f.routeFor(w); ok {
		n = runQueued(w.f, q, a, w.id, &w.call, &w.spare)
	}
	return n + w.run()
}

// run runs every call queued for this worker.
func (w *Worker) run() int { return w.in.runAll(w.f, w.id, &w.call, &w.spare) }

// Serve polls until ctx ends or the fabric closes. Once idle for
// Config.HotPeriod it sleeps on the doorbell of the process's receive
// queue, so that an arrival wakes it directly and it routes the message
// itself (one wake-up, not the service thread's and then its own).
func (w *Worker) Serve(ctx context.Context) {
	stop := context.AfterFunc(ctx, w.f.wakeFromOutside)
	defer stop()
	hot := w.f.cfg.HotPeriod
	b := dtutils.HotWait{Spin: min(2*time.Microsecond, hot), Yield: hot}
	for {
		// Serve is the only poller of a default worker: it drives the
		// progress engines (tcp) that bring its arrivals in.
		if w.Poll() > 0 || w.f.proc.Progress() > 0 {
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
		// Asleep, the worker routes but runs nothing: a call that blocks
		// must find it marked awake, or the service thread would count on
		// it to route.
		w.asleep.Store(1)
		for w.f.tryRoute(); !w.in.pending() && ctx.Err() == nil && w.f.ctx.Err() == nil; w.f.tryRoute() {
			w.f.proc.AwaitRecv(ctx, 0, 50*time.Millisecond, w.in.pending)
		}
		w.asleep.Store(0)
		if w.f.svcLong.Load() { // the service thread waits long: tell it
			w.f.ringService()
		}
	}
}
