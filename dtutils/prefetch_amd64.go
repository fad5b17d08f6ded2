package dtutils

import "unsafe"

// prefetchw asks for the cache line at p in a state that allows writing
// (PREFETCHW), without waiting for it and without faulting.
//
//go:noescape
func prefetchw(p unsafe.Pointer)
