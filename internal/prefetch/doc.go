// Package prefetch holds cache-line prefetch hints for the shared-memory
// hot paths: on amd64 the PREFETCHW (Write) and PREFETCHT0 (Read)
// instructions, elsewhere nothing. A hint never faults and never changes
// what a program computes; it only moves a line earlier than the access
// that needs it would.
//
// It is a package of its own because Go assembly cannot sit in a package
// that uses cgo, as dtutils does when built with the ofi tag.
package prefetch
