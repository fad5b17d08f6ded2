// Package rdmo implements Remote Direct Memory Operations (seed 001,
// "Beyond MPI", §3): a request that runs a short, bounded sequence of
// reads, writes and atomics on an abstract data type instance at the
// remote process, in one round trip, without involving the remote
// application's threads.
//
// # Model (§3.1)
//
// The owner of some registered memory runs an Engine, registers types
// (a name and methods, each declaring its maximum input, output and cost)
// and creates instances over its memory; Create returns a Capability (the
// process, an instance id and a random 64-bit secret). The owner hands the
// capability to whoever may use the instance (through any higher-level
// facility: a dsfabric or riutils call carrying MarshalBinary's bytes) and
// may Revoke it at any time: Revoke returns once the RDMOs the engine was
// running on the instance have finished, and the memory is the owner's
// again; releasing the memory revokes the instance the same way, so later
// RDMOs are refused rather than run on unmapped memory. An initiator's
// Client runs
//
//	code, output, err := client.Do(ctx, capability, method, input)
//
// synchronously, or Start(ctx, capability, method, input, tag) and later
// Poll or Wait for Results (the completion queue of results). The
// capability, method and input bounds are checked on every request.
//
// # Where methods run
//
// An RDMO travels as one dtutils call (OpCall) on a queue pair the Client
// owns, and the Engine is its process's dtutils.Operator, so it runs
// where the transport's engine runs, never on an application thread:
//
//   - tcp and ofi: the connection's (endpoint's) engine applies it where it
//     applies one-sided writes (or a thread polling that process drives
//     it); a request and its reply are one frame each way.
//   - shm: the initiator queues it in the target's call area (shared
//     memory) and the target's call engine goroutine runs it and answers in
//     place; the initiator waits for the answer inside Post.
//   - loop: the poster runs it.
//
// The queue of incoming operations is dtutils' ProcessConfig.CallSlots
// (default 64): an RDMO beyond it is refused with ErrBusy and did not run.
//
// # Bounded methods
//
// A method's body sees its instance only through a Ctx, whose every access
// is bounds-checked and charged against the method's declared MaxCost (one
// unit per word access, per started 64 bytes copied, per Step). A method
// that leaves its instance is stopped with CodeFault, one that exceeds its
// budget with CodeOverBudget; a panic is CodeFault; the engine goes on.
// Registration refuses methods whose declared bounds exceed the engine's
// MaxCost or the process's CallBytes. What cannot be checked in Go is that
// a body does not block outside its Ctx: the implementor certifies it, as
// the paper asks. Bodies must be safe to run concurrently (tcp runs one
// RDMO per connection at a time, so several at once per process).
//
// # The five RDMOs of §3.3
//
// RegisterBuiltins registers them, each with its layout (docs/wire.md), an
// Init function for the owner and a Client helper:
//
//   - SlottedAppend on a SlottedPage: reserve a slot and the tuple's bytes
//     with one compare-and-swap, write the tuple, mark the slot valid.
//   - ConditionalGather on VersionChains: walk a bucket's chain of
//     versions and return those of a key visible at a timestamp (at most
//     MaxGather, walking at most MaxHops); Insert pushes a version.
//   - SignaledRead on a LockedRecord: take the lock with a few
//     compare-and-swaps, copy the data, free the lock (CodeLocked when it
//     stays held); LockedWrite replaces the data under the lock.
//   - WriteAndSeal on a SealedBuffer: write the data, then the seal word.
//   - ScatterAndAccumulate on an Accumulator: add each (key, delta) pair to
//     the accumulator its key's lookup entry names.
//
// RDMA runs the one-sided equivalents of the same operations (the paper's
// Fig. 1(b), 6, 7 and 8) with a dtutils.Transmitter on the same layouts,
// counting their messages; `mctsbench rdmo` measures both.
//
// # Failures
//
// Engine codes come back as the code and its error: CodeBadCapability /
// ErrBadCapability (unknown, revoked or wrong secret), CodeBadMethod,
// CodeInputTooLarge, CodeOverBudget, CodeFault, CodeMalformed. Transport
// failures are errors: ErrBusy (queue full), ErrNoEngine (the target runs
// no engine), ErrTargetLost (the connection broke: the RDMO may or may not
// have run), ErrNoRoute (no queue pair to the capability's process).
// Methods' own codes (CodeUser and above, e.g. CodePageFull) come with a
// nil error. docs/reliability.md lists them with their tests.
//
// # Direct mode: the initiator runs the method (shm)
//
// The paper lets the initiator itself apply a lock-free method on the
// mapped memory when both share a machine. With EngineConfig.Direct on the
// target, ClientConfig.Direct on the initiator and the type registered with
// the client too (Client.Register; RegisterBuiltins takes either), a method
// declared Direct runs in the calling goroutine over queue pairs that share
// memory (dtutils.CanMapRemote: shm, and loop):
//
//   - The first RDMO on a capability sends the engine a describe request
//     (method 0xFFFF), which checks the capability like any RDMO and answers
//     where the instance and its revocation word lie (docs/wire.md); the
//     client maps both (dtutils.MapRemote) and caches them per capability.
//   - Every later call checks that the target is alive and the revocation
//     word still holds the instance's id (Revoke and Close clear it), then
//     runs the body through the same Ctx, with the same bounds and codes.
//     No message is sent: `mctsbench rdmo` measures it (`rdmo-direct`)
//     beside the engine and the one-sided sequences.
//   - Methods not declared Direct (LockedRecord's, which take a lock an
//     initiator's death would leave held), engines that do not allow it,
//     types the client does not know and transports that do not share
//     memory all go to the engine as before; Client.Stats says where each
//     RDMO ran.
//
// The price is isolation: a direct initiator holds the key of the
// instance's whole region, so the capability no longer confines it; enable
// it among processes that trust each other. A direct method that passed
// the revocation check finishes even if Revoke comes meanwhile (Revoke
// waits only for the engine's own runs), on the initiator's time: an
// initiator descheduled mid-method finishes later than the method's cost
// suggests. Start in direct mode runs the method at once and queues its
// Result for Poll.
//
// # Not built
//
// Capabilities are handed out by the application; no dsfabric call does
// it yet.
package rdmo
