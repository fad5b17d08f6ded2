package dtutils

import (
	"crypto/rand"
	"encoding/binary"
)

// Provider creates queue pairs over one transport. loop, shm and tcp
// implement it; a verbs provider can later. Nothing above dtutils may assume
// which one is underneath.
type Provider interface {
	// Transport names the transport: "loop", "shm" or "tcp".
	Transport() string
	// Process returns the process state the provider serves.
	Process() *Process
	// NewQueuePair creates an unconnected queue pair.
	NewQueuePair() (QueuePair, error)
	// Close closes the provider and every queue pair it made.
	Close() error
}

// QueuePair is a reliable, ordered connection to one peer process: the
// operations posted on it complete in order.
type QueuePair interface {
	// Endpoint returns the bytes the peer passes to Connect. They are plain
	// bytes so any bootstrap can carry them.
	Endpoint() []byte
	// Connect connects to the peer queue pair whose Endpoint is remote. Both
	// sides call it with each other's endpoint.
	Connect(remote []byte) error
	// Post starts an operation. An error means nothing was posted (bad
	// request, overflow, closed or lost); otherwise the outcome arrives in
	// CQ: always for failures, for successes when wr.Signaled.
	Post(wr WorkRequest) error
	// CQ returns the queue pair's send completion queue.
	CQ() CompletionQueue
	// Outstanding returns the unsignaled operations not yet retired by a
	// polled signaled completion (never above MaxUnsignaled).
	Outstanding() int
	// PeerRank returns the connected peer's process rank.
	PeerRank() uint32
	// Close disconnects; later posts fail with ErrClosed.
	Close() error
}

func randomToken() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1 // never 0
}
