package riutils

import (
	"context"
	"fmt"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// Job is a started job with one-sided invocation: its fabric, and this
// process's riutils state bound to it.
type Job struct {
	Fabric  *dsfabric.Fabric
	Process *Process
}

// WorkerFunc is the body of a worker thread of a job started by Start: its
// dsfabric worker, and its messengers, bound and ready to call. When it
// returns, the thread ends (the fabric keeps running until Close).
type WorkerFunc func(w *dsfabric.Worker, m *Messengers)

// Start starts a job with one-sided invocation in one call. It registers
// riutils' service handlers in fc.Handlers (a new set when nil; register
// your handlers in the same set, before Start, identically in every
// process), starts the fabric (dsfabric.Start: self-launched processes,
// mpirun, srun, or by hand), binds riutils to it, and runs worker on every
// worker thread once its messengers are ready. A nil worker runs Serve.
// fc.Worker must be nil: worker takes its place.
//
// Start returns once every worker thread of this process has its
// messengers. If a thread cannot have them (its memory cannot be
// registered, say), Start closes the fabric and returns that error, and no
// worker body runs: a job with a thread that can take no calls would leave
// its callers waiting.
//
//	h := dsfabric.NewHandlers()
//	hello, _ := h.Register("hello", func(c *dsfabric.Call, args []byte) ([]byte, error) { ... })
//	job, err := riutils.Start(ctx, dsfabric.Config{Procs: 2, Handlers: h}, riutils.DefaultConfig(),
//		func(w *dsfabric.Worker, m *riutils.Messengers) { ... m.Call(dst, hello, args) ... })
//	defer job.Close()
func Start(ctx context.Context, fc dsfabric.Config, rc Config, worker WorkerFunc) (*Job, error) {
	if fc.Worker != nil {
		return nil, fmt.Errorf("%w: dsfabric.Config.Worker is set; pass the body as Start's worker", ErrBadConfig)
	}
	if fc.Handlers == nil {
		fc.Handlers = dsfabric.NewHandlers()
	}
	p, err := NewProcess(fc.Handlers, rc)
	if err != nil {
		return nil, err
	}
	return start(ctx, fc, p, worker)
}

// start is Start with its Process made: tests set the Process's hooks
// first.
func start(ctx context.Context, fc dsfabric.Config, p *Process, worker WorkerFunc) (*Job, error) {
	if worker == nil {
		worker = Serve
	}
	// Each thread makes its own messengers, so that their memory is first
	// touched on the thread (and NUMA node) that uses it, and reports on
	// ready; the bodies start together once every thread has reported.
	ready, run := make(chan error), make(chan struct{})
	fc.Worker = func(w *dsfabric.Worker) {
		done := w.Fabric().Done()
		select {
		case <-p.bound:
		case <-done:
			return
		}
		t := w.Fabric().Names().ThreadRank(w.ID())
		m, err := p.Messengers(t)
		if err != nil {
			err = fmt.Errorf("riutils: worker thread %d of process %d: %w", t, w.Fabric().Rank(), err)
		}
		select {
		case ready <- err:
		case <-done:
			return
		}
		if err != nil {
			return
		}
		select {
		case <-run:
		case <-done:
			return
		}
		worker(w, m)
	}
	f, err := dsfabric.Start(ctx, fc)
	if err != nil {
		return nil, err
	}
	if err := p.Bind(f); err != nil {
		f.Close()
		return nil, err
	}
	for range f.Names().ThreadsPerProcess {
		var err error
		select {
		case err = <-ready:
		case <-ctx.Done():
			err = ctx.Err()
		case <-f.Done():
			err = errFabricClosed
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	close(run)
	return &Job{Fabric: f, Process: p}, nil
}

// Close closes the job's fabric.
func (j *Job) Close() error { return j.Fabric.Close() }

// Serve runs the calls made to a worker thread, one-sided (m.Poll) and
// send-based (w.Poll), until the fabric closes; an idle thread backs off to
// sleeping, so it costs little.
func Serve(w *dsfabric.Worker, m *Messengers) {
	hot := dtutils.HotWait{Spin: 2 * time.Microsecond, Yield: 50 * time.Microsecond}
	done := w.Fabric().Done()
	for {
		if m.Poll()+w.Poll() > 0 {
			hot.Reset()
			continue
		}
		select {
		case <-done:
			return
		default:
		}
		hot.Wait()
	}
}
