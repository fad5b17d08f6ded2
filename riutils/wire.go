package riutils

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// Every byte format of package riutils that crosses a process boundary is
// defined in this file, little-endian; docs/wire.md describes them.

// Chunk layout (in the receiver's memory):
//
//	0    u32 sender thread
//	4    u32 magic ("RICH")
//	8    alloc.Locator (32 bytes): the sender's feedback word
//	64   u64 producer word (written only by the sender): final record
//	     offset (bits 0–47), rotate (bit 61), grow (bit 62), shutdown (bit 63)
//	128  u64 consumer word (written only by the receiver): offset consumed
//	192  records, each 8-byte aligned, up to the chunk's end
const (
	chunkMagic    = 0x48434952 // "RICH"
	offFeedback   = 8
	offProducer   = 64
	offConsumer   = 128
	recordsStart  = 192
	prodRotate    = 1 << 61
	prodGrow      = 1 << 62
	prodShutdown  = 1 << 63
	prodOffsetMax = 1<<48 - 1
)

// The sender's feedback word (written only by the receiver):
//
//	bits 0–61  chunks the receiver has finished
//	bit 62     the receiver asks the sender to shut the messenger down
//	bit 63     the receiver acknowledges a shutdown
const (
	fbCount   = 1<<62 - 1
	fbRequest = 1 << 62
	fbAck     = 1 << 63
)

// Record layout:
//
//	0   u32 payload bytes (arguments + buffer)
//	4   u32 handler ID
//	8   u32 source thread
//	12  u32 argument bytes (the rest of the payload is the buffer)
//	16  payload, zero-padded to a multiple of 8
//	end u64 seal = sealOf(first header word, second header word); never 0
//
// The seal is the last word, which the transport stores last: a receiver that
// sees the right seal sees the whole record.
const (
	recordHeader = 16
	recordSeal   = 8
)

// recordSize is the bytes a record with n payload bytes takes.
func recordSize(n int) int { return recordHeader + (n+7)&^7 + recordSeal }

// sealOf mixes two words so that every input bit affects every output bit
// (splitmix64's finalizer): records or replies that differ in any bit of
// their header never share a seal, except by a 2^-63 chance. Never 0.
func sealOf(h0, h1 uint64) uint64 {
	x := h0 ^ bits.RotateLeft64(h1*0x9e3779b97f4a7c15, 29)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x | 1
}

// putRecord writes a record into b (len(b) == recordSize(len(args)+len(buf))).
// Hot paths write sealRecord(b, h, src, len(args), copyBody(b, args, buf))
// instead: a call with putRecord's eleven argument words passes two on the
// stack, and loading them back stalled (measured: half of an ovfl sender's
// time), while copyBody inlines and sealRecord takes seven.
func putRecord(b []byte, h dsfabric.HandlerID, src dsfabric.ThreadID, args, buf []byte) {
	sealRecord(b, h, src, len(args), copyBody(b, args, buf))
}

// copyBody copies a record's arguments and buffer into place and returns
// their length.
func copyBody(b, args, buf []byte) int {
	if len(buf) == 0 {
		if len(args) == 8 {
			putArgs(b[recordHeader:recordHeader+8], args) // one word
			return 8
		}
		return copy(b[recordHeader:], args)
	}
	n := copy(b[recordHeader:], args)
	return n + copy(b[recordHeader+n:], buf)
}

// sealRecord writes the header, the padding and the seal of a record whose
// n payload bytes (nargs of them arguments) are in place.
func sealRecord(b []byte, h dsfabric.HandlerID, src dsfabric.ThreadID, nargs, n int) {
	// The header words are built in registers and stored whole: reading
	// them back after four 4-byte stores would stall (a load cannot be
	// forwarded from two smaller stores).
	h0 := uint64(uint32(n)) | uint64(h)<<32
	h1 := uint64(src) | uint64(uint32(nargs))<<32
	binary.LittleEndian.PutUint64(b[0:], h0)
	binary.LittleEndian.PutUint64(b[8:], h1)
	if pad := b[recordHeader+n : len(b)-recordSeal]; len(pad) > 0 {
		clear(pad)
	}
	// Stored last with release semantics: b may be the destination's own
	// memory (a mapped chunk), whose receiver polls this word. A plain
	// store on amd64; little-endian there, as the wire wants.
	dtutils.PublishWord(b[len(b)-recordSeal:], littleEndianWord(sealOf(h0, h1)))
}

