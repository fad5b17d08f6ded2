package dtutils

import (
	"fmt"
	"sync/atomic"

	"github.com/seriema-go/seriema/alloc"
)

// syncPeer is the remote side as seen by a synchronous queue pair: a target
// it applies operations to directly, which may go away.
type syncPeer interface {
	target
	lost() bool
}

// syncQP is the queue pair of the synchronous transports (loop, shm): the
// poster applies the operation itself, so it has completed when Post returns
// and the remote CPU takes no part.
type syncQP struct {
	proc     *Process
	token    uint64
	ep       endpoint
	acct     sqAccount
	cq       *memCQ
	peer     atomic.Pointer[syncPeer]
	shm      atomic.Pointer[shmPeer] // the peer, when it is one (writeNow)
	peerGone atomic.Bool             // the peer queue pair closed (transports that can tell)
	closed   atomic.Bool
}

func newSyncQP(proc *Process, transport uint8) *syncQP {
	q := &syncQP{proc: proc, token: randomToken()}
	q.acct.max = uint64(proc.cfg.MaxUnsignaled)
	q.cq = newMemCQ(&q.acct)
	q.ep = endpoint{transport: transport, rank: proc.cfg.Rank, token: q.token}
	return q
}

func (q *syncQP) Endpoint() []byte    { return q.ep.marshal() }
func (q *syncQP) CQ() CompletionQueue { return q.cq }
func (q *syncQP) Outstanding() int    { return q.acct.outstanding() }
func (q *syncQP) Close() error        { q.closed.Store(true); return nil }
func (q *syncQP) setPeer(p syncPeer) {
	if sp, ok := p.(*shmPeer); ok {
		q.shm.Store(sp)
	}
	q.peer.Store(&p)
}
func (q *syncQP) PeerRank() uint32 {
	if p := q.peer.Load(); p != nil {
		return (*p).rank()
	}
	return 0
}

func (q *syncQP) Post(wr WorkRequest) error {
	if q.closed.Load() {
		return ErrClosed
	}
	pp := q.peer.Load()
	if pp == nil {
		return ErrNotConnected
	}
	peer := *pp
	if peer.lost() || q.peerGone.Load() {
		return fmt.Errorf("%w: peer process %d", ErrConnectionLost, peer.rank())
	}
	if err := wr.validate(q.proc.cfg.MaxTransfer, q.proc.cfg.CallBytes); err != nil {
		return err
	}
	snap, err := q.acct.post(wr.Signaled)
	if err != nil {
		return err
	}
	var in, out []byte
	switch wr.Op {
	case OpRead, OpFetchAdd, OpCompareSwap:
		out = wr.Local.Bytes()
	case OpCall:
		in, out = wr.Local.Bytes(), wr.Result.Bytes()
	default:
		in = wr.Local.Bytes()
	}
	arg1 := wr.Add
	if wr.Op == OpCompareSwap {
		arg1 = wr.Compare
	}
	var st Status
	var n int
	if wr.Op == OpCall {
		// Over shm this waits for the peer's call engine: a call is one
		// round trip through shared memory, complete when Post returns
		// like every operation here.
		st, n = peer.call(q.proc.cfg.Rank, in, out, func() bool { return peer.lost() || q.peerGone.Load() })
	} else {
		st, n = apply(peer, wr.Op, wr.Remote, in, out, wr.Imm, arg1, wr.Swap, q.proc.cfg.Rank)
	}
	if wr.Signaled || st != StatusSuccess {
		q.cq.push(Completion{WRID: wr.WRID, Op: wr.Op, Status: st, Bytes: n, retire: snap, hasRet: wr.Signaled})
	}
	return nil
}

// writeNow is the Transmitter's hot path for a write over shm (and loop):
// a bounds check against a cached mapping, then the copy and its seal. The
// write has completed when it returns, like every operation here, so nothing
// is left to account for, signal or retire: the Transmitter takes no ticket.
// It reports false, having done nothing, when the write needs Post (an
// error to report in order, a region not mapped yet, another transport).
func (q *syncQP) writeNow(src []byte, remote alloc.Locator) bool {
	sp := q.shm.Load()
	n := uint64(len(src))
	if sp == nil {
		return q.writeNowLoop(src, remote)
	}
	if q.closed.Load() || q.peerGone.Load() || sp.gone.Load() ||
		remote.Process != sp.r || n != remote.Length || len(src) > q.proc.cfg.MaxTransfer {
		return false
	}
	m := sp.last.Load()
	if m == nil || m.id != remote.Region || m.key != remote.Key {
		if m = sp.lookup(remote.Region, remote.Key); m == nil {
			return false
		}
	}
	off := remote.Offset
	if off > uint64(len(m.mem)) || n > uint64(len(m.mem))-off {
		return false
	}
	Publish(m.mem[off:off+n:off+n], src)
	return true
}

// sendNow is the Transmitter's path for a send over shm and loop: it
// delivers src into the peer's next posted receive at once and returns the
// status, so that nothing is left to account for or signal and a failure
// (no receive posted, a buffer too small) is the caller's error rather than
// the queue pair's. It reports false, having done nothing, when the send
// needs Post.
func (q *syncQP) sendNow(src []byte, imm uint32) (Status, bool) {
	pp := q.peer.Load()
	if pp == nil || q.closed.Load() || q.peerGone.Load() || len(src) > q.proc.cfg.MaxTransfer {
		return 0, false
	}
	peer := *pp
	if peer.lost() {
		return 0, false
	}
	st, _ := apply(peer, OpSend, alloc.Locator{}, src, nil, imm, 0, 0, q.proc.cfg.Rank)
	return st, true
}

// writeNowLoop is writeNow on loop: the target region is resolved on every
// write (a region of this process may be freed at any time, so nothing is
// cached), then copied into.
func (q *syncQP) writeNowLoop(src []byte, remote alloc.Locator) bool {
	pp := q.peer.Load()
	if pp == nil || q.closed.Load() || len(src) > q.proc.cfg.MaxTransfer || uint64(len(src)) != remote.Length {
		return false
	}
	peer := *pp
	if peer.lost() || remote.Process != peer.rank() {
		return false
	}
	dst, ok := peer.mem(remote.Region, remote.Key, remote.Offset, remote.Length)
	if !ok {
		return false
	}
	Publish(dst, src)
	return true
}
