package rconn

import "errors"

// Sentinel errors of package rconn; returned errors wrap them (errors.Is).
// Reads and writes fail with the net package's errors, as over TCP:
// os.ErrDeadlineExceeded, net.ErrClosed, io.EOF, syscall.EPIPE, each in a
// *net.OpError.
var (
	// ErrHandshake: the peer is not an rconn endpoint, or spoke garbage
	// while setting up.
	ErrHandshake = errors.New("rconn: handshake failed")
	// ErrProtocol: the peer broke the protocol after setup (bytes on the
	// control socket, a corrupt record); the connection is closed.
	ErrProtocol = errors.New("rconn: protocol violation")
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = errors.New("rconn: bad config")
)