// littleEndianWord returns the native-order word whose bytes in memory are
// w's little-endian encoding.
func littleEndianWord(w uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], w)
	return *(*uint64)(unsafe.Pointer(&b[0]))
}

// record is a parsed record.
type record struct {
	handler   dsfabric.HandlerID
	src       dsfabric.ThreadID
	args, buf []byte // slices of the chunk, valid until it is zeroed
	size      int
}

// parse states.
const (
	recNone    = iota // nothing (yet) at this offset
	recOK             // a complete record
	recCorrupt        // a header no sender can have written
)

func word(b []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b[off]))
}

// parseRecord looks at offset pos of chunk c and, for a complete record
// (recOK), fills rec. It never reads outside c: a length that leaves the
// chunk, or argument bytes above the payload, is corrupt. A record whose
// seal does not match yet is incomplete (recNone). rec is filled field by
// field rather than returned: a returned record (nine words) came back
// through the stack and was copied with 16-byte moves that waited on the
// 8-byte stores just made, 20 % of the receiver at 8-byte calls.
func parseRecord(c []byte, pos int, rec *record) (int, error) {
	if pos < recordsStart || pos%8 != 0 || pos > len(c) {
		return recCorrupt, fmt.Errorf("%w: record offset %d in a %d-byte chunk", ErrProtocol, pos, len(c))
	}
	if pos+recordHeader+recordSeal > len(c) {
		return recNone, nil // no record fits: the sender has rotated
	}
	h0 := word(c, pos).Load()
	if h0 == 0 {
		return recNone, nil
	}
	n := int(uint32(h0))
	size := recordSize(n)
	if n > len(c) || pos+size > len(c) {
		return recCorrupt, fmt.Errorf("%w: record of %d payload bytes at offset %d overruns the %d-byte chunk", ErrProtocol, n, pos, len(c))
	}
	seal := word(c, pos+size-recordSeal).Load()
	h1 := word(c, pos+8).Load()
	if seal != sealOf(h0, h1) {
		return recNone, nil
	}
	na := int(uint32(h1 >> 32))
	if na > n {
		return recCorrupt, fmt.Errorf("%w: %d argument bytes in a %d-byte payload", ErrProtocol, na, n)
	}
	p := c[pos+recordHeader : pos+recordHeader+n : pos+recordHeader+n]
	rec.handler = dsfabric.HandlerID(h0 >> 32)
	rec.src = dsfabric.ThreadID(uint32(h1))
	rec.args = p[:na]
	rec.buf = p[na:]
	rec.size = size
	return recOK, nil
}

// allocation request (service call to the receiver's process):
//
//	0  u32 sender thread   4 u32 receiver thread   8 u32 chunk count
//	12 u32 chunk size      16 alloc.Locator of the sender's feedback word
//
// reply: u32 count, then count × alloc.Locator of the new chunks.
const allocReqSize = 16 + 32

// allocReq is an allocation request.
type allocReq struct {
	src, dst    dsfabric.ThreadID
	count, size int
	feedback    alloc.Locator
}

func (r allocReq) marshal() []byte {
	b := make([]byte, 16, allocReqSize)
	binary.LittleEndian.PutUint32(b[0:], uint32(r.src))
	binary.LittleEndian.PutUint32(b[4:], uint32(r.dst))
	binary.LittleEndian.PutUint32(b[8:], uint32(r.count))
	binary.LittleEndian.PutUint32(b[12:], uint32(r.size))
	b, _ = r.feedback.AppendBinary(b)
	return b
}

