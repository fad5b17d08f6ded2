package rdmo

import (
	"encoding/binary"
	"fmt"
)

// The five RDMOs of the paper (seed 001, §3.3, Table 2) as built-in types.
// Their memory layouts are little-endian words, 8-aligned, defined here and
// in docs/wire.md; the one-sided (RDMA) equivalents in rdma.go use the same
// layouts, so both may work on one instance at once.

// Type names.
const (
	SlottedPageType   = "SlottedPage"   // SlottedAppend
	VersionChainsType = "VersionChains" // ConditionalGather
	LockedRecordType  = "LockedRecord"  // SignaledRead
	SealedBufferType  = "SealedBuffer"  // WriteAndSeal
	AccumulatorType   = "Accumulator"   // ScatterAndAccumulate
)

// Method numbers.
const (
	MethodAppend       uint16 = 0 // SlottedPage
	MethodGather       uint16 = 0 // VersionChains
	MethodInsert       uint16 = 1 // VersionChains
	MethodSignaledRead uint16 = 0 // LockedRecord
	MethodLockedWrite  uint16 = 1 // LockedRecord
	MethodWriteAndSeal uint16 = 0 // SealedBuffer
	MethodAccumulate   uint16 = 0 // Accumulator
)

// The built-in methods' own codes.
const (
	// CodePageFull: no slot or no data room left in the page.
	CodePageFull Code = CodeUser + iota
	// CodeContended: a compare-and-swap kept failing within the method's
	// bounded tries; retry.
	CodeContended
	// CodeTruncated: the chain was longer than MaxHops or the matches more
	// than MaxGather; the output holds what was found.
	CodeTruncated
	// CodeFull: no free node left.
	CodeFull
	// CodeLocked: the record's lock stayed held through every try.
	CodeLocked
	// CodeBadIndex: a lookup entry named no accumulator; the pairs before
	// it were applied.
	CodeBadIndex
)

// Bounds of the built-in methods.
const (
	MaxTuple       = 1024 // SlottedAppend's largest tuple
	MaxGather      = 30   // ConditionalGather's most matches per reply
	MaxHops        = 64   // ConditionalGather's longest walk
	MaxRecord      = 2048 // LockedRecord's and SealedBuffer's largest data
	MaxAccumulate  = 30   // ScatterAndAccumulate's most pairs per RDMO
	casTries       = 8    // compare-and-swap tries before CodeContended
	maxLockTries   = 16
	defaultTries   = 4
	versionBytes   = 16 // a gathered version: u64 begin timestamp, u64 value
	keyDeltaBytes  = 16
	nodeBytes      = 32
	chainsHeader   = 64
	accumHeader    = 64
	slottedHeader  = 32
	recordHeader   = 16
	sealHeader     = 8
	slotValidBit   = 1 << 63
	slotOffsetBits = 31
)

// Registrar takes types: an Engine, or a Client that runs Direct methods
// itself (direct mode).
type Registrar interface{ Register(Type) error }

// RegisterBuiltins registers the five types with r. All their methods but
// LockedRecord's (which take a lock) are Direct.
func RegisterBuiltins(r Registrar) error {
	for _, t := range []Type{slottedPage(), versionChains(), lockedRecord(), sealedBuffer(), accumulator()} {
		if err := r.Register(t); err != nil {
			return err
		}
	}
	return nil
}

func le(b []byte) uint64       { return binary.LittleEndian.Uint64(b) }
func putLE(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }
func appendLE(b []byte, v ...uint64) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// SlottedPage layout:
//
//	0  u64 reservation: slots used << 32 | data bytes used
//	8  u64 slot capacity N   16 u64 data capacity D   24 reserved
//	32 N slot entries, u64: valid bit 63 | data offset << 32 | length (0: not yet valid)
//	32+8N data (D bytes)
//
// SlottedAppend reserves a slot and the tuple's bytes with one
// compare-and-swap of the reservation word, writes the tuple, then marks
// the slot valid.

// InitSlottedPage lays out an empty page of n slots in mem and returns the
// data capacity.
func InitSlottedPage(mem []byte, n int) (int, error) {
	d := len(mem) - slottedHeader - 8*n
	if n < 1 || d < 0 || d >= 1<<slotOffsetBits {
		return 0, fmt.Errorf("%w: %d bytes cannot hold a page of %d slots", ErrBadConfig, len(mem), n)
	}
	clear(mem[:slottedHeader+8*n])
	putLE(mem[8:], uint64(n))
	putLE(mem[16:], uint64(d))
	return d, nil
}

// SlottedTuples returns the valid tuples of a page, by slot (nil for a slot
// reserved and not yet valid). The owner reads its own memory with it.
func SlottedTuples(mem []byte) [][]byte {
	h := le(mem)
	n := le(mem[8:])
	used := min(h>>32, n)
	base := slottedHeader + 8*int(n)
	out := make([][]byte, used)
	for i := range out {
		e := le(mem[slottedHeader+8*i:])
		if e&slotValidBit == 0 {
			continue
		}
		off, l := int(e>>32&(1<<slotOffsetBits-1)), int(uint32(e))
		out[i] = mem[base+off : base+off+l]
	}
	return out
}

