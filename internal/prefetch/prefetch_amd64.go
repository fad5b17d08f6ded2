package prefetch

import "unsafe"

// Write asks for the cache line at p in a state that allows writing
// (PREFETCHW), without waiting for it.
//
//go:noescape
func Write(p unsafe.Pointer)
