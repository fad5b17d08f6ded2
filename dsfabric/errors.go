package dsfabric

import "errors"

// Sentinel errors of package dsfabric; returned errors wrap them.
var (
	// ErrBootstrap: the job could not form (timeout, refused, malformed table).
	ErrBootstrap = errors.New("dsfabric: bootstrap failed")
	// ErrRankDead: the destination rank died or left; the error names it.
	ErrRankDead = errors.New("dsfabric: rank is dead")
	// ErrUnknownHandler: no handler has that ID at the destination.
	ErrUnknownHandler = errors.New("dsfabric: unknown handler")
	// ErrHandlerExists: a name, or another name with the same 32-bit hash, is registered.
	ErrHandlerExists = errors.New("dsfabric: handler already registered")
	// ErrTooLarge: the call does not fit MaxMessage; nothing was sent.
	ErrTooLarge = errors.New("dsfabric: call larger than MaxMessage")
	// ErrBadThread: a thread or rank outside the job.
	ErrBadThread = errors.New("dsfabric: no such thread")
	// ErrBadMessage: bytes from a peer are malformed.
	ErrBadMessage = errors.New("dsfabric: malformed message")
	// ErrRemote: the handler at the destination returned an error.
	ErrRemote = errors.New("dsfabric: remote handler failed")
	// ErrClosed: the fabric was closed.
	ErrClosed = errors.New("dsfabric: closed")
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = errors.New("dsfabric: bad config")
	// ErrCodec: arguments could not be encoded or decoded.
	ErrCodec = errors.New("dsfabric: cannot encode or decode value")
	// ErrSyncDone: a call was given a Synchronizer whose count had
	// already reached zero: a done synchronizer counts no more calls (raise
	// the count with Add before it reaches zero, or make a new one);
	// nothing was sent.
	ErrSyncDone = errors.New("dsfabric: synchronizer already at zero")
)
