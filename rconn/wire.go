package rconn

import (
	"encoding/binary"
	"fmt"
)

// Every byte format of package rconn is defined in this file, little-endian
// throughout; docs/wire.md describes them.

// Hello: what each side writes on the socket right after it connects.
//
//	0  u32 magic "RCON"   4 u8 version (1)   5 u8 flags (bit 0: offers a ring)
//	6  u16 reserved
//	8  u32 pid of the sender          12 i32 descriptor of its ring (-1: none)
//	16 u64 key written in the ring's header
//	24 u64 ring bytes (data area, a power of two)
//	32 i32 descriptor of the write end of its reader's doorbell (a pipe)
//	36 i32 descriptor of the write end of its writer's doorbell
//	40 u16 machine identity length   42 machine identity (host name + boot ID)
//
// Then each side writes one verdict byte: 1 if it mapped the peer's ring
// (opened /proc/<pid>/fd/<fd>, found magic, key and size) and its
// doorbells, 0 if not. The
// connection moves to the rings only when both verdicts are 1; otherwise the
// socket carries the data, as plain TCP or unix.
const (
	helloMagic   = 0x4e4f4352 // "RCON"
	helloVersion = 2
	helloFixed   = 42
	maxMachineID = 512
	flagRing     = 1
)

type hello struct {
	flags   uint8
	pid     uint32
	fd      int32
	key     uint64
	size    uint64
	rbell   int32 // write ends of the sender's doorbells
	wbell   int32
	machine string
}

func (h hello) marshal() []byte {
	b := make([]byte, helloFixed, helloFixed+len(h.machine))
	binary.LittleEndian.PutUint32(b[0:], helloMagic)
	b[4], b[5] = helloVersion, h.flags
	binary.LittleEndian.PutUint32(b[8:], h.pid)
	binary.LittleEndian.PutUint32(b[12:], uint32(h.fd))
	binary.LittleEndian.PutUint64(b[16:], h.key)
	binary.LittleEndian.PutUint64(b[24:], h.size)
	binary.LittleEndian.PutUint32(b[32:], uint32(h.rbell))
	binary.LittleEndian.PutUint32(b[36:], uint32(h.wbell))
	binary.LittleEndian.PutUint16(b[40:], uint16(len(h.machine)))
	return append(b, h.machine...)
}

// parseHelloFixed decodes the fixed part and returns the machine identity's
// length, which follows.
func parseHelloFixed(b []byte) (hello, int, error) {
	if len(b) != helloFixed {
		return hello{}, 0, fmt.Errorf("%w: %d-byte hello", ErrHandshake, len(b))
	}
	if binary.LittleEndian.Uint32(b[0:]) != helloMagic || b[4] != helloVersion {
		return hello{}, 0, fmt.Errorf("%w: not an rconn hello (magic %#x, version %d)", ErrHandshake, binary.LittleEndian.Uint32(b[0:]), b[4])
	}
	if b[5]&^flagRing != 0 || binary.LittleEndian.Uint16(b[6:]) != 0 {
		return hello{}, 0, fmt.Errorf("%w: reserved hello bits set", ErrHandshake)
	}
	n := int(binary.LittleEndian.Uint16(b[40:]))
	if n > maxMachineID {
		return hello{}, 0, fmt.Errorf("%w: machine identity of %d bytes", ErrHandshake, n)
	}
	h := hello{
		flags: b[5],
		pid:   binary.LittleEndian.Uint32(b[8:]),
		fd:    int32(binary.LittleEndian.Uint32(b[12:])),
		key:   binary.LittleEndian.Uint64(b[16:]),
		size:  binary.LittleEndian.Uint64(b[24:]),
		rbell: int32(binary.LittleEndian.Uint32(b[32:])),
		wbell: int32(binary.LittleEndian.Uint32(b[36:])),
	}
	return h, n, nil
}

// Ring: a memfd mapped by both sides; one side reads it, the other writes.
//
//	0    u64 magic "RCONRING"   8 u64 key   16 u64 data bytes (power of two)
//	64   u64 head: bytes the reader consumed (written by the reader only)
//	128  u32 reader sleeping (1 while it waits on its doorbell)
//	192  u32 writer sleeping (1 while it waits for room)
//	256  u32 writer closed (no more records: the reader gets EOF after them)
//	260  u32 reader closed (writes fail)
//	4096 data
//
// The data is a sequence of records at 8-aligned positions p (counted from
// the start of the connection, modulo the size for the address):
//
//	0 u64 validity word: payload length (low 32 bits) | tag(p) << 32
//	8 payload, padded to 8 bytes
//
// The validity word is written last, with a release store, after the
// payload: the seed's header-and-footer in one word, since a CPU copy, not
// one RDMA write, lays the record down. tag(p) = uint32(p/8)+1 tells this
// lap's record from what an earlier lap left there, so the memory needs no
// zeroing. Length 0xffffffff marks the rest of the lap as unused (the next
// record starts the next lap).
const (
	ringMagic      = 0x474e49524e4f4352 // "RCONRING"
	ringHeaderSize = 4096
	offHead        = 64
	offRSleep      = 128
	offWSleep      = 192
	offWClosed     = 256
	offRClosed     = 260
	recordHeader   = 8
	wrapLength     = 0xffffffff
)

func validity(pos uint64, n uint32) uint64 { return uint64(n) | uint64(tag(pos))<<32 }
func tag(pos uint64) uint32                { return uint32(pos>>3) + 1 }
