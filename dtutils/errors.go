package dtutils

import "errors"

// Sentinel errors of package dtutils; returned errors wrap them (errors.Is).
var (
	// ErrUnsignaledOverflow: posting this unsignaled operation would leave more
	// than MaxUnsignaled unsignaled operations outstanding on the queue pair.
	// A correct selective-signaling protocol never sees it.
	ErrUnsignaledOverflow = errors.New("dtutils: too many outstanding unsignaled operations")
	// ErrRemoteAccess: the target rejected the operation (bad key, range
	// outside the region, unknown region, misaligned atomic).
	ErrRemoteAccess = errors.New("dtutils: remote access error")
	// ErrReceiverNotReady: a Send or WriteImm found no posted receive.
	ErrReceiverNotReady = errors.New("dtutils: receiver not ready (no receive posted)")
	// ErrConnectionLost: the peer or the connection went away.
	ErrConnectionLost = errors.New("dtutils: connection lost")
	// ErrLength: a received message is larger than the posted buffer.
	ErrLength = errors.New("dtutils: message larger than receive buffer")
	// ErrNotConnected: the queue pair has not been connected yet.
	ErrNotConnected = errors.New("dtutils: queue pair not connected")
	// ErrClosed: the queue pair, provider or process was closed.
	ErrClosed = errors.New("dtutils: closed")
	// ErrBadRequest: the work request itself is malformed (unknown op, wrong
	// local buffer size, too large, ...). Nothing was posted.
	ErrBadRequest = errors.New("dtutils: bad work request")
	// ErrBadEndpoint: endpoint bytes from a peer are malformed or belong to
	// another transport, or ConnectAll was given a different number of
	// endpoints than queue pairs.
	ErrBadEndpoint = errors.New("dtutils: bad endpoint")
	// ErrQueueFull: the shared receive queue has no room for another receive.
	ErrQueueFull = errors.New("dtutils: receive queue full")
	// ErrBadFrame: a tcp frame from the peer is malformed (the connection
	// is dropped), or a completion carries a status no transport writes.
	ErrBadFrame = errors.New("dtutils: malformed frame")
	// ErrOFIUnavailable: the build has no libfabric provider (build with
	// -tags ofi), or libfabric found no provider matching the configuration.
	ErrOFIUnavailable = errors.New("dtutils: libfabric (ofi) provider unavailable")
	// ErrBadConfig: a configuration field is out of range.
	ErrBadConfig = errors.New("dtutils: bad config")
	// ErrBusy: the target's queue of incoming calls (OpCall) was full; the
	// call did not run.
	ErrBusy = errors.New("dtutils: target's call queue full")
	// ErrNoOperator: the target process has no Operator to run calls.
	ErrNoOperator = errors.New("dtutils: target serves no calls")
	// ErrNotMapped: MapRemote on a queue pair whose transport does not share
	// memory with its peer (tcp, ofi).
	ErrNotMapped = errors.New("dtutils: peer memory cannot be mapped over this transport")
)
