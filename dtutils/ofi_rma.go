//go:build ofi

package dtutils

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

// The one-sided path of the ofi provider (OFIConfig.OneSided): writes and
// reads go as fi_writemsg/fi_readmsg straight into the peer's registered
// memory; every other operation keeps the message path (frames applied by
// the target's engine). What it adds, and why:
//
//   - Registration. A region is registered with fi_mr_reg the first time a
//     peer asks about it (or, under FI_MR_LOCAL, is used as a local
//     buffer), with its own random 64-bit key as the requested key, and
//     deregistered by the registry's OnRelease hook before its memory is
//     unmapped.
//   - Checks at the initiator. libfabric's tcp provider does not keep this
//     package's contract for a bad locator (a wrong key "succeeds" and
//     writes nothing; one past the end drops the connection), so the
//     initiator checks instead: before its first RMA into a region it asks
//     the peer (region question, docs/wire.md) whether the region and key
//     are good and learns the region's length, address and registration
//     key; a bad key or range then completes with StatusRemoteAccess
//     without anything sent, and the queue pair stays usable.
//   - Order. tcp;ofi_rxm orders writes after writes and sends after writes,
//     but neither writes nor sends after reads, and promises no completion
//     order; frames are applied by the target's engine after they arrive,
//     so an fi_write may overtake them. So a queue pair is in one of two
//     modes: before its first RMA after frame operations it sends a fence
//     (a signaled Nop nobody sees) and waits for its answer; before a frame
//     operation after RMA it waits for the RMA operations to complete; a
//     write after a read waits for the reads. Completions are handed out in
//     posting order: every RMA operation asks libfabric for a completion
//     (selective completion would need the completion order tcp lacks), and
//     the queue pair reports the signaled ones, and the failed ones, in
//     order, which keeps the Transmitter's retirement rule sound.
//   - Visibility. A write that ends on an 8-byte boundary goes as two
//     fi_writes, the body and then its last word, which the provider places
//     after the body (FI_ORDER_WAW): a reader polling that word sees the
//     whole write. Over tcp the word itself arrives by a socket read; that
//     it is not torn rests on the provider reading an 8-byte payload whole.
//   - Completion. A write completes when the target has its data
//     (FI_DELIVERY_COMPLETE).
type ofiRMA struct {
	p     *ofiProvider
	virt  bool // FI_MR_VIRT_ADDR: RMA addresses are virtual addresses
	local bool // FI_MR_LOCAL: local buffers need registering too
	hook  func()

	mu  sync.Mutex
	mrs map[uint32]ofiMR // this process's regions registered, by ID

	smu   sync.Mutex
	slots []rmaSlot // operations in flight, by completion context
	free  indexPool

	pieces atomic.Uint64 // fi_writemsg and fi_readmsg posted (tests read it)
}

// ofiMR is one registration: libfabric's handle and descriptor (opaque
// integers), the key peers use, and where the memory is.
type ofiMR struct {
	mr, desc   uintptr
	key        uint64
	base, size uint64
}

type rmaSlot struct {
	q   *ofiQP
	seq uint64
}

// rmaOp is an RMA work request on its way: parts counts its fi_writes and
// fi_reads not yet completed.
type rmaOp struct {
	wrid     uint64
	op       Op
	signaled bool
	retire   uint64
	parts    int
	bytes    int
	status   Status
}

// remoteRegion is what a peer said about one of its regions.
type remoteRegion struct {
	key, length, addr, mrKey uint64
	frames                   bool // no one-sided access: use the message path
}

// regionAsk is a question on its way; done closes when the answer is in.
type regionAsk struct {
	done   chan struct{}
	answer ofiRegionAnswer
}

type askKey struct {
	region uint32
	key    uint64
}

// newOFIRMA sets the one-sided path up. Its slot table bounds the
// operations in flight per provider to SendBuffers, as for messages:
// beyond it a post makes progress until one completes.
func newOFIRMA(p *ofiProvider, virt, local bool) *ofiRMA {
	r := &ofiRMA{p: p, virt: virt, local: local, mrs: make(map[uint32]ofiMR)}
	r.slots = make([]rmaSlot, p.cfg.SendBuffers)
	r.free = newIndexPool(p.cfg.SendBuffers)
	r.hook = p.proc.Registry().OnRelease(r.release)
	return r
}