func parseAllocReq(b []byte) (allocReq, error) {
	if len(b) != allocReqSize {
		return allocReq{}, fmt.Errorf("%w: allocation request of %d bytes", ErrProtocol, len(b))
	}
	r := allocReq{
		src:   dsfabric.ThreadID(binary.LittleEndian.Uint32(b[0:])),
		dst:   dsfabric.ThreadID(binary.LittleEndian.Uint32(b[4:])),
		count: int(binary.LittleEndian.Uint32(b[8:])),
		size:  int(binary.LittleEndian.Uint32(b[12:])),
	}
	if err := r.feedback.UnmarshalBinary(b[16:]); err != nil {
		return allocReq{}, fmt.Errorf("%w: allocation request: %w", ErrProtocol, err)
	}
	return r, nil
}

// appendAllocReply appends the reply's count; the chunks' locators follow
// (alloc.Locator.AppendBinary).
func appendAllocReply(b []byte, count int) []byte {
	return binary.LittleEndian.AppendUint32(b, uint32(count))
}

// parseAllocReply decodes a reply that must carry want chunks of size
// bytes, each in the memory of rank (the receiver that granted them: a
// chunk anywhere else would have the sender write there).
func parseAllocReply(b []byte, want, size int, rank uint32) ([]alloc.Locator, error) {
	if len(b) < 4 || int(binary.LittleEndian.Uint32(b)) != want || len(b) != 4+32*want {
		return nil, fmt.Errorf("%w: allocation reply of %d bytes for %d chunks", ErrProtocol, len(b), want)
	}
	locs := make([]alloc.Locator, want)
	for i := range locs {
		if err := locs[i].UnmarshalBinary(b[4+32*i : 4+32*(i+1)]); err != nil {
			return nil, fmt.Errorf("%w: allocation reply: %w", ErrProtocol, err)
		}
		if locs[i].Length != uint64(size) || locs[i].Process != rank {
			return nil, fmt.Errorf("%w: chunk %v granted by rank %d, want %d bytes there", ErrProtocol, locs[i], rank, size)
		}
	}
	return locs, nil
}

// Batches (Aggregator, trad mode) are one record whose handler is
// batchHandler and whose arguments are inner records, each a multiple of 8
// bytes. A call without a buffer, by far the most common, takes an 8-byte
// header; one with a buffer sets bit 31 of the argument count and takes 16:
//
//	0  u32 handler ID   4 u32 argument bytes (bit 31: a buffer follows)
//	without a buffer:   8  arguments, zero-padded to a multiple of 8
//	with a buffer:      8  u32 buffer bytes (not 0)   12 u32 reserved (0)
//	                    16 arguments, buffer, zero-padded to a multiple of 8
//
// Consecutive calls of one handler with equal argument sizes and no buffer
// form a run under one such header (bit 30 set, docs/wire.md "Batch"): an
// 8-byte call then takes 8 bytes of the batch instead of 16.
const (
	batchHandlerName = "riutils.batch"
	innerHeader      = 8  // an inner record without a buffer
	innerHeaderBuf   = 16 // an inner record with one
	innerHasBuf      = 1 << 31
	// A run: consecutive calls of one handler with equal argument sizes and
	// no buffer, under one 8-byte header whose second word holds the
	// argument size (bits 0–13) and the count less one (bits 14–29).
	innerRun     = 1 << 30
	runArgsBits  = 14
	maxRunArgs   = 1<<runArgsBits - 1
	maxRunCalls  = 1 << 16
	runCountMask = maxRunCalls - 1
)

// runWord is the second header word of a run of count calls with na
// argument bytes each.
func runWord(na, count int) uint32 {
	return innerRun | uint32(count-1)<<runArgsBits | uint32(na)
}

// nextRun parses the run at the start of b (whose second header word has
// innerRun set): count calls of handler h, the i-th with the arguments
// args[i*stride:][:na].
func nextRun(b []byte) (h dsfabric.HandlerID, args []byte, na, stride, count, size int, err error) {
	if len(b) < innerHeader {
		return 0, nil, 0, 0, 0, 0, fmt.Errorf("%w: %d bytes left in a batch", ErrProtocol, len(b))
	}
	w := binary.LittleEndian.Uint32(b[4:])
	if w&innerHasBuf != 0 {
		return 0, nil, 0, 0, 0, 0, fmt.Errorf("%w: a run of calls with a buffer flag", ErrProtocol)
	}
	na = int(w & maxRunArgs)
	count = int(w>>runArgsBits&runCountMask) + 1
	stride = padded(na)
	size = innerHeader + count*stride
	if size > len(b) {
		return 0, nil, 0, 0, 0, 0, fmt.Errorf("%w: a run of %d calls of %d bytes overruns the batch (%d bytes left)", ErrProtocol, count, na, len(b))
	}
	return dsfabric.HandlerID(binary.LittleEndian.Uint32(b)), b[innerHeader:size:size], na, stride, count, size, nil
}

