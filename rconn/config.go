package rconn

import (
	"fmt"
	"log/slog"
	"time"
)

// Config configures Listen and Dial. DefaultConfig fills every field; the
// zero value of a field means its default.
type Config struct {
	// RingBytes is the size of each direction's ring: how many bytes a
	// writer may get ahead of its reader. Default 1 MiB; a power of two in
	// [64 KiB, 1 GiB]. One write of more than a quarter of it is split.
	RingBytes int
	// DisableRings keeps every connection on its socket (no shared memory).
	// Default false: rings whenever both ends are on one machine and can
	// map each other's memory.
	DisableRings bool
	// HandshakeTimeout bounds the exchange that follows connecting (Dial
	// without a context deadline; Accept). Default 10 s.
	HandshakeTimeout time.Duration
	// Spin is how long a blocked Read or Write keeps polling before it
	// sleeps on the ring's doorbell. It polls without yielding for the
	// first spinAlone (500 ns) at most, then yields the processor between
	// polls, so that goroutines this one has just woken run at once on its
	// processor. Default 50 µs.
	Spin time.Duration
	// Logger receives connection-level events. Default slog.Default().
	Logger *slog.Logger
}

const (
	// spinAlone bounds the part of Spin a blocked call polls without
	// yielding: about a same-machine 64-byte round trip (p50 600 ns on the
	// development VM), which a ping-pong catches without a trip through
	// the scheduler. Any longer starves the goroutines the call's own
	// goroutine woke: Go runs a woken goroutine next on the waker's
	// processor, and another processor takes it only after a delay. With
	// Spin/4 (12.5 µs) unyielded, gRPC unary over rconn took 168 µs at p50
	// and net/rpc 34 µs; with 500 ns, 29 µs and 5 µs.
	spinAlone = 500 * time.Nanosecond
	minRing   = 64 << 10
	maxRing   = 1 << 30
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{RingBytes: 1 << 20, HandshakeTimeout: 10 * time.Second, Spin: 50 * time.Microsecond, Logger: slog.Default()}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.RingBytes == 0 {
		c.RingBytes = d.RingBytes
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = d.HandshakeTimeout
	}
	if c.Spin == 0 {
		c.Spin = d.Spin
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// VerifyConfig checks c (after defaults).
func (c Config) VerifyConfig() error {
	switch {
	case c.RingBytes < minRing || c.RingBytes > maxRing || c.RingBytes&(c.RingBytes-1) != 0:
		return fmt.Errorf("%w: RingBytes %d must be a power of two in [64 KiB, 1 GiB]", ErrBadConfig, c.RingBytes)
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("%w: HandshakeTimeout %v", ErrBadConfig, c.HandshakeTimeout)
	case c.Spin < 0 || c.Spin > time.Second:
		return fmt.Errorf("%w: Spin %v must be in [0, 1 s]", ErrBadConfig, c.Spin)
	}
	return nil
}