// register returns the registration of region, making it on first use.
func (r *ofiRMA) register(region *alloc.Region) (ofiMR, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.mrs[region.ID()]; ok {
		return m, nil
	}
	epLife.RLock()
	defer epLife.RUnlock()
	if !r.p.epOpen {
		return ofiMR{}, ErrClosed
	}
	if _, live := r.p.proc.Registry().Lookup(region.ID()); !live {
		return ofiMR{}, fmt.Errorf("%w: region %d", alloc.ErrUnknownRegion, region.ID())
	}
	m, err := r.p.mrReg(region.Bytes(), region.Key())
	if err != nil {
		return ofiMR{}, err
	}
	r.mrs[region.ID()] = m
	return m, nil
}

// release deregisters a region that is being released (the registry's
// OnRelease hook), before its memory is unmapped.
func (r *ofiRMA) release(id uint32) {
	r.mu.Lock()
	m, ok := r.mrs[id]
	delete(r.mrs, id)
	r.mu.Unlock()
	if !ok {
		return
	}
	epLife.RLock()
	if r.p.epOpen {
		mrClose(m)
	}
	epLife.RUnlock()
}

// closeAll deregisters everything; epLife is held (write), the endpoint
// still open.
func (r *ofiRMA) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, m := range r.mrs {
		mrClose(m)
		delete(r.mrs, id)
	}
}

func (r *ofiRMA) unhook() { r.hook() }

// takeSlot takes a completion context for an operation of q.
func (r *ofiRMA) takeSlot(q *ofiQP, seq uint64) (int, bool) {
	r.smu.Lock()
	defer r.smu.Unlock()
	i, ok := r.free.take()
	if ok {
		r.slots[i] = rmaSlot{q: q, seq: seq}
	}
	return i, ok
}

// done handles the completion of slot i; cqmu is held (or the post that
// failed synchronously runs it). err, when set, says why it failed.
func (r *ofiRMA) done(i int, st Status, err error) {
	r.smu.Lock()
	s := r.slots[i]
	r.giveBackLocked(i)
	r.smu.Unlock()
	if s.q == nil {
		return
	}
	s.q.partDone(s.seq, st)
	if st == StatusConnectionLost {
		go s.q.fail(fmt.Errorf("%w: rank %d: %w", ErrConnectionLost, s.q.peerRank, err))
	}
}

// rmaQP is a queue pair's side of the one-sided path.
type rmaQP struct {
	pmu         sync.Mutex // held by a post: the mode and the order rules
	oneSided    bool       // the last operation posted was an RMA
	framesSince int        // frame operations since the last fence

	rmu    sync.Mutex
	ops    fifo[rmaOp] // RMA operations not yet reported, in posting order
	opBase uint64      // sequence number of ops' oldest
	reads  int         // reads among them
	dead   bool        // the queue pair failed: completions are dropped
	remote map[uint32]remoteRegion
	asks   map[askKey]*regionAsk
}

// Post sends writes and reads one-sided when the provider's OneSided is
// on, the rest through the frame engine.
func (q *ofiQP) Post(wr WorkRequest) error {
	if q.prov.rma == nil {
		return q.tcpQP.Post(wr)
	}
	if (wr.Op == OpWrite || wr.Op == OpRead) && wr.Local.Len() > 0 && wr.Remote.Process == q.peerRank {
		return q.postRMA(wr)
	}
	return q.postFrame(wr)
}

// postFrame posts through the frame engine after the RMA operations before
// it have completed.
func (q *ofiQP) postFrame(wr WorkRequest) error {
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if q.oneSided {
		if err := q.await(func() bool { return q.rmaPending() == 0 }); err != nil {
			return err
		}
		q.oneSided = false
	}
	err := q.tcpQP.Post(wr)
	if err == nil {
		q.framesSince++
	}
	return err
}

