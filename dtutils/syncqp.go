package dtutils

import (
	"fmt"
	"sync/atomic"
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
	peerGone atomic.Bool // the peer queue pair closed (transports that can tell)
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
func (q *syncQP) setPeer(p syncPeer)  { q.peer.Store(&p) }
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
	if err := wr.validate(q.proc.cfg.MaxTransfer); err != nil {
		return err
	}
	var snap uint64
	if wr.Signaled {
		snap = q.acct.snapshot()
	} else if err := q.acct.postUnsignaled(); err != nil {
		return err
	}
	var in, out []byte
	switch wr.Op {
	case OpRead, OpFetchAdd, OpCompareSwap:
		out = wr.Local.Bytes()
	default:
		in = wr.Local.Bytes()
	}
	arg1 := wr.Add
	if wr.Op == OpCompareSwap {
		arg1 = wr.Compare
	}
	st, n := apply(peer, wr.Op, wr.Remote, in, out, wr.Imm, arg1, wr.Swap, q.proc.cfg.Rank)
	if wr.Signaled || st != StatusSuccess {
		q.cq.push(Completion{WRID: wr.WRID, Op: wr.Op, Status: st, Bytes: n, retire: snap, hasRet: wr.Signaled})
	}
	return nil
}
