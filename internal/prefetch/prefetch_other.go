//go:build !amd64

package prefetch

import "unsafe"

// Write does nothing where no prefetch is wired up.
func Write(p unsafe.Pointer) {}

// Read does nothing where no prefetch is wired up.
func Read(p unsafe.Pointer) {}
