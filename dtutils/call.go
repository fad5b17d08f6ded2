package dtutils

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Operator runs one call (OpCall) at the target: req is the request, reply
// the caller's reply buffer (its capacity); it returns the reply's length
// (clamped to [0, len(reply)]). It runs on the transport's engine, never on
// an application thread: the tcp and ofi connection engines (or a thread
// polling for them), the process's call engine for shm peers, the poster
// itself over loop. It must not block and must be safe for concurrent use:
// tcp runs one call per connection at a time, ofi one per endpoint, shm one
// per process.
type Operator func(src uint32, req, reply []byte) int

// SetOperator installs the process's Operator, once, and starts the engine
// that serves shm peers' calls. Until then, calls fail with
// StatusNoOperator.
func (p *Process) SetOperator(op Operator) error {
	if op == nil {
		return fmt.Errorf("%w: nil Operator", ErrBadRequest)
	}
	if !p.op.CompareAndSwap(nil, &op) {
		return fmt.Errorf("%w: process %d already has an Operator", ErrBadRequest, p.cfg.Rank)
	}
	p.calls.operator().Store(1)
	p.callDone = make(chan struct{})
	go p.callEngine()
	return nil
}

// call runs a call that arrived over tcp, ofi or loop: CallSlots bounds the
// calls running at once from those transports (the queue of incoming
// operations); more are refused with StatusBusy.
func (p *Process) call(src uint32, req, reply []byte) (Status, int) {
	op := p.op.Load()
	if op == nil {
		return StatusNoOperator, 0
	}
	if len(req) > p.cfg.CallBytes || len(reply) > p.cfg.CallBytes {
		return StatusLength, 0
	}
	if p.running.Add(1) > int64(p.cfg.CallSlots) {
		p.running.Add(-1)
		return StatusBusy, 0
	}
	defer p.running.Add(-1)
	return StatusSuccess, clampReply((*op)(src, req, reply), len(reply))
}

func clampReply(n, limit int) int { return min(max(n, 0), limit) }

// callArea is a process's call area (docs/wire.md), seen by its engine or
// by an shm peer that mapped it.
type callArea struct {
	mem           []byte
	slots, bytes  int
	free, posted  *ring
	slotsAt, size int
}

func initCallArea(mem []byte, slots, bytes int) (*callArea, error) {
	c := &callArea{mem: mem, slots: slots, bytes: bytes}
	var err error
	rb := ringBytes(slots, callEntry)
	if c.free, err = initRing(mem[callHeader:callHeader+rb], slots, callEntry); err != nil {
		return nil, err
	}
	if c.posted, err = initRing(mem[callHeader+rb:callHeader+2*rb], slots, callEntry); err != nil {
		return nil, err
	}
	c.slotsAt, c.size = callHeader+2*rb, callSlotSize(bytes)
	var e [callEntry]byte
	for i := 0; i < slots; i++ {
		binary.LittleEndian.PutUint32(e[:], uint32(i))
		c.free.enqueue(e[:])
	}
	binary.LittleEndian.PutUint32(mem[8:], uint32(slots))
	binary.LittleEndian.PutUint32(mem[12:], uint32(bytes))
	c.word64(0).Store(callMagic)
	return c, nil
}

// openCallArea attaches to a peer's call area, checking its header against
// the mapping's size.
func openCallArea(mem []byte) (*callArea, error) {
	if len(mem) < callHeader || (*atomic.Uint64)(unsafe.Pointer(&mem[0])).Load() != callMagic {
		return nil, fmt.Errorf("%w: no call area at this address", ErrBadEndpoint)
	}
	slots, bytes := int(binary.LittleEndian.Uint32(mem[8:])), int(binary.LittleEndian.Uint32(mem[12:]))
	if slots < 2 || slots&(slots-1) != 0 || slots > 1<<16 || bytes <= 0 || bytes > maxCallBytes || len(mem) < callAreaBytes(slots, bytes) {
		return nil, fmt.Errorf("%w: corrupt call area (%d slots of %d bytes)", ErrBadEndpoint, slots, bytes)
	}
	c := &callArea{mem: mem, slots: slots, bytes: bytes}
	rb := ringBytes(slots, callEntry)
	var err error
	if c.free, err = openRing(mem[callHeader : callHeader+rb]); err != nil {
		return nil, err
	}
	if c.posted, err = openRing(mem[callHeader+rb : callHeader+2*rb]); err != nil {
		return nil, err
	}
	if c.free.capacity != uint64(slots) || c.posted.capacity != uint64(slots) || c.free.entry != callEntry || c.posted.entry != callEntry {
		return nil, fmt.Errorf("%w: corrupt call area rings", ErrBadEndpoint)
	}
	c.slotsAt, c.size = callHeader+2*rb, callSlotSize(bytes)
	return c, nil
}

func (c *callArea) word64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&c.mem[off]))
}
func (c *callArea) word32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&c.mem[off]))
}
func (c *callArea) operator() *atomic.Uint32 { return c.word32(16) }

// slot returns slot i's header and bytes.
func (c *callArea) slot(i uint32) callSlot {
	at := c.slotsAt + int(i)*c.size
	return callSlot{c.mem[at : at+callSlotHeader : at+callSlotHeader], c.mem[at+callSlotHeader : at+callSlotHeader+c.bytes : at+callSlotHeader+c.bytes]}
}

type callSlot struct{ hdr, data []byte }

const (
	slotFree   = 0
	slotPosted = 1
	slotDone   = 2
)

