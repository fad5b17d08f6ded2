// Package dtutils is verbs-style data transfer without RDMA hardware: the
// DTutils layer of Seriema (docs/design.md §4, the paper's §4.1). It is usable on
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
//	OpCall                Local → the target's Operator (Process.SetOperator), run by its
//	                      transport engine; its reply → Result (package rdmo's transport)
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
//     receiver thread either. A send first claims one of the receives the
//     target posted (a counter beside the queue), so one beyond them is
//     refused at once; a small one (up to 296 bytes) then travels inside
//     its completion, and the target copies it into the receive it takes
//     when it polls: one cell crosses between the cores, where taking the
//     receive at the sender moved the descriptor's, the buffer's and the
//     completion's lines (docs/wire.md, "Rings"). A consumer that polls
//     with Process.PollRecvInPlace reads such a message where it arrived
//     and leaves the receive posted. Every transport applies sends this way.
//   - tcp (NewTCP): processes on different machines. One connection per queue
//     pair; an engine goroutine on the target applies operations to
//     registered memory; a writer goroutine batches everything posted since
//     its last write into one syscall.
//   - loop (NewLoopFabric): in one process, for tests and single-process use.
//   - ofi (NewOFI, builds with -tags ofi only: cgo and libfabric-dev): the
//     libfabric provider FI_PROVIDER (or OFIConfig.Provider) names: tcp
//     (tcp;ofi_rxm), shm, and on clusters verbs, efa, cxi, psm3. One
//     reliable-datagram endpoint (FI_EP_RDM) per provider; each queue pair
//     runs the tcp transport's frame engine over libfabric messages
//     (fi_send into buffers posted with fi_recv), put back in sequence order
//     at the target, whose progress engine applies every operation after
//     the registry's key and bounds checks. Without the tag NewOFI returns
//     ErrOFIUnavailable and the build needs no C compiler. Debian's
//     libfabric loads the PSM libraries, whose signal handlers replace
//     Go's report of a fault in C code unless IPATH_NO_BACKTRACE=1 and
//     HFI_NO_BACKTRACE=1 are in the environment when the process starts.
//
// All of them give operations the same meaning (one function, apply,
// defines it) and pass one conformance suite.
//
// # ofi: messages by default, fi_write and fi_read on request
//
// By default writes, reads and atomics over ofi are carried as messages
// and applied by the target's progress engine, not posted as
// fi_write/fi_read/fi_atomic, because libfabric's tcp provider cannot keep
// this package's contract for a bad locator by itself: measured with
// libfabric 1.17 and 1.20, tcp;ofi_rxm, an fi_write with a wrong key
// completes successfully at the initiator and writes nothing, and one past
// the end of the region drops the connection, so that every later
// operation fails ("Transport endpoint is not connected"). The message
// path checks at the target, keeps the order of all operations on a queue
// pair by itself, needs no memory registration, and over tcp it is the
// faster path (docs/benchmarks.md): it packs many operations into one
// fi_send, where tcp;ofi_rxm spends a socket send on every fi_write.
//
// OFIConfig.OneSided (or SERIEMA_OFI_ONESIDED=1) sends writes and reads
// as fi_writemsg/fi_readmsg into memory registered with fi_mr_reg, the
// path for RDMA NICs (verbs, efa, cxi), where an fi_write is a doorbell
// and the target's CPU never sees it. It keeps the contract this way:
//
//   - Registration on first use: a region is registered when a peer first
//     asks about it (region question, docs/wire.md), with its own random
//     64-bit key as the requested key (providers with FI_MR_PROV_KEY pick
//     theirs), bound to the endpoint under FI_MR_ENDPOINT, and local
//     buffers too under FI_MR_LOCAL; alloc.Registry.OnRelease
//     deregisters it before its memory is unmapped. Addresses are virtual
//     under FI_MR_VIRT_ADDR, offsets otherwise.
//   - Checks at the initiator: the answer gives the region's length,
//     address and registration key once the locator's key is confirmed; a
//     later locator with another key, or out of range, completes with
//     StatusRemoteAccess without anything sent, and the queue pair stays
//     usable. A locator of a region released after the peer first used it
//     is not checked again: the provider drops the write (on hardware, a
//     remote access error), as with any RDMA key after deregistration.
//   - Order: atomics, sends and calls stay messages. Before its first
//     fi_write or fi_read after messages a queue pair sends a fence (a
//     signaled Nop nobody sees) and waits for its answer, since the target
//     applies messages after they arrive and an fi_write could overtake
//     them; before a message after RMA it waits for the RMA to complete;
//     a write waits for earlier reads (tcp;ofi_rxm orders neither writes
//     nor sends after reads).
//   - Completions in order: tcp;ofi_rxm promises no completion order
//     (comp_order none), under which libfabric's FI_SELECTIVE_COMPLETION
//     could not retire unsignaled operations soundly; so every fi_writemsg
//     and fi_readmsg asks for a completion, consumed inside the queue
//     pair, and the queue pair reports the signaled ones (and the failed
//     ones) in posting order: the Transmitter sees verbs' selective
//     signaling, and its retirement rule holds.
//   - Visibility: a write that ends on an 8-byte boundary goes as two
//     fi_writes, the body and then its last word, ordered by FI_ORDER_WAW
//     (no provider promises placement order within one message,
//     FI_ORDER_DATA), so that a reader polling that word sees the whole
//     write; writes complete once delivered (FI_DELIVERY_COMPLETE).
//   - Atomics stay with the target's engine even where the provider has
//     FI_ATOMIC (libfabric's shm does; tcp;ofi_rxm does not): this package
//     promises that a remote FetchAdd and the target's own atomic adds on
//     the same word never lose an update (TestCrossProcessAtomics), and
//     NIC atomics are in general atomic only against other NIC atomics
//     (verbs' IBV_ATOMIC_HCA). WriteImm stays a message too: it must find
//     a posted receive before it writes anything (StatusReceiverNotReady
//     otherwise), which an fi_writedata cannot check first.
//
// A peer without OneSided answers that it takes messages only, and writes
// to it go as messages. Only tcp;ofi_rxm was exercised here (the whole
// suite runs over it as "ofi-rma"); libfabric's shm provider faults in
// tests that pair two endpoints in one process, whichever path.
//
// Progress is manual, as libfabric's FI_PROGRESS_MANUAL providers need:
// the completion queue is read by threads that poll (Process.Progress, a
// queue pair's completion queue) and, when none does, by the provider's
// engine goroutine, which blocks on the completion queue's wait
// descriptor (FI_WAIT_FD, fi_trywait). A queue pair awaiting answers that
// hears nothing from its peer probes it, and fails after
// OFIConfig.PeerTimeout; a send to a killed peer fails at once.
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
// completion, polling the completion queue itself. An operation that reads
// many local bytes counts as several of the k (TransmitterConfig.SignalBytes,
// 1 MiB per group by default), so that a wide window of small writes does
// not become megabytes of large ones held in flight.
//
// Over shm and loop a write is a copy that has completed when it returns,
// so Transmitter.Write skips the protocol for it: a bounds and key check
// (against a cached mapping over shm, the registry over loop), the copy, a
// release store of its last word (Publish), and the local memory is
// released at once (alloc.Memory.Done). Transmitter.Send likewise delivers
// at once, and a send that finds no receive posted (or one too small)
// returns its error instead of failing the queue pair.
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
// while idle. A waiter announces itself before its last look at the queue,
// and a producer looks for waiters only after a store-load fence behind its
// entry, so that neither can miss the other (TestDoorbellNoLostWakeup).
//
// Byte formats crossing processes are in wire.go and docs/wire.md.
package dtutils