func slotEntry(off, n uint64) uint64 { return slotValidBit | off<<32 | n }

func slottedPage() Type {
	return Type{Name: SlottedPageType, MinSize: slottedHeader + 8, Methods: []Method{{
		Name: "SlottedAppend", MaxInput: MaxTuple, MaxOutput: 8, MaxCost: 64, Direct: true,
		Body: func(x *Ctx, in, out []byte) (Code, int) {
			n, d := x.Load(8), x.Load(16)
			l := uint64(len(in))
			for try := 0; try < casTries; try++ {
				h := x.Load(0)
				cnt, used := h>>32, h&(1<<32-1)
				if cnt >= n || used+l > d {
					return CodePageFull, 0
				}
				if x.CompareAndSwap(0, h, (cnt+1)<<32|(used+l)) {
					x.Write(slottedHeader+8*int(n)+int(used), in)
					x.Store(slottedHeader+8*int(cnt), slotEntry(used, l))
					putLE(out, cnt)
					return OK, 8
				}
			}
			return CodeContended, 0
		},
	}}}
}

// VersionChains layout:
//
//	0  u64 buckets B   8 u64 node capacity N   16 u64 nodes taken   24..64 reserved
//	64 B bucket heads, u64: node index + 1 (0: empty)
//	64+8B N nodes of 32 bytes: u64 next (index + 1), u64 key, u64 begin timestamp, u64 value
//
// Insert pushes a version at its bucket's head; ConditionalGather walks a
// bucket and returns the versions of a key visible at a timestamp
// (begin ≤ ts), newest first.

// InitVersionChains lays out b empty buckets and as many nodes as fit.
func InitVersionChains(mem []byte, b int) (int, error) {
	n := (len(mem) - chainsHeader - 8*b) / nodeBytes
	if b < 1 || n < 1 {
		return 0, fmt.Errorf("%w: %d bytes cannot hold %d buckets and a node", ErrBadConfig, len(mem), b)
	}
	clear(mem[:chainsHeader+8*b])
	putLE(mem[0:], uint64(b))
	putLE(mem[8:], uint64(n))
	return n, nil
}

// Version is one gathered version.
type Version struct{ Begin, Value uint64 }

func versionChains() Type {
	return Type{Name: VersionChainsType, MinSize: chainsHeader + 8 + nodeBytes, Methods: []Method{{
		Name: "ConditionalGather", MaxInput: 24, MaxOutput: MaxGather * versionBytes, MaxCost: 4*MaxHops + 16, Direct: true,
		Body: func(x *Ctx, in, out []byte) (Code, int) {
			if len(in) != 24 {
				return CodeFault, 0
			}
			b := x.Load(0)
			bucket, key, ts := le(in)%b, le(in[8:]), le(in[16:])
			nodes := chainsHeader + 8*int(b)
			next, k := x.Load(chainsHeader+8*int(bucket)), 0
			for hops := 0; next != 0; hops++ {
				if hops == MaxHops {
					return CodeTruncated, k
				}
				at := nodes + nodeBytes*int(next-1)
				if x.Load(at+8) == key {
					if begin := x.Load(at + 16); begin <= ts {
						if k+versionBytes > len(out) {
							return CodeTruncated, k
						}
						putLE(out[k:], begin)
						putLE(out[k+8:], x.Load(at+24))
						k += versionBytes
					}
				}
				next = x.Load(at)
			}
			return OK, k
		},
	}, {
		Name: "Insert", MaxInput: 32, MaxOutput: 8, MaxCost: 8 + 2*casTries, Direct: true,
		Body: func(x *Ctx, in, out []byte) (Code, int) {
			if len(in) != 32 {
				return CodeFault, 0
			}
			b, n := x.Load(0), x.Load(8)
			i := x.Add(16, 1) - 1
			if i >= n {
				return CodeFull, 0
			}
			at := chainsHeader + 8*int(b) + nodeBytes*int(i)
			x.Store(at+8, le(in[8:]))
			x.Store(at+16, le(in[16:]))
			x.Store(at+24, le(in[24:]))
			head := chainsHeader + 8*int(le(in)%b)
			for try := 0; try < casTries; try++ {
				h := x.Load(head)
				x.Store(at, h)
				if x.CompareAndSwap(head, h, i+1) {
					putLE(out, i)
					return OK, 8
				}
			}
			return CodeContended, 0 // the node stays unlinked: lost space, not a torn chain
		},
	}}}
}

// LockedRecord layout:
//
//	0 u64 lock (0 free, 1 held)   8 u64 version (writes so far)   16 data (D bytes, D ≤ MaxRecord)
//
// SignaledRead takes the lock with a few compare-and-swaps, copies the
// data, and frees the lock; LockedWrite replaces the data under the lock.

