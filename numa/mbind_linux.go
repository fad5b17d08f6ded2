package numa

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BindMode is an mbind(2) memory policy.
type BindMode int

// Values from <linux/mempolicy.h>.
const (
	// Preferred takes pages from the node when it has free memory, else elsewhere.
	Preferred BindMode = 1
	// Strict takes pages only from the node (MPOL_BIND); allocation fails
	// (SIGBUS on touch) when the node is full.
	Strict BindMode = 2
)

const (
	mpolMFStrict = 1 << 0 // MPOL_MF_STRICT
	mpolMFMove   = 1 << 1 // MPOL_MF_MOVE
	nodeMaskBits = 1024   // covers every node count Linux supports today
)

// Bind applies mode for node to the pages of mem, which must be a mapping
// (page-aligned start, as mmap returns). Call it before first touching the
// pages; pages already present are moved when the kernel can (MPOL_MF_MOVE).
//
// A node the kernel does not know gives an error wrapping ErrNoSuchNode; a
// kernel without NUMA gives ErrUnsupported.
func Bind(mem []byte, node int, mode BindMode) error {
	if len(mem) == 0 {
		return nil
	}
	if node < 0 || node >= nodeMaskBits {
		return fmt.Errorf("%w: node %d out of range [0,%d)", ErrNoSuchNode, node, nodeMaskBits)
	}
	var mask [nodeMaskBits / 64]uint64
	mask[node/64] |= 1 << (uint(node) % 64)
	flags := 0
	if mode == Strict {
		flags = mpolMFStrict | mpolMFMove
	}
	_, _, e := unix.Syscall6(unix.SYS_MBIND,
		uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(mode),
		uintptr(unsafe.Pointer(&mask[0])), nodeMaskBits+1, uintptr(flags))
	switch {
	case e == 0:
		return nil
	case errors.Is(e, unix.ENOSYS):
		return fmt.Errorf("numa: mbind: %w", ErrUnsupported)
	case errors.Is(e, unix.EINVAL):
		// The kernel answers EINVAL for a node that is not online.
		return fmt.Errorf("%w: mbind to node %d: %v", ErrNoSuchNode, node, e)
	default:
		return fmt.Errorf("numa: mbind %d bytes to node %d: %w", len(mem), node, e)
	}
}