func (s callSlot) state() *atomic.Uint32  { return (*atomic.Uint32)(unsafe.Pointer(&s.hdr[0])) }
func (s callSlot) waiter() *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&s.hdr[4])) }

// pid is the caller's OS process id: a slot answered for a process that
// no longer exists is nobody's, and the engine takes it back.
func (s callSlot) pid() *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&s.hdr[28])) }

// reclaim returns to the free ring the answered slots whose caller's
// process has exited (it died between posting and collecting the answer),
// so that dead callers cannot use up the queue of incoming calls. The
// engine runs it when idle; it returns how many it took back.
func (c *callArea) reclaim(alive func(pid int) bool) int {
	n := 0
	var e [callEntry]byte
	for i := 0; i < c.slots; i++ {
		s := c.slot(uint32(i))
		pid := s.pid().Load()
		if s.state().Load() != slotDone || pid == 0 || alive(int(pid)) {
			continue
		}
		if s.state().CompareAndSwap(slotDone, slotFree) {
			binary.LittleEndian.PutUint32(e[:], uint32(i))
			c.free.enqueue(e[:])
			n++
		}
	}
	return n
}

// processAlive reports whether pid names a process (signal 0 checks
// without sending; EPERM means it exists under another user).
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

// callEngine serves the calls shm peers queue in the call area, one at a
// time, until the process closes. It polls while calls keep coming and
// sleeps on the posted ring's doorbell otherwise.
func (p *Process) callEngine() {
	defer close(p.callDone)
	op := *p.op.Load()
	c := p.calls
	scratch := make([]byte, c.bytes)
	var e [callEntry]byte
	var b Backoff
	lastReclaim := time.Now()
	for !p.closing.Load() {
		if !c.posted.dequeue(e[:]) {
			if !b.Sleepy() {
				b.Wait()
				continue
			}
			c.posted.sleep(50*time.Millisecond, func() bool { return !c.posted.empty() || p.closing.Load() })
			if time.Since(lastReclaim) >= 50*time.Millisecond {
				c.reclaim(processAlive)
				lastReclaim = time.Now()
			}
			continue
		}
		b.Reset()
		i := binary.LittleEndian.Uint32(e[:])
		if int(i) >= c.slots {
			continue // a peer corrupted the ring; nothing to answer
		}
		s := c.slot(i)
		src := binary.LittleEndian.Uint32(s.hdr[8:])
		reqLen, capLen := int(binary.LittleEndian.Uint32(s.hdr[12:])), int(binary.LittleEndian.Uint32(s.hdr[16:]))
		st, n := StatusSuccess, 0
		if reqLen > c.bytes || capLen > c.bytes {
			st = StatusLength
		} else {
			// The reply overwrites the request in place, so the operator
			// reads a copy.
			req := scratch[:reqLen]
			copy(req, s.data[:reqLen])
			n = clampReply(op(src, req, s.data[:capLen]), capLen)
		}
		binary.LittleEndian.PutUint32(s.hdr[20:], uint32(n))
		s.hdr[24] = byte(st)
		s.state().Store(slotDone)
		if s.waiter().Load() != 0 {
			futexWake(s.state())
		}
	}
}

// stopCallEngine stops the engine before the memory it reads goes away
// (Close, once, with closing set).
func (p *Process) stopCallEngine() {
	if p.callDone == nil {
		return
	}
	p.calls.posted.bell().Add(1)
	futexWake(p.calls.posted.bell())
	<-p.callDone
}

// shmCall queues a call in a peer's call area and waits for the peer's
// engine to answer. It returns StatusConnectionLost, abandoning the slot,
// once gone reports the peer dead.
func shmCall(c *callArea, src uint32, req, reply []byte, gone func() bool) (Status, int) {
	if c == nil || c.operator().Load() == 0 {
		return StatusNoOperator, 0
	}
	if len(req) > c.bytes || len(reply) > c.bytes {
		return StatusLength, 0
	}
	var e [callEntry]byte
	// A slot being returned right now is not a full queue: wait for it
	// (a caller descheduled between claiming the ring cell and filling it
	// made calls fail with StatusBusy while most slots were free).
	if !c.free.dequeueSoon(e[:], claimedCellWait) {
		return StatusBusy, 0
	}
	i := binary.LittleEndian.Uint32(e[:])
	if int(i) >= c.slots {
		return StatusRemoteAccess, 0
	}
	s := c.slot(i)
	binary.LittleEndian.PutUint32(s.hdr[8:], src)
	binary.LittleEndian.PutUint32(s.hdr[12:], uint32(len(req)))
	binary.LittleEndian.PutUint32(s.hdr[16:], uint32(len(reply)))
	s.waiter().Store(0)
	s.pid().Store(uint32(os.Getpid()))
	copy(s.data, req)
	s.state().Store(slotPosted)
	// Cannot fail: the ring holds as many entries as there are slots.
	c.posted.enqueue(e[:])
	w := HotWait{Spin: 5 * time.Microsecond, Yield: hotWait}
	for s.state().Load() != slotDone {
		if gone() {
			return StatusConnectionLost, 0
		}
		if w.Hot() {
			w.Wait()
			continue
		}
		s.waiter().Store(1)
		futexWait(s.state(), slotPosted, 50*time.Millisecond)
	}
	st, n := Status(s.hdr[24]), int(binary.LittleEndian.Uint32(s.hdr[20:]))
	if st >= numStatus {
		st = StatusRemoteAccess
	}
	n = clampReply(n, len(reply))
	copy(reply, s.data[:n])
	s.state().Store(slotFree)
	c.free.enqueue(e[:])
	return st, n
}
