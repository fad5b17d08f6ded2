//go:build !amd64 || race

package dtutils

import (
	"sync/atomic"
	"unsafe"
)

// storeRelease stores v at p with (at least) release semantics; see
// release_amd64.go. On arm64 sync/atomic's Store is STLR, a release store.
func storeRelease(p unsafe.Pointer, v uint64) { atomic.StoreUint64((*uint64)(p), v) }
