package alloc

import "errors"

// Sentinel errors of package alloc. Every error returned by this package
// wraps one of them (test with errors.Is) and adds the sizes or IDs involved.
var (
	// ErrInvalidSize: a size or count is zero, negative or not aligned as required.
	ErrInvalidSize = errors.New("alloc: invalid size")
	// ErrTooLarge: a request is larger than the allocator can ever satisfy.
	ErrTooLarge = errors.New("alloc: request too large")
	// ErrExhausted: the allocator reached its configured maximum.
	ErrExhausted = errors.New("alloc: allocator exhausted")
	// ErrBusy: every unit of a circular allocator is still in flight and it
	// may not grow; retry after completions have been polled.
	ErrBusy = errors.New("alloc: all units in flight")
	// ErrNoMemory: the kernel refused to create or map a region.
	ErrNoMemory = errors.New("alloc: kernel refused memory")
	// ErrUnknownRegion: a locator names a region this registry does not hold.
	ErrUnknownRegion = errors.New("alloc: unknown region")
	// ErrBadKey: a locator's key does not match its region's key.
	ErrBadKey = errors.New("alloc: bad region key")
	// ErrOutOfRange: a locator's offset and length leave its region.
	ErrOutOfRange = errors.New("alloc: range outside region")
	// ErrWrongProcess: a locator names another process's memory.
	ErrWrongProcess = errors.New("alloc: locator of another process")
	// ErrBadLocator: encoded locator bytes are malformed.
	ErrBadLocator = errors.New("alloc: malformed locator")
	// ErrNotAllocated: Free was given memory this allocator did not hand out,
	// or memory already freed.
	ErrNotAllocated = errors.New("alloc: memory not allocated here")
	// ErrClosed: the region, registry or allocator was closed.
	ErrClosed = errors.New("alloc: closed")
	// ErrBadConfig: a configuration field is out of range (see VerifyConfig).
	ErrBadConfig = errors.New("alloc: bad config")
)
