package rdmo

import (
	"sync/atomic"
	"unsafe"
)

// Ctx is a method's view of its instance: every access goes through it, is
// checked against the instance's memory and charged against the method's
// declared MaxCost. A method that leaves its instance or its budget is
// stopped at that access with CodeFault or CodeOverBudget, so the engine's
// service time stays bounded by what the method declared. Costs: one unit
// per word access (Load, Store, CompareAndSwap, Add), one unit per started
// 64 bytes copied (Read, Write), one unit per Step (a method's own loops
// that touch no memory call it, so they are bounded too).
type Ctx struct {
	mem  []byte
	left int
}

// stop carries a code out of a method that broke its bounds.
type stop struct{ code Code }

func (x *Ctx) charge(n int) {
	x.left -= n
	if x.left < 0 {
		panic(stop{CodeOverBudget})
	}
}

// Len returns the instance's size in bytes.
func (x *Ctx) Len() int { return len(x.mem) }

// Step charges one unit of the budget.
func (x *Ctx) Step() { x.charge(1) }

// Left returns the budget left.
func (x *Ctx) Left() int { return x.left }

func (x *Ctx) word(off int) *atomic.Uint64 {
	x.charge(1)
	if off < 0 || off > len(x.mem)-8 || uintptr(unsafe.Pointer(&x.mem[off]))%8 != 0 {
		panic(stop{CodeFault})
	}
	return (*atomic.Uint64)(unsafe.Pointer(&x.mem[off]))
}

// Load atomically reads the 8-byte word at off (8-aligned).
func (x *Ctx) Load(off int) uint64 { return x.word(off).Load() }

// Store atomically writes the word at off, with release semantics: what the
// method wrote before is visible to whoever sees it.
func (x *Ctx) Store(off int, v uint64) { x.word(off).Store(v) }

// CompareAndSwap stores new at off if it holds old.
func (x *Ctx) CompareAndSwap(off int, old, new uint64) bool {
	return x.word(off).CompareAndSwap(old, new)
}

// Add atomically adds d to the word at off and returns the new value.
func (x *Ctx) Add(off int, d uint64) uint64 { return x.word(off).Add(d) }

func (x *Ctx) bytes(off, n int) []byte {
	x.charge(1 + (n+63)/64)
	if off < 0 || n < 0 || off > len(x.mem)-n {
		panic(stop{CodeFault})
	}
	return x.mem[off : off+n]
}

// Read copies the instance's bytes [off, off+len(dst)) into dst. It is not
// atomic: methods guard it with their own protocol (a lock, a seal).
func (x *Ctx) Read(off int, dst []byte) { copy(dst, x.bytes(off, len(dst))) }

// Write copies src into the instance at off (not atomic; publish it with a
// later Store).
func (x *Ctx) Write(off int, src []byte) { copy(x.bytes(off, len(src)), src) }
