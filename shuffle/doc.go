// Package shuffle moves tuples between the threads of a job the way
// parallel databases do it (seed 004, "An RDMA-aware data shuffling
// operator"; seed 000, asynchronous multi-stage shuffles): communication
// endpoints, transmission groups, and the SHUFFLE and RECEIVE operators
// over them, on dtutils queue pairs.
//
// # Endpoints (seed 004 §4.2)
//
// A Sender is a SEND endpoint: Acquire hands out a registered buffer of
// Config.BufferBytes (the batching threshold), PutData transmits it to one
// or more destinations and takes it back; Discard returns an unused one.
// A Receiver is a RECEIVE endpoint: GetData returns the next filled buffer
// of any source (In, with its source and whether it was that source's
// Depleted one), Release hands it back. Both are safe for concurrent use,
// so threads may share one endpoint (the single-endpoint configuration,
// SE) or each have their own (multi-endpoint, ME).
//
// Wiring: every send endpoint is connected to every receive endpoint by a
// pair of connected queue pairs (loop within a process, shm, tcp or ofi
// between processes). The receiver's Offer(i) describes its ring for
// source i; the sender's Attach(d, qp, offer) returns its own description,
// which the receiver's Attach(i, qp, ...) takes. The descriptions are the only
// thing to exchange out of band (docs/wire.md, "shuffle"). Where the
// transport shares memory (shm, loop), Attach also maps the peer memory
// the endpoint's one-sided operations will touch (a sender the
// receiver's ring, a receiver the sender's credit word and buffers), so
// that a stream's first operation asks the peer's process for nothing.
//
// # Designs (seed 004 §5)
//
//   - WR: the sender writes the buffer into the next slot of the
//     receiver's ring for it with one-sided writes, then the slot's header
//     (whose last word, the sequence number, lands last); the receiver
//     polls the headers (sealed-buffer polling).
//   - RD: the sender writes only a descriptor (the buffer's locator and
//     the header) into the slot; the receiver pulls the data with a
//     one-sided read, posting the reads of the buffers that have arrived
//     behind the one it takes (up to 32) so that their round trips
//     overlap. Where the sender's memory is mapped into the
//     receiver's process (shm, loop) the read is no copy: In.Data is the
//     sender's buffer itself (dtutils.MapRemote, after the same checks a
//     read makes), which the sender keeps until the receiver releases it,
//     as it does for a read; a broadcast buffer is then written once and
//     copied nowhere. Config.NoMap keeps the copy.
//   - SR: two-sided. The receiver's buffers are posted receives (Depth
//     per source) of its process's shared receive queue; the sender sends
//     each buffer with one Send whose immediate carries its source index
//     and flags; the receiver posts a released buffer again and returns
//     credits in messages (Sends), batched to a quarter of the window and
//     flushed before it waits. An SR endpoint needs a dtutils.Process of
//     its own (every receive completion of it is taken as the
//     endpoint's); Wiring makes them.
//
// In all three, flow control is the receiver's credit: as buffers are
// released (each with every earlier one of its source), the receiver
// gives the sender its count of consumed buffers and its window (WR, RD:
// written into a word of the sender's memory; SR: sent), batched to a
// quarter of the window and flushed before it waits (over tcp a credit
// per buffer cost a frame and its answer each way). A sender keeps at
// most a window of buffers in flight per
// connection: past that, PutData and Acquire wait (back-pressure; nothing
// spills, nothing is dropped). While waiting, both ends drive the transport's progress, back
// off to sleeping, and probe the connections they wait on every 20 ms: a
// peer that died makes them fail with ErrPeerLost instead of hanging.
//
// # Windows: fixed or adaptive (seed 004 §6)
//
// By default the window is Config.Depth, which defaults to
// DefaultWindowBytes (2 MiB) of buffers per connection: about a
// millisecond of data at the rates of one machine, so that a receiver that
// loses its core for a scheduling quantum does not put its sender to
// sleep. With Config.Adaptive the receiver
// moves each source's window between 1 and Depth with its consumers'
// pace: it doubles when a consumer waited for a buffer the window held
// back (the sender marks buffers it had to wait credit for), and over an
// epoch of a window's worth of buffers without such a wait it gives back
// all but one of the spare buffers it always found waiting, down to one
// more than the largest window that starved the consumers (shrinking
// back to a size that starved them only buys the next stall). The seed
// moves registered buffers between a pool and the connections; here the
// ring is registered at Depth once and the window bounds what is in
// flight, which is what decides the throughput (Receiver.Stats counts the
// moves; mctsbench shuffle -buffers fixed,adaptive measures both in one
// run, interleaved).
//
// # Operators (seed 004 §4.3)
//
// Shuffle (one per sending thread, from Sender.NewShuffle) appends each
// record to the output buffer of its transmission group and transmits a
// buffer when the next record does not fit. Groups express the patterns:
// Repartition(n) (group g is destination g; the caller's hash picks the
// group), Broadcast(n) (one group of every destination), or any sets
// (multicast). The endpoint's last Shuffle to Close (NewSender's users)
// sends every destination a Depleted buffer and waits until everything is
// consumed. Receive (one per receiving thread) returns records one at a
// time until every source is depleted (io.EOF).
//
// Close the endpoints before their process. If the process (or the job)
// closes first, the endpoints keep its memory mapped (dtutils.Process.Hold)
// so that a buffer already handed out stays readable, every call,
// blocked ones included, returns ErrClosed (or ErrPeerLost when the queue
// pairs went first), and the endpoint's Close gives the memory back,
// reporting ErrClosed unless its stream had ended. An endpoint dropped
// without Close gives it back when the garbage collector finds it; a
// buffer from GetData is valid only while its Receiver is reachable.
//
// Records in a buffer are a u32 length and the bytes, back to back.
// TypedShuffle and TypedReceive move values of any type instead, through a
// Codec (Append to encode, Decode to check and decode: a record the codec
// refuses is an ErrBadBuffer error, and the stream goes on).
//
// # Wiring and multi-stage plans (seed 000)
//
// In a dsfabric job, Wiring.Connect wires one stage: every process's send
// endpoints to every process's receive endpoints, over queue pairs of
// their own. A plan of several shuffles instead makes a Mesh once (one
// queue pair per pair of processes, loop within one) and wires each stage
// over it with Mesh.Stage: the stages live at once, multiplexed on the
// same connections (Share), each with its own rings, credits, windows
// and end of stream, so a slow stage holds back only its own senders.
// SR stages need processes of their own and are wired with Connect.
//
// Between two processes the connections use the transport dsfabric chose
// for that pair (Fabric.Transport): shm, tcp (configured as
// Fabric.TCPConfig), or ofi in builds with -tags ofi (libfabric, as
// Fabric.OFIConfig: the same provider, one-sided path and address).
package shuffle
