// Package dtutils is verbs-style data transfer without RDMA hardware: the
// DTutils layer of Seriema (DESIGN.md §4, the paper's §4.1). It is usable on
// its own, below dsfabric and riutils.
//
// # Model
//
// A Process holds one process's registered memory (an alloc.Registry) and its
// shared receive queue. A Provider creates QueuePairs over one transport; two
// queue pairs, one per process, are joined by exchanging Endpoint bytes and
// calling Connect on both sides. Operations are posted as WorkRequests and
// complete in order per queue pair:
//
//	OpWrite, OpWriteImm   Local → Remote (one-sided; WriteImm also completes a receive)
//	OpRead                Remote → Local (one-sided)
//	OpFetchAdd, OpCompareSwap   on an 8-byte, 8-aligned remote word; old value → Local
//	OpSend                Local → the next receive posted at the peer (Process.PostRecv)
//	OpNop                 nothing; completes in order (flushing)
//
// A request is signaled or not. Failures always complete (as in verbs);
// successes complete only when signaled. A queue pair allows at most
// MaxUnsignaled unsignaled operations between polled signaled completions and
// refuses more with ErrUnsignaledOverflow, as a device's send queue would.
//
// Remote memory is named by alloc.Locator. Every transport checks the key and
// bounds of every remote access; a refused operation completes with
// StatusRemoteAccess and changes nothing.
//
// # Transports
//
//   - shm (NewSHM): processes on one machine. The poster maps the peer's memfd
//     regions (handed over with SCM_RIGHTS on first use, after the key is
//     proven) and applies the operation itself: the remote CPU does nothing.
//     The shared receive queue is itself shared memory, so Send needs no
//     receiver thread either.
//   - tcp (NewTCP): processes on different machines. One connection per queue
//     pair; an engine goroutine on the target applies operations to
//     registered memory; a writer goroutine batches everything posted since
//     its last write into one syscall.
//   - loop (NewLoopFabric): in one process, for tests and single-process use.
//
// All three give operations the same meaning (one function, apply, defines
// it) and pass one conformance suite.
//
// # Visibility
//
// A write that ends on an 8-byte boundary stores its last word last, with an
// atomic (release) store; a reader that loads that word atomically (acquire)
// and sees the new value sees every byte before it. Higher layers seal their
// records with that word.
//
// # Transmitter: wait-free selective signaling
//
// Transmitter wraps a queue pair for any number of goroutines, signals one
// operation in k, never exceeds MaxUnsignaled, and tags the local memory of
// each operation with its flush number so that alloc.Circular and
// alloc.LinearCircular recycle it once complete (it is an alloc.Tracker). No
// goroutine ever waits for another: each waits only for its own signaled
// completion, polling the completion queue itself.
//
// Over shm and loop a write is a copy that has completed when it returns,
// so Transmitter.Write skips the protocol for it: a bounds and key check
// (against a cached mapping over shm, the registry over loop), the copy, a
// release store of its last word (Publish), and the local memory is
// released at once (alloc.Memory.Done).
// Signaled operations (Read, the atomics, Flush) and the other transports
// keep the protocol.
//
//	proc, _ := dtutils.NewProcess(dtutils.DefaultProcessConfig(rank))
//	prov, _ := dtutils.NewSHM(proc, dtutils.SHMConfig{})
//	qp, _ := prov.NewQueuePair()
//	// send qp.Endpoint() to the peer, receive its endpoint, then:
//	_ = qp.Connect(peerEndpoint)
//	tx, _ := dtutils.NewTransmitter(qp, proc.Config().MaxUnsignaled, dtutils.TransmitterConfig{})
//	ring, _ := alloc.NewLinearCircular(zone, alloc.DefaultCircularConfig())
//	buf, _ := ring.Alloc(64)
//	copy(buf.Bytes(), record)
//	_ = tx.Write(buf, peerLocator) // buf is recycled once the write completed
//
// # Waiting
//
// Poll loops spin briefly, yield a few times, then block on a doorbell that
// producers ring only when a waiter has said it sleeps (a futex in shared
// memory for receive queues, a channel in process). Nothing burns a core
// while idle.
//
// Byte formats crossing processes are in wire.go and docs/wire.md.
package dtutils
