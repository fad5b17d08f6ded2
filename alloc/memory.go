package alloc

import (
	"fmt"
)

// Tracker reports how far the operations posted on one queue pair have
// completed. dtutils.Transmitter implements it with its flush numbers (the
// paper's §4.1): every operation tagged with a sequence number below
// Completed() has completed, so memory it used may be written again.
type Tracker interface {
	Completed() uint64
}

// Memory is a view of registered memory: a region, an offset and a length,
// plus the recycling state of the allocator unit it came from. It is a small
// value; copies refer to the same bytes and the same recycling state.
//
// Memory handed out by Circular or LinearCircular must be tagged (Tag) with
// every operation that reads it, or released with Done when no operation used
// it; its unit is reused only after that and after every tag has completed.
// Tagging and allocation from one allocator belong to one goroutine (the
// paper's per-thread circular allocators), so the state is not synchronised.
type Memory struct {
	region *Region
	off    int
	u      *unit // nil: no recycling state (zone chunks, General, Region.Memory)
	// n is the length; in a unit's handout (u != nil) the bits from
	// slotShift up hold the handout's bit in u.done. Four fields keep
	// Memory in registers: with five, Go copies it through the stack with
	// 16-byte moves that cannot forward from the 8-byte stores before
	// them, which measured 40 ns of stalls per record on the raw
	// benchmark's hot path.
	n uint64
}

// A handout's length stays below 1<<slotShift and its slot below
// 1<<(64-slotShift); CircularConfig.VerifyConfig enforces both.
const (
	slotShift = 40
	lenMask   = 1<<slotShift - 1
	maxSlots  = 1 << (64 - slotShift)
)

func (m Memory) slot() uint32 { return uint32(m.n >> slotShift) }

// Bytes returns the memory's bytes.
func (m Memory) Bytes() []byte {
	if m.region == nil {
		return nil
	}
	n := m.Len()
	return m.region.mem[m.off : m.off+n : m.off+n]
}

// Len returns the length in bytes.
func (m Memory) Len() int {
	if m.u == nil {
		return int(m.n)
	}
	return int(m.n & lenMask)
}

// Offset returns the offset of the memory in its region.
func (m Memory) Offset() int { return m.off }

// Region returns the region holding the memory (nil for the zero Memory).
func (m Memory) Region() *Region { return m.region }

// IsZero reports whether m is the zero Memory.
func (m Memory) IsZero() bool { return m.region == nil }

// Locator returns the locator of the whole memory.
func (m Memory) Locator() Locator {
	return Locator{RegionRef: RegionRef{Process: m.region.reg.process, Region: m.region.id}, Offset: uint64(m.off), Length: uint64(m.Len()), Key: m.region.key}
}

// Slice returns [off, off+n) of m, sharing m's recycling state: tagging the
// slice counts as tagging m.
func (m Memory) Slice(off, n int) (Memory, error) {
	if off < 0 || n < 0 || !checkRange(uint64(off), uint64(n), uint64(m.Len())) {
		return Memory{}, fmt.Errorf("%w: [%d,+%d) of %d bytes", ErrOutOfRange, off, n, m.Len())
	}
	s := m
	s.off += off
	s.n = uint64(n)
	if m.u != nil {
		s.n |= m.n &^ lenMask // the slot
	}
	return s, nil
}

// Tag records that an operation with sequence number seq on the queue pair
// tracked by t reads this memory. Its unit is not reused until t.Completed()
// exceeds seq. Memory without recycling state ignores tags.
func (m Memory) Tag(t Tracker, seq uint64) {
	if m.u == nil {
		return
	}
	m.u.tag(t, seq)
	m.u.settle(m.slot())
}

// Done releases memory that no operation used, so that its unit can be
// reused. Calling it after Tag is harmless.
func (m Memory) Done() {
	if m.u != nil {
		m.u.settle(m.slot())
	}
}

// Reusable reports whether the unit holding m could be reused now.
func (m Memory) Reusable() bool { return m.u == nil || m.u.reusable() }

// unit is the recycling state shared by everything handed out from one
// circular-allocator unit.
type unit struct {
	mem         Memory // the whole unit, without recycling state
	tags        []tagEntry
	outstanding int      // handouts neither tagged nor Done
	handouts    uint32   // handouts since the last reuse
	done        []uint64 // bit i: handout i was tagged or Done
}

type tagEntry struct {
	t   Tracker
	seq uint64
}

func newUnit(mem Memory, maxHandouts int) *unit {
	return &unit{mem: mem, tags: make([]tagEntry, 0, 1), done: make([]uint64, (maxHandouts+63)/64)}
}

// handout returns the next piece [off, off+n) of the unit with its slot.
func (u *unit) handout(off, n int) Memory {
	slot := u.handouts
	u.handouts++
	u.outstanding++
	return Memory{region: u.mem.region, off: u.mem.off + off, n: uint64(n) | uint64(slot)<<slotShift, u: u}
}

// tag keeps the highest sequence number per tracker: completions on one
// queue pair are in order, so the highest one implies the others.
func (u *unit) tag(t Tracker, seq uint64) {
	for i := range u.tags {
		if u.tags[i].t == t {
			if seq > u.tags[i].seq {
				u.tags[i].seq = seq
			}
			return
		}
	}
	u.tags = append(u.tags, tagEntry{t, seq})
}

func (u *unit) settle(slot uint32) {
	w, b := slot/64, uint64(1)<<(slot%64)
	if int(w) < len(u.done) && u.done[w]&b == 0 {
		u.done[w] |= b
		u.outstanding--
	}
}

func (u *unit) reusable() bool {
	if u.outstanding > 0 {
		return false
	}
	for _, e := range u.tags {
		if e.t.Completed() <= e.seq {
			return false
		}
	}
	return true
}

// reset prepares a reusable unit for new handouts.
func (u *unit) reset() {
	clear(u.tags)
	u.tags = u.tags[:0]
	clear(u.done[:(u.handouts+63)/64])
	u.handouts = 0
}
