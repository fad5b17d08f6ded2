package dtutils

import (
	"fmt"

	"github.com/seriema-go/seriema/alloc"
)

// RemoteMemory is a range of a peer process's registered memory mapped into
// this process (MapRemote): loads, stores and atomics on it reach the
// peer's memory with no work request, no completion and no peer CPU. It is
// what lets an initiator on the same machine run a lock-free operation
// itself (package rdmo's direct mode).
type RemoteMemory struct {
	b []byte
	q *syncQP
}

// Bytes returns the mapped range. Use atomics (sync/atomic on 8-aligned
// words) for anything the peer or other processes touch at the same time.
// It stays mapped until the queue pair's provider closes: touching it after
// that faults, so the caller stops using it before closing the provider.
func (m RemoteMemory) Bytes() []byte { return m.b }

// Err returns nil while the queue pair is open and its peer alive, and the
// error a Post would get after that (ErrClosed, ErrConnectionLost). The
// mapping outlives a dead peer (the memory is still there), but nobody owns
// it any more: callers check Err before each use, as a Post would.
func (m RemoteMemory) Err() error {
	if m.q == nil {
		return ErrNotConnected
	}
	if m.q.closed.Load() {
		return ErrClosed
	}
	if pp := m.q.peer.Load(); pp != nil && ((*pp).lost() || m.q.peerGone.Load()) {
		return fmt.Errorf("%w: peer process %d", ErrConnectionLost, (*pp).rank())
	}
	return nil
}

// CanMapRemote reports whether MapRemote works on qp: its transport shares
// memory with the peer (shm, and loop within one process).
func CanMapRemote(qp QueuePair) bool { return syncOf(qp) != nil }

// MapRemote maps loc, a range of the memory of qp's connected peer, into
// this process, after the checks a one-sided Post makes (process, region,
// key, bounds). Transports that do not share memory (tcp, ofi) return
// ErrNotMapped.
func MapRemote(qp QueuePair, loc alloc.Locator) (RemoteMemory, error) {
	q := syncOf(qp)
	if q == nil {
		return RemoteMemory{}, fmt.Errorf("%w: a %T", ErrNotMapped, qp)
	}
	if q.closed.Load() {
		return RemoteMemory{}, ErrClosed
	}
	pp := q.peer.Load()
	if pp == nil {
		return RemoteMemory{}, ErrNotConnected
	}
	peer := *pp
	if peer.lost() || q.peerGone.Load() {
		return RemoteMemory{}, fmt.Errorf("%w: peer process %d", ErrConnectionLost, peer.rank())
	}
	if loc.Process != peer.rank() {
		return RemoteMemory{}, fmt.Errorf("%w: locator of process %d on a queue pair to %d", ErrRemoteAccess, loc.Process, peer.rank())
	}
	b, ok := peer.mem(loc.Region, loc.Key, loc.Offset, loc.Length)
	if !ok {
		return RemoteMemory{}, fmt.Errorf("%w: %v", ErrRemoteAccess, loc)
	}
	return RemoteMemory{b: b, q: q}, nil
}

// Mapped reports whether loc's region is mapped into this process for qp
// already, so that a one-sided operation on it or MapRemote makes no
// request to the peer first: always over loop, over shm once MapRemote or
// an operation has mapped the region (the first one asks the peer's
// process for it, a round trip through its unix socket); false for the
// transports that do not share memory. A diagnostic.
func Mapped(qp QueuePair, loc alloc.Locator) bool {
	q := syncOf(qp)
	if q == nil {
		return false
	}
	p := q.shm.Load()
	if p == nil {
		return q.peer.Load() != nil // loop: the peer's memory is this process's
	}
	m, ok := p.regions.Load(loc.Region)
	return ok && m.key == loc.Key
}

// syncOf returns the synchronous queue pair behind qp, nil for transports
// that do not share memory.
func syncOf(qp QueuePair) *syncQP {
	switch q := qp.(type) {
	case *shmQP:
		return q.syncQP
	case *loopQP:
		return q.syncQP
	}
	return nil
}
