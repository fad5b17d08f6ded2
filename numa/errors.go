package numa

import "errors"

// Sentinel errors. Functions wrap them with %w and add context; test with
// errors.Is.
var (
	// ErrBadCPUList is returned when a CPU list such as "0-7,16-23" is malformed.
	ErrBadCPUList = errors.New("numa: malformed CPU list")
	// ErrNoSuchNode is returned when a node ID is not part of the topology or
	// is rejected by the kernel.
	ErrNoSuchNode = errors.New("numa: no such node")
	// ErrNoCPUs is returned when a placement or pin request has no CPU to use.
	ErrNoCPUs = errors.New("numa: no CPUs")
	// ErrBadArgument is returned for an argument out of its domain: an
	// unknown placement policy, a negative worker index, a CPU number
	// beyond what the kernel's CPU set can hold.
	ErrBadArgument = errors.New("numa: bad argument")
	// ErrUnsupported is returned when the kernel has no NUMA support for a
	// request (mbind returns ENOSYS).
	ErrUnsupported = errors.New("numa: not supported by this kernel")
)
