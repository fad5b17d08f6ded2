package rdmo

import "fmt"

// EngineConfig configures an Engine. Zero fields mean their defaults.
type EngineConfig struct {
	// MaxCost bounds what any method may declare as its MaxCost (Ctx
	// units): the engine's longest service time. Default 4096.
	MaxCost int
	// Direct lets initiators on this machine (shm) run the Direct methods
	// of this engine's instances themselves on the mapped memory, after
	// one RDMO that checks their capability and returns where the
	// instance lies (ClientConfig.Direct). It hands such an initiator the
	// key of the instance's whole region, so the capability no longer
	// confines it: enable it only among processes that trust each other.
	// Revocation still works: every direct call checks the instance's
	// revocation word first. Default false.
	Direct bool
}

// DefaultEngineConfig returns the defaults.
func DefaultEngineConfig() EngineConfig { return EngineConfig{}.withDefaults() }

func (c EngineConfig) withDefaults() EngineConfig {
	if c.MaxCost == 0 {
		c.MaxCost = 4096
	}
	return c
}

// VerifyConfig checks c (after defaults).
// maxEngineCost bounds EngineConfig.MaxCost.
const maxEngineCost = 1 << 20

func (c EngineConfig) VerifyConfig() error {
	if c := c.withDefaults(); c.MaxCost < 1 || c.MaxCost > maxEngineCost {
		return fmt.Errorf("%w: MaxCost %d must be in [1, 2^20]", ErrBadConfig, c.MaxCost)
	}
	return nil
}

// ClientConfig configures a Client. Zero fields mean their defaults.
type ClientConfig struct {
	// MaxInflight bounds the client's RDMOs posted and not yet answered;
	// Do and Start wait for room. Default 64.
	MaxInflight int
	// CallBytes is the room for each request and reply record (input or
	// output plus their 24- and 8-byte headers). Default: the process's
	// dtutils CallBytes (4096 unless configured), which it may not exceed.
	CallBytes int
	// Direct runs methods declared Direct in the calling goroutine, on the
	// instance's memory mapped from the target, when the queue pair shares
	// memory with it (shm), the target's engine allows it
	// (EngineConfig.Direct) and the type is registered with the client
	// (Client.Register); otherwise, and for other methods, RDMOs go to the
	// engine as usual. The first RDMO on a capability costs one more round
	// trip (the engine checks it and says where the instance lies).
	// Default false.
	Direct bool
}

// DefaultClientConfig returns the defaults (CallBytes zero: the process's).
func DefaultClientConfig() ClientConfig { return ClientConfig{MaxInflight: 64} }

func (c ClientConfig) withDefaults(procCallBytes int) ClientConfig {
	if c.MaxInflight == 0 {
		c.MaxInflight = 64
	}
	if c.CallBytes == 0 {
		c.CallBytes = procCallBytes
	}
	return c
}

// VerifyConfig checks c (after defaults) for a process whose dtutils
// CallBytes is procCallBytes.
func (c ClientConfig) VerifyConfig(procCallBytes int) error {
	c = c.withDefaults(procCallBytes)
	switch {
	case c.MaxInflight < 1 || c.MaxInflight > 1<<16:
		return fmt.Errorf("%w: MaxInflight %d must be in [1, 2^16]", ErrBadConfig, c.MaxInflight)
	case c.CallBytes < requestHeader+replyHeader || c.CallBytes > procCallBytes:
		return fmt.Errorf("%w: CallBytes %d must be in [%d, %d] (the process's CallBytes)", ErrBadConfig, c.CallBytes, requestHeader+replyHeader, procCallBytes)
	}
	return nil
}
