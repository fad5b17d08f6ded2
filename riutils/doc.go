// Package riutils is one-sided remote invocation (docs/design.md §6, the paper's
// §4.4): a thread writes a call straight into memory owned by the
// destination thread, which finds complete calls by polling its own memory
// and runs them in order.
//
// # Messengers
//
// A Messenger joins one sending thread to one destination thread; the two
// directions between two threads are two symmetrical messengers. Messengers
// (one per thread, the paper's RDMAMessengerGlobal) creates them on first
// use:
//
//	h := dsfabric.NewHandlers() // the same handlers, in the same order, in every process
//	work, _ := h.Register("work", func(c *dsfabric.Call, args []byte) ([]byte, error) { ... })
//	job, _ := riutils.Start(ctx, dsfabric.Config{Procs: 2, Handlers: h}, riutils.DefaultConfig(),
//		func(w *dsfabric.Worker, m *riutils.Messengers) { // on each worker thread
//			m.Call(dst, work, args) // one-sided: written into dst's memory
//			riutils.Serve(w, m)     // run the calls written to this thread
//		})
//	defer job.Close()
//
// Start is NewProcess, dsfabric.Start and Bind in one call, and hands each
// worker its messengers once bound. It returns when every worker thread of
// the process has them, and fails (closing the fabric) when one cannot: no
// job starts with a thread that takes no calls. The package Example runs
// it.
//
// Setting a messenger up takes a round trip to the destination's process
// (its first chunks are allocated there by a service call, and mapped here
// where the transport shares memory), 0.5–4 ms on a busy 2-core machine.
// A job whose first calls are timed or latency-bound sets them up ahead
// with Messengers.Open (mcts.Start does, for every thread of the job).
//
// # Protocol
//
// The sender asks the destination's process, with a service call the
// destination thread takes no part in, for ChunksPerAllocation chunks of
// ChunkSize bytes; they are zeroed, carry the sender's identity and the
// locator of its feedback word, and are announced to the destination thread
// through its incoming-memory map. The sender then writes sealed records
// (header, arguments, buffer, seal) one after the other with one-sided
// writes; the seal is the last word written, so a record whose seal matches
// its header is complete. When a record does not fit, the sender finishes
// the chunk by writing its producer word (final offset, rotate bit) and moves
// to the next chunk of its ring.
//
// The destination parses records in place, runs them, and when a chunk is
// finished zeroes it and writes its cumulative consumed count into the
// sender's feedback word: the sender never reads remote memory. A chunk is
// reused once the feedback says it was consumed; if the next one is not, the
// sender allocates more (up to MaxChunks), inserts them after the current
// chunk, and sets the grow bit of the rotation so the destination inserts its
// copies at the same place: both rings stay symmetrical. At MaxChunks the
// Policy applies: Fail returns ErrFull, Retry waits (polling the caller's own
// incoming calls meanwhile), RetryAsync keeps the call locally and a helper
// goroutine sends it, in order, when room appears.
//
// # Aggregator
//
// An Aggregator batches calls on top of a thread's Messengers, in a mode
// chosen at run time. Trad builds a batch of calls in registered memory, with
// room for the outer record's header and seal reserved, and writes it as one
// record when it holds FlushSize bytes or on Flush: no copy. Ovfl sends each
// call straight through and keeps calls locally only while the messenger
// cannot progress, up to MaxExceeding bytes, batching the kept calls as Trad
// does (the paper's local aggregation of exceeding calls: one record per
// FlushSize bytes of them, built in registered memory). The kept batches go
// first, in order, as soon as the messenger has room again, the batch being
// filled with them. At the bound a call waits for room under policy Retry
// and fails with ErrFull under Fail and RetryAsync.
//
// A record no correct sender can write (a length overrunning the chunk, more
// argument bytes than payload, another sender's identity) stops that
// messenger with ErrProtocol (Messengers.Err); the others go on. A call
// larger than a chunk fails with ErrTooLarge before anything is written.
//
// # Call and return, shutdown
//
// CallReturn writes the call one-sided and has the callee write the result
// into a RemoteObject (a reply slot in the caller's registered memory) with
// one one-sided write; the caller waits on the slot. Shutdown ends a
// messenger from the sender's side after its last call; RequestShutdown asks
// from the receiver's side, and the sender's next call completes the
// handshake and fails with ErrClosed.
//
// Messengers, Aggregators and Synchronizers live in the fabric's registered
// memory: once the fabric closes, their calls return ErrClosed (an
// Aggregator's Flush says so when calls it held are lost) and Poll runs
// nothing. A Poller's Serve returns when the fabric closes; the Poller
// keeps the memory mapped until it is collected, so that a Poll under way
// at the close reads mapped chunks.
//
// Broadcast and BroadcastBuffer make one one-sided call to every worker
// thread of the job.
//
// # Table 1, one-sided
//
// Every primitive of the paper's Table 1 has a one-sided form here:
//
//	Call, CallBuffer   the buffer travels inside the record
//	CallBufferWrite    one-sided write of a registered buffer into the
//	                   destination's registered memory, then the record
//	                   (same queue pair, in order: the handler sees the bytes)
//	CallBufferRead     the destination reads the caller's registered buffer
//	                   into its own memory, then runs the handler
//	CallReturn         the result comes back by one write into a RemoteObject
//	                   (RemoteValue[T] decodes it)
//	Broadcast(Buffer)  one call per worker thread of the job
//	CallSync           any call with an Executed notification
//
// A Synchronizer is a counter in the caller's registered memory: each callee
// decrements it with a one-sided FetchAdd after its handler ran, and Wait
// polls it (running the thread's own calls meanwhile). No message comes back.
//
// # Who polls
//
// The receiving thread polls its own messengers (Poll), or a Poller — a
// process-level consumer driven by one goroutine — runs the calls of some
// threads on their behalf (NewPoller): handlers then run on the Poller's
// goroutine with Call.Dst naming the thread, and the thread's own Poll does
// nothing. A Poll from inside a handler runs nothing: the
// records being run must not move. A call made from a handler that finds its
// messenger full therefore waits without running this thread's calls; prefer
// an Ovfl Aggregator or RetryAsync in handlers, or queue the work and send it
// from the thread's loop (package mcts does).
//
// RetryAsync keeps the calls that find their messenger full in ordinary
// memory and a helper goroutine sends them as room appears. While calls to a
// destination are kept the helper alone drives that messenger, with its own
// registered memory; later calls join the queue, and the thread takes the
// messenger back when the queue is empty: the hot path takes no lock.
//
// Byte formats are in wire.go and docs/wire.md.
package riutils
