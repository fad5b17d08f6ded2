package dtutils

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/internal/prefetch"
)

// ring is a bounded multi-producer multi-consumer queue of fixed-size entries
// (D. Vyukov's algorithm: positions claimed by compare-and-swap, cells
// handed over by release stores of their sequence numbers) laid out in a
// byte slice, so that it works the same in one process and between
// processes sharing a memfd. Its layout is part of the shm wire format
// (docs/wire.md):
//
//	offset 0    uint64 magic
//	offset 8    uint64 capacity (power of two)
//	offset 16   uint64 entry size (bytes of data per cell)
//	offset 64   uint64 enqueue position      (own cache line)
//	offset 128  uint64 dequeue position      (own cache line)
//	offset 192  uint32 sleepers              (consumers blocked on the doorbell)
//	offset 196  uint32 doorbell              (futex word)
//	offset 256  cells: capacity × (8-byte sequence + entry bytes, rounded to 8)
type ring struct {
	mem      []byte
	capacity uint64
	mask     uint64
	entry    int
	cell     int
}

const (
	ringMagic  = 0x5345524952494e47 // "SERIRING"
	ringHeader = 256
)

func ringBytes(capacity, entry int) int {
	return ringHeader + capacity*cellSize(entry)
}

func cellSize(entry int) int { return 8 + (entry+7)&^7 }

// initRing formats mem as an empty ring. capacity must be a power of two.
func initRing(mem []byte, capacity, entry int) (*ring, error) {
	// At least 2: with one cell, an entry's "full" sequence number equals
	// the next position's "free" one, and a full ring would take another.
	if capacity < 2 || capacity&(capacity-1) != 0 {
		return nil, fmt.Errorf("%w: ring capacity %d is not a power of two of at least 2", ErrBadConfig, capacity)
	}
	if len(mem) < ringBytes(capacity, entry) {
		return nil, fmt.Errorf("%w: %d bytes for a ring needing %d", ErrBadConfig, len(mem), ringBytes(capacity, entry))
	}
	r := &ring{mem: mem, capacity: uint64(capacity), mask: uint64(capacity - 1), entry: entry, cell: cellSize(entry)}
	for i := 0; i < capacity; i++ {
		r.seq(uint64(i)).Store(uint64(i))
	}
	r.word(8).Store(uint64(capacity))
	r.word(16).Store(uint64(entry))
	r.word(0).Store(ringMagic)
	return r, nil
}

// openRing attaches to a ring formatted by initRing (in another process).
func openRing(mem []byte) (*ring, error) {
	if len(mem) < ringHeader {
		return nil, fmt.Errorf("%w: %d bytes cannot hold a ring", ErrBadEndpoint, len(mem))
	}
	r := &ring{mem: mem}
	if r.word(0).Load() != ringMagic {
		return nil, fmt.Errorf("%w: no ring at this address", ErrBadEndpoint)
	}
	c, e := r.word(8).Load(), r.word(16).Load()
	if c == 0 || c&(c-1) != 0 || c > 1<<24 || e == 0 || e > 1<<12 || uint64(len(mem)) < uint64(ringBytes(int(c), int(e))) {
		return nil, fmt.Errorf("%w: corrupt ring header (capacity %d, entry %d)", ErrBadEndpoint, c, e)
	}
	r.capacity, r.mask, r.entry, r.cell = c, c-1, int(e), cellSize(int(e))
	return r, nil
}

func (r *ring) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off]))
}

func (r *ring) enqPos() *atomic.Uint64   { return r.word(64) }
func (r *ring) deqPos() *atomic.Uint64   { return r.word(128) }
func (r *ring) sleepers() *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[192])) }
func (r *ring) bell() *atomic.Uint32     { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[196])) }

func (r *ring) cellAt(pos uint64) int { return ringHeader + int(pos&r.mask)*r.cell }
func (r *ring) seq(pos uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[r.cellAt(pos)]))
}

// enqueue copies e (len ≤ entry) into the ring; false when full. A cell
// that a dequeue one lap behind has claimed and not yet released (its
// consumer descheduled in between) is not a full ring: enqueue waits up to
// claimedCellWait for it. Reporting full there lost entries: the call
// slots' free ring dropped returned slots until callers got StatusBusy
// with nearly all slots idle (TestCallConcurrent/shm under -race).
func (r *ring) enqueue(e []byte) bool { return r.enqueue2(e, nil) }

// enqueue2 is enqueue of the entry e followed by tail (len(e)+len(tail) ≤
// entry), copied into the cell without being joined first.
func (r *ring) enqueue2(e, tail []byte) bool {
	var b Backoff
	var end time.Time
	for {
		pos := r.enqPos().Load()
		s := r.seq(pos).Load()
		switch d := int64(s - pos); {
		case d == 0:
			if r.enqPos().CompareAndSwap(pos, pos+1) {
				off := r.cellAt(pos) + 8
				cell := r.mem[off : off+r.entry]
				copy(cell[copy(cell, e):], tail)
				// A release store, not sync/atomic's XCHG: that one waits
				// for the cell's lines, which the consumer last held, and
				// the wait showed as the sender's hottest line.
				storeRelease(unsafe.Pointer(r.seq(pos)), pos+1)
				// Ask now for the lines the next entry of this size will
				// take: the consumer freed that cell a lap ago (it wrote
				// the sequence and read the rest), and the next enqueue's
				// stores, then the caller's next locked instruction, would
				// wait for them (the sender's hottest line at 64-byte sends;
				// docs/benchmarks.md, "The next cell asked for ahead").
				next, n := r.cellAt(pos+1), 8+len(e)+len(tail)
				// From the start of the line the cell begins in: a cell
				// need not start a line (the header keeps next > 64).
				for l := next - int(uintptr(unsafe.Pointer(&r.mem[next]))&63); l < next+n; l += 64 {
					prefetch.Write(unsafe.Pointer(&r.mem[l]))
				}
				r.wake()
				return true
			}
		case d < 0:
			if int64(pos-r.deqPos().Load()) >= int64(r.capacity) {
				return false // every cell holds an entry
			}
			if end.IsZero() {
				end = time.Now().Add(claimedCellWait)
			} else if time.Now().After(end) {
				return false // its consumer died holding it
			}
			b.Wait()
		default:
			if r.enqPos().Load() == pos {
				// A cell a lap ahead with the position unmoved: no
				// producer filled it (see claimSome). Full, not a spin.
				return false
			}
		}
	}
}