// postRMA posts a write or read as fi_writemsg/fi_readmsg.
func (q *ofiQP) postRMA(wr WorkRequest) error {
	if err := q.tcpQP.check(&wr); err != nil {
		return err
	}
	rr, ok, err := q.remoteRegion(wr.Remote)
	if err != nil {
		return err
	}
	if ok && rr.frames {
		return q.postFrame(wr)
	}
	r := q.prov.rma
	var local ofiMR
	if r.local {
		if local, err = r.register(wr.Local.Region()); err != nil {
			return fmt.Errorf("dtutils: ofi: registering the local buffer: %w", err)
		}
	}
	q.pmu.Lock()
	defer q.pmu.Unlock()
	if !q.oneSided {
		if q.framesSince > 0 {
			if err := q.tcpQP.fence(); err != nil {
				return err
			}
			if err := q.await(func() bool { return q.unansweredFences() == 0 }); err != nil {
				return err
			}
		}
		q.oneSided, q.framesSince = true, 0
	}
	if wr.Op == OpWrite {
		// tcp;ofi_rxm does not order writes after reads.
		if err := q.await(func() bool { return q.readsPending() == 0 }); err != nil {
			return err
		}
	}
	snap, err := q.acct.post(wr.Signaled)
	if err != nil {
		return err
	}
	l := wr.Remote
	op := rmaOp{wrid: wr.WRID, op: wr.Op, signaled: wr.Signaled, retire: snap, bytes: int(l.Length)}
	if !ok || l.Key != rr.key || !(l.Offset <= rr.length && l.Length <= rr.length-l.Offset) {
		op.status = StatusRemoteAccess
		_, err := q.queueOp(op)
		return err
	}
	// The pieces: a write ending on an 8-byte boundary sends its last
	// word after the rest, so that it lands last.
	b := wr.Local.Bytes()
	addr := l.Offset
	if q.prov.rma.virt {
		addr += rr.addr
	}
	cut := len(b)
	if wr.Op == OpWrite && len(b) > 8 && (l.Offset+l.Length)%8 == 0 {
		cut = len(b) - 8
	}
	op.parts = 1
	if cut < len(b) {
		op.parts = 2
	}
	seq, err := q.queueOp(op)
	if err != nil {
		return err
	}
	if err := q.rmaPiece(wr.Op == OpWrite, b[:cut], local.desc, addr, rr.mrKey, seq); err != nil {
		q.partDone(seq, StatusConnectionLost) // the second piece is not sent
		if op.parts == 2 {
			q.partDone(seq, StatusConnectionLost)
		}
		go q.fail(err)
		return nil
	}
	if cut < len(b) {
		if err := q.rmaPiece(true, b[cut:], local.desc, addr+uint64(cut), rr.mrKey, seq); err != nil {
			q.partDone(seq, StatusConnectionLost)
			go q.fail(err)
		}
	}
	return nil
}

// rmaPiece posts one fi_write or fi_read of operation seq, making progress
// while the provider or the slot table is full.
func (q *ofiQP) rmaPiece(write bool, b []byte, desc uintptr, addr, key, seq uint64) error {
	r := q.prov.rma
	bo := Backoff{}
	for {
		i, ok := r.takeSlot(q, seq)
		if !ok {
			if err := q.lost(); err != nil {
				return err
			}
			if !q.prov.poll() {
				bo.Wait()
			}
			continue
		}
		if l := q.local; l != nil && !l.epOpen {
			r.giveBack(i)
			return fmt.Errorf("%w: rank %d closed its provider", ErrConnectionLost, q.peerRank)
		}
		ret := q.prov.rmaPost(write, b, desc, q.dest, addr, key, ofiCtxRMA|uint64(i))
		switch ret {
		case 0:
			r.pieces.Add(1)
			return nil
		case fiEAgain:
			r.giveBack(i)
			if err := q.lost(); err != nil {
				return err
			}
			if !q.prov.poll() {
				bo.Wait()
			}
			continue
		case fiECanceled:
			r.giveBack(i)
			return fmt.Errorf("%w: provider closed", ErrClosed)
		}
		r.giveBack(i)
		verb := "fi_read"
		if write {
			verb = "fi_write"
		}
		return fmt.Errorf("%w: ofi %s to rank %d: %v", ErrConnectionLost, verb, q.peerRank, fiErr(ret))
	}
}

