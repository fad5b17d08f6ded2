package dsfabric

import (
	"context"
	"sync"
	"sync/atomic"
)

// Notify says when a call counts down a Synchronizer.
type Notify int

const (
	// Transmitted: when the call has been handed to the transport
	// (local notification).
	Transmitted Notify = iota
	// Executed: when the callee has run the handler (remote notification,
	// a message back from the callee).
	Executed
)

// Synchronizer is a counter of outstanding calls: Wait returns, and the
// callback runs, when it reaches zero. Pass one to a call to count it.
type Synchronizer struct {
	mode Notify
	n    atomic.Int64
	fn   func()
	done chan struct{}
	once sync.Once
	id   uint64
	reg  atomic.Pointer[Fabric]
	ro   sync.Once
}

// NewSynchronizer returns a synchronizer expecting n notifications; fn, if
// not nil, runs (once) when the count reaches zero. One made with n = 0 is
// done at once: calls refuse it (ErrSyncDone).
func NewSynchronizer(n int, mode Notify, fn func()) *Synchronizer {
	s := &Synchronizer{mode: mode, fn: fn, done: make(chan struct{})}
	s.n.Store(int64(n))
	if n == 0 {
		s.finish()
	}
	return s
}

// Add changes the count by k: raise it before issuing k more calls that
// must count. Like sync.WaitGroup's, it panics on misuse that would lose
// a notification silently: an Add to a synchronizer already done (its
// count reached zero, Wait returned and the callback ran; make a new one),
// or one that takes the count below zero. An Add that brings the count to
// zero finishes it.
func (s *Synchronizer) Add(k int) {
	if s.finished() {
		panic("dsfabric: Synchronizer.Add after its count reached zero (make a new one)")
	}
	switch n := s.n.Add(int64(k)); {
	case n < 0:
		panic("dsfabric: Synchronizer.Add takes the count below zero")
	case n == 0:
		s.finish()
	}
}

// Count returns the notifications still expected.
func (s *Synchronizer) Count() int { return int(s.n.Load()) }

// Mode returns when the synchronizer is notified.
func (s *Synchronizer) Mode() Notify { return s.mode }

// Done counts one notification down.
func (s *Synchronizer) Done() {
	if s.n.Add(-1) == 0 {
		s.finish()
	}
}

func (s *Synchronizer) finish() {
	s.once.Do(func() {
		if f := s.reg.Load(); f != nil {
			f.syncs.Delete(s.id)
		}
		if s.fn != nil {
			s.fn()
		}
		close(s.done)
	})
}

// finished reports whether the count has reached zero.
func (s *Synchronizer) finished() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the count reaches zero.
func (s *Synchronizer) Wait() { <-s.done }

// WaitContext is Wait that gives up when ctx ends (say, when a callee died
// before notifying).
func (s *Synchronizer) WaitContext(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// C returns a channel closed when the count reaches zero.
func (s *Synchronizer) C() <-chan struct{} { return s.done }

// register makes an Executed synchronizer findable by notifications.
func (f *Fabric) register(s *Synchronizer) uint64 {
	s.ro.Do(func() {
		s.id = f.nextID.Add(1)
		f.syncs.Store(s.id, s)
		s.reg.Store(f)
	})
	return s.id
}