// dequeue copies the oldest entry into e (len ≥ entry); false when empty.
func (r *ring) dequeue(e []byte) bool {
	pos, k := r.claimSome(1)
	if k == 0 {
		return false
	}
	copy(e, r.cellData(pos))
	r.releaseCell(pos)
	return true
}

// claimSome claims up to max of the oldest entries with one
// compare-and-swap of the dequeue position, and returns the first position
// and how many (0 when the ring is empty). The caller reads each claimed
// cell (cellData) and hands it back (releaseCell) in order. A cell holds
// its lap's entry when its sequence is its position + 1; claiming a run of
// such cells at once is Vyukov's single-cell claim made for
// several (positions only grow, so the compare-and-swap cannot be fooled),
// and saves a locked instruction per entry for a consumer that drains.
func (r *ring) claimSome(max int) (uint64, int) {
	for {
		pos := r.deqPos().Load()
		k := 0
		for k < max && r.seq(pos+uint64(k)).Load() == pos+uint64(k)+1 {
			k++
		}
		if k == 0 {
			if int64(r.seq(pos).Load()-(pos+1)) < 0 {
				return pos, 0
			}
			// A cell a lap ahead: another consumer took it and moved the
			// position on. If the position has not moved, no consumer
			// did: the cell was written by someone else (a peer sharing
			// the ring), and looking again would spin for ever.
			if r.deqPos().Load() == pos {
				return pos, 0
			}
			continue
		}
		if r.deqPos().CompareAndSwap(pos, pos+uint64(k)) {
			return pos, k
		}
	}
}

// cellData is the entry of a cell claimed by claimSome.
func (r *ring) cellData(pos uint64) []byte {
	off := r.cellAt(pos) + 8
	return r.mem[off : off+r.entry : off+r.entry]
}

// releaseCell hands a claimed cell back to the producers, for the next lap.
func (r *ring) releaseCell(pos uint64) {
	storeRelease(unsafe.Pointer(r.seq(pos)), pos+r.capacity)
}

// claimedCellWait bounds how long enqueue and dequeueSoon wait for a cell
// that another side has claimed and not yet filled or released (its
// thread descheduled in between, the algorithm's one blocking window).
// They wait only then, never on a truly full or empty ring, so the bound
// costs nothing in the normal case; only a process that died inside that
// window makes them wait it out. 10 ms was too short under -race on 2
// cores.
const claimedCellWait = 250 * time.Millisecond

// dequeueSoon is dequeue that, when the ring is empty only because an
// enqueue has claimed the next cell and not yet filled it (its producer
// was descheduled in between: the algorithm's one blocking window), waits
// up to d for it instead of reporting the ring empty.
func (r *ring) dequeueSoon(e []byte, d time.Duration) bool {
	if r.dequeue(e) {
		return true
	}
	var b Backoff
	for end := time.Now().Add(d); int64(r.enqPos().Load()-r.deqPos().Load()) > 0; {
		if r.dequeue(e) {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		b.Wait()
	}
	return r.dequeue(e)
}

// sleep blocks until an enqueue rings the doorbell, or d passes. The caller
// re-polls afterwards; announcing before re-checking avoids a lost wake-up.
func (r *ring) sleep(d time.Duration, ready func() bool) {
	r.sleepers().Add(1)
	v := r.bell().Load()
	if !ready() {
		futexWait(r.bell(), v, d)
	}
	r.sleepers().Add(^uint32(0))
}

// wake rings the doorbell if anyone announced a sleep.
//
// The fence first. A sleeper announces itself (sleepers, a locked add, a
// full barrier) and then looks at the ring; a producer stores its entry
// (enqueue2's sequence word: a plain store on amd64, storeRelease) and then
// looks at sleepers. That is Dekker's pattern, and it needs a store-load
// barrier on both sides: without one here, x86 lets the load of sleepers
// pass the entry's store still in the store buffer, each side misses the
// other, and the sleeper sleeps out its timeout (50 ms for a worker) with
// the entry waiting. TestDoorbellNoLostWakeup saw a few in every 300 000
// hand-offs before the fence. The fence waits for the entry's store, whose
// line the previous enqueue prefetched for writing: BenchmarkRingStream and
// BenchmarkSendRecv moved within noise, micro's send at most a few per cent
// (64 B, interleaved rounds).
func (r *ring) wake() {
	storeLoadFence()
	if r.sleepers().Load() > 0 {
		r.bell().Add(1)
		futexWake(r.bell())
	}
}

// empty reports whether a dequeue would find nothing (a hint).
func (r *ring) empty() bool {
	pos := r.deqPos().Load()
	return r.seq(pos).Load() != pos+1
}

// storeLoadFence orders the stores before it before the loads after it (a
// locked add to a word of the caller's stack: a full barrier on amd64, and
// sync/atomic's read-modify-writes are sequentially consistent everywhere).
// Go has no plain fence; this is the cheapest portable one.
func storeLoadFence() {
	var w uint32
	atomic.AddUint32(&w, 0)
}
