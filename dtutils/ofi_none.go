//go:build !ofi

package dtutils

// OFIAvailable reports whether this build has the ofi provider (the build
// tag "ofi").
const OFIAvailable = false

// NewOFI returns ErrOFIUnavailable: this build has no libfabric provider.
// Build with -tags ofi (cgo and libfabric-dev needed) to have it.
func NewOFI(proc *Process, cfg OFIConfig) (Provider, error) {
	return nil, ErrOFIUnavailable
}
