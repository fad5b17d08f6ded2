package rconn

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one direction of a connection: a memfd both processes map, one
// reading it and the other writing it (wire.go has the layout). Its
// mapping is released by a cleanup once nothing references the ring, so a
// goroutine still copying after Close never touches unmapped memory.
type ring struct {
	mem  []byte // header and data
	data []byte
	size uint64
	mask uint64
	fd   int // the creator's memfd until the handshake ends; -1 after
}

func (r *ring) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *ring) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off])) }

// word is the validity word of the record at data offset off.
func (r *ring) word(off uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.data[off]))
}

func (r *ring) key() uint64 { return r.u64(8).Load() }

// newRing creates a ring of size data bytes (a power of two) in a memfd.
func newRing(size int) (*ring, error) {
	fd, err := unix.MemfdCreate("rconn-ring", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("rconn: memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(ringHeaderSize+size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rconn: sizing the ring: %w", err)
	}
	r, err := mapRing(fd, ringHeaderSize+size)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	r.fd = fd
	var k [8]byte
	rand.Read(k[:])
	r.u64(8).Store(binary.LittleEndian.Uint64(k[:]) | 1)
	r.u64(16).Store(uint64(size))
	r.u64(0).Store(ringMagic)
	r.size, r.mask = uint64(size), uint64(size-1)
	return r, nil
}

// openRing maps the peer's ring through /proc/<pid>/fd/<fd> and checks that
// it is the ring the hello described: magic, key and size.
func openRing(pid uint32, fd int32, key, size uint64) (*ring, error) {
	if size < minRing || size > maxRing || size&(size-1) != 0 {
		return nil, fmt.Errorf("%w: peer ring of %d bytes", ErrHandshake, size)
	}
	f, err := unix.Open(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("rconn: opening the peer's ring: %w", err)
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil || uint64(st.Size) != ringHeaderSize+size {
		return nil, fmt.Errorf("%w: the peer's ring file has %d bytes, want %d", ErrHandshake, st.Size, ringHeaderSize+size)
	}
	r, err := mapRing(f, int(ringHeaderSize+size))
	if err != nil {
		return nil, err
	}
	if r.u64(0).Load() != ringMagic || r.key() != key || r.u64(16).Load() != size {
		return nil, fmt.Errorf("%w: the peer's ring does not carry its key", ErrHandshake)
	}
	r.size, r.mask = size, size-1
	return r, nil
}

func mapRing(fd, n int) (*ring, error) {
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("rconn: mapping the ring: %w", err)
	}
	r := &ring{mem: mem, data: mem[ringHeaderSize:], fd: -1}
	runtime.AddCleanup(r, func(m []byte) { unix.Munmap(m) }, mem)
	return r, nil
}

// closeFD closes the creator's memfd: once the peer mapped the ring, the
// mappings keep it alive and it dies with the last of them.
func (r *ring) closeFD() {
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}
