package shuffle

import (
	"errors"
	"fmt"
)

// Sentinel errors of package shuffle; returned errors wrap them.
var (
	// ErrBadConfig: a configuration field is out of range.
	ErrBadConfig = errors.New("shuffle: bad config")
	// ErrBadOffer: an endpoint description from a peer does not decode, or
	// belongs to another design or buffer size.
	ErrBadOffer = errors.New("shuffle: malformed endpoint description")
	// ErrPeerLost: a peer endpoint's process died or its connection broke;
	// the stream is incomplete.
	ErrPeerLost = errors.New("shuffle: peer lost")
	// ErrClosed: the endpoint was closed (or, sending, already Depleted).
	ErrClosed = errors.New("shuffle: endpoint closed")
	// ErrTooLarge: a record does not fit in one buffer.
	ErrTooLarge = errors.New("shuffle: record larger than a buffer")
	// ErrBadBuffer: a received buffer is malformed (its records overrun it,
	// or an RD descriptor names memory its sender does not offer), or a
	// buffer was released twice or out of turn.
	ErrBadBuffer = errors.New("shuffle: malformed or misused buffer")
)

// errReceiverClosed is what a closed Receiver's GetData and Release
// return: its rings went back with Close.
var errReceiverClosed = fmt.Errorf("%w: the receiver was closed", ErrClosed)