// putArgs writes a call's arguments into b, their stride (len(args)
// rounded up to 8), zero-padded: in a plain inner record or a run.
func putArgs(b, args []byte) {
	if len(args) == 8 { // one word, the commonest call: no call of memmove
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(args))
		return
	}
	if len(args)&7 != 0 {
		binary.LittleEndian.PutUint64(b[len(b)-8:], 0)
	}
	copy(b, args)
}

var batchHandler = dsfabric.IDOf(batchHandlerName)

// innerHeaderFor is the header size of an inner record with nb buffer bytes.
func innerHeaderFor(nb int) int {
	if nb > 0 {
		return innerHeaderBuf
	}
	return innerHeader
}

// innerSize is the size of an inner record with na argument and nb buffer
// bytes.
func innerSize(na, nb int) int { return innerHeaderFor(nb) + padded(na+nb) }

// padded is n rounded up to a multiple of 8: what n bytes of arguments
// (and buffer) take in a record, and the stride of a run's calls.
func padded(n int) int { return (n + 7) &^ 7 }

// putInner writes an inner record at the start of b and returns its size
// (innerSize). It is Trad's and Ovfl's per-call work, so it writes the
// header as words and zeroes the padding by one store into the record's
// last word before the arguments cover the rest of it, rather than through
// three calls of copy and clear.
func putInner(b []byte, h dsfabric.HandlerID, args, buf []byte) int {
	na, nb := len(args), len(buf)
	if nb == 0 {
		size := innerHeader + padded(na)
		b = b[:size:size]
		binary.LittleEndian.PutUint64(b, uint64(uint32(h))|uint64(uint32(na))<<32)
		putArgs(b[innerHeader:], args)
		return size
	}
	size := innerHeaderBuf + padded(na+nb)
	b = b[:size:size]
	binary.LittleEndian.PutUint64(b, uint64(uint32(h))|uint64(uint32(na)|innerHasBuf)<<32)
	binary.LittleEndian.PutUint64(b[8:], uint64(uint32(nb))) // and the reserved word, 0
	if (na+nb)&7 != 0 {
		binary.LittleEndian.PutUint64(b[size-8:], 0)
	}
	copy(b[innerHeaderBuf:], args)
	copy(b[innerHeaderBuf+na:], buf)
	return size
}

// nextInner parses the inner record at the start of b.
func nextInner(b []byte) (h dsfabric.HandlerID, args, buf []byte, size int, err error) {
	if len(b) < innerHeader {
		return 0, nil, nil, 0, fmt.Errorf("%w: %d bytes left in a batch", ErrProtocol, len(b))
	}
	w := binary.LittleEndian.Uint32(b[4:])
	na, nb, off := uint64(w&^innerHasBuf), uint64(0), uint64(innerHeader)
	if w&innerHasBuf != 0 {
		if len(b) < innerHeaderBuf {
			return 0, nil, nil, 0, fmt.Errorf("%w: inner record header of %d bytes left in a batch", ErrProtocol, len(b))
		}
		nb, off = uint64(binary.LittleEndian.Uint32(b[8:])), innerHeaderBuf
		if nb == 0 || binary.LittleEndian.Uint32(b[12:]) != 0 {
			return 0, nil, nil, 0, fmt.Errorf("%w: inner record with a buffer of %d bytes, reserved word %#x", ErrProtocol, nb, binary.LittleEndian.Uint32(b[12:]))
		}
	}
	if off+na+nb > uint64(len(b)) {
		return 0, nil, nil, 0, fmt.Errorf("%w: inner record of %d+%d bytes in %d", ErrProtocol, na, nb, len(b))
	}
	size = innerSize(int(na), int(nb))
	if size > len(b) {
		return 0, nil, nil, 0, fmt.Errorf("%w: inner record padding overruns the batch", ErrProtocol)
	}
	d := b[off : off+na+nb : off+na+nb]
	return dsfabric.HandlerID(binary.LittleEndian.Uint32(b)), d[:na], d[na:], size, nil
}

