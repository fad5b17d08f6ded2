package dtutils

import (
	"fmt"
	"log/slog"
	"os"
	"time"
)

// OFIConfig configures the ofi provider (libfabric). The provider exists
// only in builds with the tag "ofi" (cgo, libfabric-dev); elsewhere NewOFI
// returns ErrOFIUnavailable. DefaultOFIConfig fills every field.
type OFIConfig struct {
	// Provider names the libfabric provider, as fi_info lists it: "tcp"
	// (which libfabric layers as "tcp;ofi_rxm"), "shm", "verbs", "efa",
	// "cxi", ... Default: the FI_PROVIDER environment variable, else "tcp".
	Provider string
	// Node is the address (or host name) the endpoint binds to, which
	// peers reach it by: for tcp the interface's IP address. Default "",
	// the provider's first choice (for tcp, the first interface; set
	// FI_TCP_IFACE or this field on machines with several).
	Node string
	// Domain restricts the provider to one domain (a NIC, e.g. "mlx5_0",
	// or for tcp an interface name such as "lo"). Default "": any.
	Domain string
	// MessageSize is the size of each message buffer: frames travel in
	// messages of at most this many bytes. Default 64 KiB; at least 4 KiB.
	MessageSize int
	// ReceiveBuffers is how many message buffers are posted for incoming
	// messages, and SendBuffers how many outgoing messages (and, with
	// OneSided, how many fi_writemsg/fi_readmsg) may be in flight; a post
	// beyond it makes progress until one completes. Default 64 each; at
	// least 2.
	ReceiveBuffers, SendBuffers int
	// PeerTimeout bounds how long a queue pair waits for answers while it
	// hears nothing at all from its peer, probes included: then the peer
	// is taken for dead and the queue pair fails with ErrConnectionLost.
	// Over tcp a killed peer is noticed sooner, when a send fails; this
	// catches a peer whose host is gone. Default 5 s. Probes are sent and
	// answered by a goroutine of their own every tenth of PeerTimeout, so
	// a peer busy in a long Operator still answers them and its caller's
	// call waits for the reply (TestOFISlowOperatorNotLost: PeerTimeout
	// 200 ms, an Operator of 800 ms).
	PeerTimeout time.Duration
	// OneSided sends writes and reads as libfabric RMA (fi_writemsg,
	// fi_readmsg) straight into the peer's memory, registered with
	// fi_mr_reg on first use, instead of as messages the peer's engine
	// applies; atomics, sends and calls keep the messages. The initiator
	// checks keys and bounds (it asks the peer about each region once), so
	// a bad locator still completes with StatusRemoteAccess and changes
	// nothing. A queue pair waits for its outstanding operations when it
	// switches between the two paths, and a write waits for earlier reads
	// (tcp;ofi_rxm orders neither). The peer needs no setting: a peer
	// without it answers that it takes messages only. Locators of a
	// region released after a peer first used it are not checked again:
	// a write through one is dropped by the provider, as on RDMA hardware,
	// and as there, a region must not be released while a peer's write
	// into it is under way (over tcp the provider would be copying into
	// unmapped memory).
	// Default: true when the environment variable SERIEMA_OFI_ONESIDED
	// is "1" (so that a launcher can choose it for every process, as
	// FI_PROVIDER chooses the provider), else false: the message path.
	// See docs/wire.md and the dtutils package doc.
	OneSided bool
	// Logger receives connection-level events; default slog.Default().
	Logger *slog.Logger
}

// DefaultOFIConfig returns the defaults (the provider from FI_PROVIDER).
func DefaultOFIConfig() OFIConfig {
	prov := os.Getenv("FI_PROVIDER")
	if prov == "" {
		prov = "tcp"
	}
	return OFIConfig{Provider: prov, MessageSize: 64 << 10, ReceiveBuffers: 64, SendBuffers: 64, PeerTimeout: 5 * time.Second, OneSided: os.Getenv("SERIEMA_OFI_ONESIDED") == "1"}
}

// withDefaults fills zero fields from DefaultOFIConfig.
func (c OFIConfig) withDefaults() OFIConfig {
	d := DefaultOFIConfig()
	if c.Provider == "" {
		c.Provider = d.Provider
	}
	if c.MessageSize == 0 {
		c.MessageSize = d.MessageSize
	}
	if c.ReceiveBuffers == 0 {
		c.ReceiveBuffers = d.ReceiveBuffers
	}
	if c.SendBuffers == 0 {
		c.SendBuffers = d.SendBuffers
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = d.PeerTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// VerifyConfig checks c (after defaults).
func (c OFIConfig) VerifyConfig() error {
	switch {
	case c.MessageSize < 4<<10 || c.MessageSize > 64<<20:
		return fmt.Errorf("%w: ofi MessageSize %d must be in [4 KiB, 64 MiB]", ErrBadConfig, c.MessageSize)
	case c.ReceiveBuffers < 2 || c.ReceiveBuffers > 1<<16:
		return fmt.Errorf("%w: ofi ReceiveBuffers %d must be in [2, 65536]", ErrBadConfig, c.ReceiveBuffers)
	case c.SendBuffers < 2 || c.SendBuffers > 1<<16:
		return fmt.Errorf("%w: ofi SendBuffers %d must be in [2, 65536]", ErrBadConfig, c.SendBuffers)
	case c.PeerTimeout < 10*time.Millisecond:
		return fmt.Errorf("%w: ofi PeerTimeout %v must be at least 10 ms", ErrBadConfig, c.PeerTimeout)
	}
	return nil
}
