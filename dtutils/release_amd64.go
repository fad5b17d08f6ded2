//go:build amd64 && !race

package dtutils

import "unsafe"

// storeRelease stores v at p with release semantics: every store before it
// is visible to a reader that sees v with an acquire load (sync/atomic's
// Load). On amd64 (total store order) a plain store is a release store as
// long as the compiler keeps it after the earlier stores, which it does: Go
// orders stores along one memory chain, and a copy before it is a call.
// sync/atomic's Store is an XCHG there, a full barrier that waits for the
// cache line: on a line the reader keeps pulling back, it measured 5× the
// cost of the plain store (docs/benchmarks.md, "Sealing a record").
//
// The race detector cannot see this ordering, so race builds use
// sync/atomic (release_other.go).
func storeRelease(p unsafe.Pointer, v uint64) { *(*uint64)(p) = v }
