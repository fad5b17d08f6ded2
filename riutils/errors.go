package riutils

import (
	"errors"
	"fmt"
)

// Sentinel errors of package riutils; returned errors wrap them.
var (
	// ErrFull: the destination has not consumed enough and the messenger
	// may not grow (policy Fail).
	ErrFull = errors.New("riutils: messenger full")
	// ErrTooLarge: the call does not fit one chunk.
	ErrTooLarge = errors.New("riutils: call larger than a chunk")
	// ErrProtocol: a chunk holds bytes no correct sender writes; the
	// messenger from that sender is stopped.
	ErrProtocol = errors.New("riutils: protocol error")
	// ErrBadConfig: a Config field is out of range, or a Poller was asked
	// for a thread that has one already.
	ErrBadConfig = errors.New("riutils: bad config")
	// ErrNotBound: the Process is not bound to a started fabric yet.
	ErrNotBound = errors.New("riutils: not bound to a fabric")
	// ErrClosed: the messengers were shut down, or their fabric closed,
	// or a Synchronizer or RemoteObject given to a call was closed.
	ErrClosed = errors.New("riutils: closed")
	// ErrKept: Shutdown was asked of a messenger whose destination still
	// has calls kept by RetryAsync or an Aggregator; flush them first.
	ErrKept = errors.New("riutils: calls still kept")
	// ErrNoMessenger: RequestShutdown named a thread that has no open
	// messenger to this one.
	ErrNoMessenger = errors.New("riutils: no messenger")
)

// errSyncClosed is what a call or Wait given a closed Synchronizer
// returns.
var errSyncClosed = fmt.Errorf("%w: the synchronizer was closed (its counter may count another's calls by now)", ErrClosed)

// errObjectClosed is what CallReturn given a closed RemoteObject returns.
var errObjectClosed = fmt.Errorf("%w: the RemoteObject was closed", ErrClosed)

// errFabricClosed is what Messengers, Aggregators and Synchronizers kept
// past their fabric's Close return: their memory is unmapped.
var errFabricClosed = fmt.Errorf("%w: the fabric was closed", ErrClosed)