// Extension records carry the one-sided call variants: a buffer written or
// to be read (CallBufferWrite, CallBufferRead) and an Executed notification
// (CallSync and the variants with a Synchronizer). The record's handler is
// extHandler; its arguments are
//
//	0   u32 handler ID of the call
//	4   u32 flags: 1 buffer written to dest, 2 buffer to read from orig into
//	    dest, 4 decrement the synchronizer after running; other bits 0
//	8   alloc.Locator dest: the buffer in the receiver's memory (zero if unused)
//	40  alloc.Locator orig: the buffer in the caller's memory (read only)
//	72  alloc.Locator sync: the caller's 8-byte counter (notify only)
//	104 the call's own arguments; a buffer carried inline follows as usual
const (
	extHandlerName = "riutils.ext"
	extHeader      = 104
	extWrite       = 1
	extRead        = 2
	extNotify      = 4
)

var extHandler = dsfabric.IDOf(extHandlerName)

type ext struct {
	handler          dsfabric.HandlerID
	flags            uint32
	dest, orig, sync alloc.Locator
	args             []byte
}

func putExt(b []byte, h dsfabric.HandlerID, flags uint32, dest, orig, sync alloc.Locator) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(h))
	b = binary.LittleEndian.AppendUint32(b, flags)
	for _, l := range []alloc.Locator{dest, orig, sync} {
		if l == (alloc.Locator{}) {
			b = append(b, make([]byte, alloc.LocatorSize)...)
		} else {
			b, _ = l.AppendBinary(b)
		}
	}
	return b
}

func parseExt(a []byte) (ext, error) {
	var e ext
	if len(a) < extHeader {
		return e, fmt.Errorf("%w: extension record of %d argument bytes", ErrProtocol, len(a))
	}
	e.handler = dsfabric.HandlerID(binary.LittleEndian.Uint32(a))
	e.flags = binary.LittleEndian.Uint32(a[4:])
	if e.flags&^(extWrite|extRead|extNotify) != 0 || e.flags&(extWrite|extRead) == extWrite|extRead {
		return e, fmt.Errorf("%w: extension flags %#x", ErrProtocol, e.flags)
	}
	used := [3]bool{e.flags&(extWrite|extRead) != 0, e.flags&extRead != 0, e.flags&extNotify != 0}
	for i, l := range []*alloc.Locator{&e.dest, &e.orig, &e.sync} {
		b := a[8+32*i : 40+32*i]
		if !used[i] {
			if string(b) != string(make([]byte, 32)) {
				return e, fmt.Errorf("%w: unused extension locator %d is not zero", ErrProtocol, i)
			}
			continue
		}
		if err := l.UnmarshalBinary(b); err != nil {
			return e, fmt.Errorf("%w: extension locator: %w", ErrProtocol, err)
		}
	}
	e.args = a[extHeader:]
	return e, nil
}

// Call-and-return. The call is a record for returnHandler whose arguments are
//
//	0  u32 handler ID   4 u32 reserved (0)   8 u64 sequence
//	16 alloc.Locator of the caller's reply slot (32 bytes)
//	48 the call's own arguments
//
// and the callee answers with one write into the reply slot:
//
//	0  u32 result bytes   4 u32 status (0 ok, 1 error: the bytes are its message)
//	8  result, zero-padded to a multiple of 8
//	.. u64 seal = sealOf(first word, sequence)
//
// The seal mixes the header with the sequence, so neither a stale reply nor
// a half-written one ever looks complete.
const (
	returnHandlerName = "riutils.return"
	returnHeader      = 48
	replyHeader       = 8
)

var returnHandler = dsfabric.IDOf(returnHandlerName)

func replySize(n int) int { return replyHeader + (n+7)&^7 + recordSeal }