// InitLockedRecord lays out a free record over mem.
func InitLockedRecord(mem []byte) error {
	if d := len(mem) - recordHeader; d < 8 || d > MaxRecord || d%8 != 0 {
		return fmt.Errorf("%w: a record's data is 8..%d bytes, a multiple of 8 (got %d)", ErrBadConfig, MaxRecord, d)
	}
	clear(mem[:recordHeader])
	return nil
}

func lockTries(in []byte) int {
	if len(in) >= 4 {
		if t := int(binary.LittleEndian.Uint32(in)); t >= 1 && t <= maxLockTries {
			return t
		}
	}
	return defaultTries
}

func lockedRecord() Type {
	return Type{Name: LockedRecordType, MinSize: recordHeader + 8, Methods: []Method{{
		Name: "SignaledRead", MaxInput: 4, MaxOutput: MaxRecord, MaxCost: maxLockTries + 40,
		Body: func(x *Ctx, in, out []byte) (Code, int) {
			d := x.Len() - recordHeader
			if d > len(out) {
				return CodeFault, 0
			}
			for t := lockTries(in); t > 0; t-- {
				if x.CompareAndSwap(0, 0, 1) {
					x.Read(recordHeader, out[:d])
					x.Store(0, 0)
					return OK, d
				}
			}
			return CodeLocked, 0
		},
	}, {
		Name: "LockedWrite", MaxInput: MaxRecord, MaxOutput: 0, MaxCost: maxLockTries + 40,
		Body: func(x *Ctx, in, out []byte) (Code, int) {
			if len(in) != x.Len()-recordHeader {
				return CodeFault, 0
			}
			for t := defaultTries; t > 0; t-- {
				if x.CompareAndSwap(0, 0, 1) {
					x.Write(recordHeader, in)
					x.Add(8, 1)
					x.Store(0, 0)
					return OK, 0
				}
			}
			return CodeLocked, 0
		},
	}}}
}

// SealedBuffer layout:
//
//	0 u64 seal (0: never written)   8 data
//
// WriteAndSeal writes the data, then the seal: whoever sees the seal
// (an acquire load) sees the data.

func sealedBuffer() Type {
	return Type{Name: SealedBufferType, MinSize: sealHeader, Methods: []Method{{
		Name: "WriteAndSeal", MaxInput: 8 + MaxRecord, MaxOutput: 0, MaxCost: 40, Direct: true,
		Body: func(x *Ctx, in, out []byte) (Code, int) {
			if len(in) < 8 || len(in)-8 > x.Len()-sealHeader {
				return CodeFault, 0
			}
			x.Write(sealHeader, in[8:])
			x.Store(0, le(in))
			return OK, 0
		},
	}}}
}

// Accumulator layout:
//
//	0 u64 lookup entries L   8 u64 accumulators A   16..64 reserved
//	64 L lookup entries, u64: an accumulator's index
//	64+8L A accumulators, u64
//
// ScatterAndAccumulate adds each pair's delta to the accumulator that the
// lookup entry of its key (modulo L) names.

// InitAccumulator lays out the lookup table (copied from lookup) and
// accumulators zeroed; mem must hold them.
func InitAccumulator(mem []byte, lookup []uint64, accumulators int) error {
	if len(lookup) < 1 || accumulators < 1 || len(mem) < accumHeader+8*(len(lookup)+accumulators) {
		return fmt.Errorf("%w: %d bytes cannot hold %d lookup entries and %d accumulators", ErrBadConfig, len(mem), len(lookup), accumulators)
	}
	clear(mem[:accumHeader+8*(len(lookup)+accumulators)])
	putLE(mem[0:], uint64(len(lookup)))
	putLE(mem[8:], uint64(accumulators))
	for i, v := range lookup {
		putLE(mem[accumHeader+8*i:], v)
	}
	return nil
}

// Accumulators returns a copy of the accumulators' values.
func Accumulators(mem []byte) []uint64 {
	l, a := int(le(mem)), int(le(mem[8:]))
	out := make([]uint64, a)
	for i := range out {
		out[i] = le(mem[accumHeader+8*(l+i):])
	}
	return out
}

// KeyDelta is one pair of ScatterAndAccumulate.
type KeyDelta struct{ Key, Delta uint64 }

func accumulator() Type {
	return Type{Name: AccumulatorType, MinSize: accumHeader + 16, Methods: []Method{{
		Name: "ScatterAndAccumulate", MaxInput: MaxAccumulate * keyDeltaBytes, MaxOutput: 8, MaxCost: 2 + 2*MaxAccumulate, Direct: true,
		Body: func(x *Ctx, in, out []byte) (Code, int) {
			if len(in)%keyDeltaBytes != 0 {
				return CodeFault, 0
			}
			l, a := x.Load(0), x.Load(8)
			applied := uint64(0)
			for p := 0; p < len(in); p += keyDeltaBytes {
				idx := x.Load(accumHeader + 8*int(le(in[p:])%l))
				if idx >= a {
					putLE(out, applied)
					return CodeBadIndex, 8
				}
				x.Add(accumHeader+8*int(l+idx), le(in[p+8:]))
				applied++
			}
			putLE(out, applied)
			return OK, 8
		},
	}}}
}
