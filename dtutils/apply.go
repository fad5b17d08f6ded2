package dtutils

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
)

// target is the process an operation acts on, as seen by whoever applies it:
// the poster itself (loop, shm) or the remote engine (tcp).
type target interface {
	// rank is the target process's rank.
	rank() uint32
	// mem returns [off, off+n) of the target's region after checking its key
	// and bounds; ok is false when any check fails.
	mem(region uint32, key, off, n uint64) (b []byte, ok bool)
	// receiver returns the target's shared receive queue.
	receiver() receiveSide
	// call runs a call (OpCall) at the target and returns its status and
	// reply length; gone reports the target lost while waiting for it.
	call(src uint32, req, reply []byte, gone func() bool) (Status, int)
}

// apply performs op against t on behalf of process src and returns its
// status and byte count. in is the payload of Write, WriteImm and Send; out
// receives Read data and the atomics' old value. Every transport's semantics
// are this function's, except OpCall's: see target.call.
func apply(t target, op Op, remote alloc.Locator, in, out []byte, imm uint32, arg1, arg2 uint64, src uint32) (Status, int) {
	remoteMem := func() ([]byte, bool) {
		if remote.Process != t.rank() {
			return nil, false
		}
		return t.mem(remote.Region, remote.Key, remote.Offset, remote.Length)
	}
	switch op {
	case OpWrite:
		dst, ok := remoteMem()
		if !ok {
			return StatusRemoteAccess, 0
		}
		Publish(dst, in)
		return StatusSuccess, len(in)
	case OpRead:
		s, ok := remoteMem()
		if !ok {
			return StatusRemoteAccess, 0
		}
		Publish(out, s)
		return StatusSuccess, len(s)
	case OpFetchAdd, OpCompareSwap:
		w, ok := remoteMem()
		if !ok || len(w) != 8 || uintptr(unsafe.Pointer(&w[0]))%8 != 0 {
			return StatusRemoteAccess, 0
		}
		p := (*atomic.Uint64)(unsafe.Pointer(&w[0]))
		var old uint64
		if op == OpFetchAdd {
			old = p.Add(arg1) - arg1
		} else {
			for {
				old = p.Load()
				if old != arg1 || p.CompareAndSwap(old, arg2) {
					break
				}
			}
		}
		binary.LittleEndian.PutUint64(out, old)
		return StatusSuccess, 8
	case OpSend, OpWriteImm:
		rs := t.receiver()
		if !rs.claim() {
			return StatusReceiverNotReady, 0
		}
		if op == OpSend && len(in) <= recvInlineMax && uint64(len(in)) <= rs.cnt.minLen.Load() {
			// Inline: the message goes into the completion itself, and the
			// target copies it into the receive it takes when it polls.
			// One cell's lines cross between the processes, where taking
			// the receive here would add the descriptor's and the buffer's.
			var h [recvComplHdr]byte
			putRecvComplHdr(h[:], Completion{Op: OpRecv, Bytes: len(in), Imm: imm, Src: src}, complInline)
			if !rs.rcq.enqueue2(h[:], in) {
				rs.unclaim() // a consumer died holding a cell
				return StatusReceiverNotReady, 0
			}
			return StatusSuccess, len(in)
		}
		var e [recvDescSize]byte
		// A receive being posted right now counts as posted (dequeueSoon).
		if !rs.srq.dequeueSoon(e[:], claimedCellWait) {
			rs.unclaim()
			return StatusReceiverNotReady, 0
		}
		d := getRecvDesc(e[:])
		c := Completion{WRID: d.wrid, Op: OpRecv, Bytes: len(in), Imm: imm, Src: src}
		st := StatusSuccess
		if op == OpWriteImm {
			c.Op = OpRecvImm
			if dst, ok := remoteMem(); ok {
				Publish(dst, in)
			} else {
				st = StatusRemoteAccess
			}
		} else if uint64(len(in)) > d.n {
			st = StatusLength
		} else if buf, ok := t.mem(d.region, d.key, d.off, d.n); ok {
			copy(buf, in)
		} else {
			st = StatusRemoteAccess
		}
		c.Status = st
		if st != StatusSuccess {
			c.Bytes = 0
		}
		var ce [recvComplHdr + 8]byte // header and wrid: the rest of the cell is not read
		putRecvCompl(ce[:], c)
		// Cannot fail: PostRecv keeps posted-but-unpolled receives within
		// the completion ring's capacity, and every entry holds a claim.
		rs.rcq.enqueue(ce[:])
		return st, c.Bytes
	case OpNop:
		return StatusSuccess, 0
	}
	return StatusRemoteAccess, 0
}

// Publish copies src into dst following the visibility contract of
// docs/design.md §4: when the copy ends on an 8-byte boundary, its last word is
// stored last, atomically with release semantics, so a reader that sees it
// (an acquire load: sync/atomic's Load) sees every byte before it. Records
// seal themselves with that word. It is what every one-sided write here
// does to land; programs that fill shared memory themselves (the limit
// benchmark's ring) use it so that both seal the same way.
func Publish(dst, src []byte) {
	n := len(src)
	if n > len(dst) {
		panic("dtutils: Publish into a shorter slice")
	}
	if n >= 8 && (uintptr(unsafe.Pointer(&dst[0]))+uintptr(n))%8 == 0 {
		copy(dst[:n-8], src[:n-8])
		w := *(*uint64)(unsafe.Pointer(&src[n-8])) // native order: bytes move unchanged
		storeRelease(unsafe.Pointer(&dst[n-8]), w)
		return
	}
	copy(dst, src)
}

// PublishWord stores w (native byte order) in dst's first 8 bytes the way
// Publish stores its last word: atomically, with release semantics, after
// every store before it. dst must be 8-byte aligned. Writers that build a
// record in memory mapped from a peer (MapRemote) seal it with this.
func PublishWord(dst []byte, w uint64) {
	_ = dst[7]
	storeRelease(unsafe.Pointer(&dst[0]), w)
}

// localTarget is a process applying operations to itself (loop peers, the
// tcp engine).
type localTarget struct{ p *Process }

func (t localTarget) rank() uint32 { return t.p.cfg.Rank }

func (t localTarget) mem(region uint32, key, off, n uint64) ([]byte, bool) {
	b, err := t.p.reg.Resolve(alloc.Locator{RegionRef: alloc.RegionRef{Process: t.p.cfg.Rank, Region: region}, Offset: off, Length: n, Key: key})
	return b, err == nil
}

func (t localTarget) receiver() receiveSide {
	return receiveSide{srq: t.p.srq, rcq: t.p.rcq, cnt: t.p.cnt, seen: &t.p.seen}
}

func (t localTarget) call(src uint32, req, reply []byte, _ func() bool) (Status, int) {
	return t.p.call(src, req, reply)
}