// giveBack returns a slot no operation was posted with.
func (r *ofiRMA) giveBack(i int) {
	r.smu.Lock()
	r.giveBackLocked(i)
	r.smu.Unlock()
}

func (r *ofiRMA) giveBackLocked(i int) {
	r.slots[i] = rmaSlot{}
	r.free.put(i)
}

// queueOp adds an operation to the queue pair's RMA queue and returns its
// sequence number; one with no parts is reported (in order) at once. It
// fails once the queue pair has failed.
func (q *ofiQP) queueOp(op rmaOp) (uint64, error) {
	q.rmu.Lock()
	seq := q.opBase + uint64(q.ops.len())
	if q.dead {
		q.rmu.Unlock()
		return 0, q.lostOr()
	}
	q.ops.push(op)
	if op.op == OpRead && op.parts > 0 {
		q.reads++
	}
	q.report()
	q.rmu.Unlock()
	return seq, nil
}

// partDone counts one completed piece of operation seq, with its status.
func (q *ofiQP) partDone(seq uint64, st Status) {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.dead || seq < q.opBase || seq-q.opBase >= uint64(q.ops.len()) {
		return
	}
	op := q.ops.at(int(seq - q.opBase))
	op.parts--
	if st != StatusSuccess && op.status == StatusSuccess {
		op.status = st
	}
	if op.parts == 0 && op.op == OpRead {
		q.reads--
	}
	q.report()
}

// report hands out the completions of the oldest finished operations, in
// order: signaled ones and failed ones, as the frame engine does; rmu is
// held.
func (q *ofiQP) report() {
	for q.ops.len() > 0 && q.ops.front().parts == 0 {
		op, _ := q.ops.pop()
		q.opBase++
		if op.signaled || op.status != StatusSuccess {
			q.cq.push(Completion{WRID: op.wrid, Op: op.op, Status: op.status, Bytes: op.bytes, retire: op.retire, hasRet: op.signaled})
		}
	}
}

// rmaFailed reports every RMA operation not yet reported as lost (the
// queue pair failed); completions that come later are dropped, their
// slots freed.
func (q *ofiQP) rmaFailed() {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	q.dead = true
	for {
		op, ok := q.ops.pop()
		if !ok {
			break
		}
		q.opBase++
		q.cq.push(Completion{WRID: op.wrid, Op: op.op, Status: StatusConnectionLost})
	}
	q.reads = 0
	for _, a := range q.asks {
		select {
		case <-a.done:
		default:
			close(a.done)
		}
	}
	q.asks = nil
}

func (q *ofiQP) rmaPending() int {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	return q.ops.len()
}

func (q *ofiQP) readsPending() int {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	return q.reads
}

