package prefetch

import "unsafe"

// Write asks for the cache line at p in a state that allows writing
// (PREFETCHW), without waiting for it.
//
//go:noescape
func Write(p unsafe.Pointer)

// Read asks for the cache line at p for reading (PREFETCHT0), without
// waiting for it.
//
//go:noescape
func Read(p unsafe.Pointer)
