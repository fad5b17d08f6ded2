package dtutils

import (
	"fmt"
	"sync/atomic"
)

// sqAccount bounds the unsignaled operations outstanding on a send queue, as
// a verbs device does: an unsignaled operation is retired only when a later
// signaled one is polled from the completion queue.
type sqAccount struct {
	max     uint64
	posted  atomic.Uint64 // unsignaled operations posted so far
	retired atomic.Uint64 // of which retired by a polled signaled completion
}

// postUnsignaled counts one more unsignaled operation, or refuses it.
func (a *sqAccount) postUnsignaled() error {
	for {
		// posted, then retired: retired can only grow before the CAS, so
		// p-r never understates the count at the CAS. If retired overtook
		// p, p is stale and the CAS would fail: retry.
		p := a.posted.Load()
		r := a.retired.Load()
		if r > p {
			continue
		}
		if p-r >= a.max {
			return fmt.Errorf("%w: %d outstanding, MaxUnsignaled %d", ErrUnsignaledOverflow, p-r, a.max)
		}
		if a.posted.CompareAndSwap(p, p+1) {
			return nil
		}
	}
}

// post accounts for one operation being posted: a signaled one gets the
// snapshot its completion carries, an unsignaled one is counted (or
// refused, at MaxUnsignaled).
func (a *sqAccount) post(signaled bool) (snap uint64, err error) {
	if signaled {
		return a.snapshot(), nil
	}
	return 0, a.postUnsignaled()
}

// snapshot is recorded in a signaled operation's completion: polling it
// retires every unsignaled operation posted before it.
func (a *sqAccount) snapshot() uint64 { return a.posted.Load() }

func (a *sqAccount) retire(s uint64) {
	for {
		r := a.retired.Load()
		if s <= r || a.retired.CompareAndSwap(r, s) {
			return
		}
	}
}

// outstanding returns the unsignaled operations not yet retired.
func (a *sqAccount) outstanding() int {
	p := a.posted.Load()
	if r := a.retired.Load(); r < p {
		return int(p - r)
	}
	return 0
}