// lost returns why the queue pair can take no more operations, if so.
func (q *ofiQP) lost() error {
	if q.closed.Load() {
		return ErrClosed
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lostErr
}

// await makes progress until cond holds or the queue pair fails. A peer
// that stops answering fails the queue pair through the prober (fences are
// pending operations) or through libfabric's error completions.
func (q *ofiQP) await(cond func() bool) error {
	b := Backoff{Idle: q.prov.idle}
	for !cond() {
		if err := q.lost(); err != nil {
			return err
		}
		if q.progress() {
			b = Backoff{Idle: q.prov.idle}
		} else {
			b.Wait()
		}
	}
	return nil
}

// remoteRegion returns what the peer said of l's region, asking it (with
// l's key) first if nobody has; ok is false when the peer said no (an
// unknown region or another key).
func (q *ofiQP) remoteRegion(l alloc.Locator) (rr remoteRegion, ok bool, err error) {
	q.rmu.Lock()
	if rr, ok := q.remote[l.Region]; ok {
		// Known: a region's key never changes, so postRMA refuses
		// another key without asking again.
		q.rmu.Unlock()
		return rr, true, nil
	}
	if q.dead {
		q.rmu.Unlock()
		return rr, false, q.lostOr()
	}
	k := askKey{l.Region, l.Key}
	a := q.asks[k]
	if a == nil {
		if q.asks == nil {
			q.asks = make(map[askKey]*regionAsk)
		}
		a = &regionAsk{done: make(chan struct{})}
		q.asks[k] = a
		q.rmu.Unlock()
		q.controlBody(ofiKindRegionAsk, ofiRegionAsk{region: l.Region, key: l.Key}.append(nil))
	} else {
		q.rmu.Unlock()
	}
	deadline := time.Now().Add(q.prov.cfg.PeerTimeout)
	answered := func() bool {
		select {
		case <-a.done:
			return true
		default:
			return time.Now().After(deadline)
		}
	}
	if err := q.await(answered); err != nil {
		return rr, false, err
	}
	select {
	case <-a.done:
	default:
		err := fmt.Errorf("%w: rank %d did not answer a region question within %v", ErrConnectionLost, q.peerRank, q.prov.cfg.PeerTimeout)
		go q.fail(err)
		return rr, false, err
	}
	q.rmu.Lock()
	dead := q.dead
	q.rmu.Unlock()
	if dead {
		return rr, false, q.lostOr()
	}
	switch a.answer.status {
	case ofiRegionYes:
		return remoteRegion{key: a.answer.key, length: a.answer.length, addr: a.answer.addr, mrKey: a.answer.mrKey}, true, nil
	case ofiRegionNoSided:
		return remoteRegion{frames: true}, true, nil
	}
	return rr, false, nil
}

// lostOr returns lost(), or ErrConnectionLost when the queue pair failed
// without a recorded reason reaching it yet.
func (q *ofiQP) lostOr() error {
	if err := q.lost(); err != nil {
		return err
	}
	return fmt.Errorf("%w: rank %d", ErrConnectionLost, q.peerRank)
}

// regionMessage handles a region question (answered from a goroutine: it
// registers memory and sends) or answer; called in sequence, under inMu.
func (q *ofiQP) regionMessage(kind uint8, body []byte) {
	if kind == ofiKindRegionAsk {
		a, err := parseRegionAsk(body)
		if err != nil {
			q.prov.log.Warn("dropping a malformed region question", "peer", q.peerRank, "err", err)
			return
		}
		go q.answerRegion(a)
		return
	}
	a, err := parseRegionAnswer(body)
	if err != nil {
		q.prov.log.Warn("dropping a malformed region answer", "peer", q.peerRank, "err", err)
		return
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	k := askKey{a.region, a.key}
	ask := q.asks[k]
	if ask == nil {
		return // not asked, or the queue pair failed meanwhile
	}
	delete(q.asks, k)
	ask.answer = a
	switch a.status {
	case ofiRegionYes:
		if q.remote == nil {
			q.remote = make(map[uint32]remoteRegion)
		}
		q.remote[a.region] = remoteRegion{key: a.key, length: a.length, addr: a.addr, mrKey: a.mrKey}
	case ofiRegionNoSided:
		if q.remote == nil {
			q.remote = make(map[uint32]remoteRegion)
		}
		q.remote[a.region] = remoteRegion{frames: true}
	}
	close(ask.done)
}

// answerRegion answers a peer's region question: yes with the region's
// registration (made now if need be) when region and key are good.
func (q *ofiQP) answerRegion(a ofiRegionAsk) {
	ans := ofiRegionAnswer{region: a.region, key: a.key, status: ofiRegionNo}
	region, ok := q.prov.proc.Registry().Lookup(a.region)
	switch {
	case !ok || region.Key() != a.key:
	case q.prov.rma == nil:
		ans.status = ofiRegionNoSided
	default:
		m, err := q.prov.rma.register(region)
		switch {
		case errors.Is(err, alloc.ErrUnknownRegion):
		case err != nil:
			q.prov.log.Warn("region not registered for one-sided access; the peer uses messages", "region", a.region, "err", err)
			ans.status = ofiRegionNoSided
		default:
			ans.status, ans.length, ans.mrKey = ofiRegionYes, m.size, m.key
			if q.prov.rma.virt {
				ans.addr = m.base
			}
		}
	}
	q.controlBody(ofiKindRegionAnswer, ans.append(nil))
}
