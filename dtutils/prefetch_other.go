//go:build !amd64

package dtutils

import "unsafe"

// prefetchw is a no-op where no write prefetch is wired up.
func prefetchw(p unsafe.Pointer) {}
