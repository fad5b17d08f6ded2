package alloc

import (
	"encoding/binary"
	"fmt"
)

// Locator names a byte range of a registered region anywhere in the job: the
// paper's RemoteMemoryLocator. It is what peers exchange to reach each other's
// memory; every remote access is checked against Key and the region's bounds.
//
// Wire format (LocatorSize bytes, little-endian, see docs/wire.md):
//
//	offset  size  field
//	0       4     Process  (uint32, the owner's process rank)
//	4       4     Region   (uint32, region ID within that process; 0 is never used)
//	8       8     Offset   (uint64, byte offset in the region)
//	16      8     Length   (uint64, bytes)
//	24      8     Key      (uint64, the region's random access key)
type Locator struct {
	RegionRef // Process and Region
	Offset    uint64
	Length    uint64
	Key       uint64
}

// RegionRef names a registered region anywhere in the job: its owner's
// process rank and its ID there. It is embedded in Locator rather than
// spelled out so that Locator has four fields: Go keeps such structs in
// registers, while a five-field one is copied through the stack with
// 16-byte loads that stall on the smaller stores just made (measured: a
// third of a one-sided shm write's cost).
type RegionRef struct {
	Process uint32 // the owner's process rank
	Region  uint32 // region ID within that process; 0 is never used
}

// LocatorSize is the encoded size of a Locator.
const LocatorSize = 32

// AppendBinary appends the wire encoding of l to b (encoding.BinaryAppender).
func (l Locator) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, l.Process)
	b = binary.LittleEndian.AppendUint32(b, l.Region)
	b = binary.LittleEndian.AppendUint64(b, l.Offset)
	b = binary.LittleEndian.AppendUint64(b, l.Length)
	b = binary.LittleEndian.AppendUint64(b, l.Key)
	return b, nil
}

// MarshalBinary returns the wire encoding of l.
func (l Locator) MarshalBinary() ([]byte, error) {
	return l.AppendBinary(make([]byte, 0, LocatorSize))
}

// UnmarshalBinary decodes exactly LocatorSize bytes. Region 0, and ranges
// whose end overflows 64 bits, are rejected: no real region produces them.
func (l *Locator) UnmarshalBinary(b []byte) error {
	if len(b) != LocatorSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadLocator, len(b), LocatorSize)
	}
	v := Locator{
		RegionRef: RegionRef{Process: binary.LittleEndian.Uint32(b[0:]), Region: binary.LittleEndian.Uint32(b[4:])},
		Offset:    binary.LittleEndian.Uint64(b[8:]),
		Length:    binary.LittleEndian.Uint64(b[16:]),
		Key:       binary.LittleEndian.Uint64(b[24:]),
	}
	if v.Region == 0 {
		return fmt.Errorf("%w: region ID 0", ErrBadLocator)
	}
	if v.Offset+v.Length < v.Offset {
		return fmt.Errorf("%w: offset %d + length %d overflows", ErrBadLocator, v.Offset, v.Length)
	}
	*l = v
	return nil
}

// Sub returns the locator of [off, off+n) inside l.
func (l Locator) Sub(off, n uint64) (Locator, error) {
	if off > l.Length || n > l.Length-off {
		return Locator{}, &subRangeError{off, n, l.Length}
	}
	// Field by field: copying the modified l whole (a five-field struct
	// lives on the stack) reads it back with 16-byte loads that cannot
	// forward from the 8-byte stores just made, a stall on every call.
	return Locator{RegionRef: RegionRef{Process: l.Process, Region: l.Region}, Offset: l.Offset + off, Length: n, Key: l.Key}, nil
}

// subRangeError is Sub's error: a value rather than a call, so that Sub
// stays within the inliner's budget (a call alone costs most of it).
type subRangeError struct{ off, n, length uint64 }

func (e *subRangeError) Error() string {
	return fmt.Sprintf("%v: [%d,+%d) of a %d-byte locator", ErrOutOfRange, e.off, e.n, e.length)
}

func (e *subRangeError) Unwrap() error { return ErrOutOfRange }

// String prints the locator without its key, so logs never leak keys.
func (l Locator) String() string {
	return fmt.Sprintf("p%d/r%d[%d,+%d)", l.Process, l.Region, l.Offset, l.Length)
}

// checkRange reports whether [off, off+n) fits in size bytes without overflow.
func checkRange(off, n, size uint64) bool {
	return off <= size && n <= size-off
}
