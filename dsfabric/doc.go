// Package dsfabric is the distributed-system fabric of Seriema for Go
// (docs/design.md §5, the paper's §3 and §4.3): it forms a job of processes,
// names their threads, and carries send-based ("no-setup") calls between
// them. It is usable on its own, without riutils.
//
// # Starting a job
//
// Every process of the job runs the same program and calls Start, the one
// entry point for every launcher:
//
//   - no launcher: the process is rank 0 and re-executes its own binary
//     Config.Procs−1 times (self-launch), with a fresh per-job secret;
//   - mpirun (Open MPI), srun (Slurm) or a PMI launcher: rank and size come
//     from OMPI_COMM_WORLD_RANK/SIZE, SLURM_PROCID/SLURM_NTASKS or
//     PMI_RANK/PMI_SIZE. When every rank is on one machine the coordinator is
//     a unix socket named after the launcher's job ID in a private directory;
//     across machines set SERIEMA_COORD=host:port (rank 0's address) and
//     SERIEMA_JOB_TOKEN to a shared secret.
//
// Rank 0 coordinates: hellos carry the job token (compared in constant time;
// a wrong one is refused and logged while the job goes on forming), rank 0
// publishes the table of machines, every pair of processes connects a queue
// pair, and a barrier ends Start. A rank that never arrives fails Start
// after Config.BootstrapTimeout with an error naming it.
//
// # Transports, per pair
//
// The transport of each pair is chosen here and nowhere else. Unless
// Config.Transport forces one, a pair uses shm only when shared memory is
// provably reachable both ways: each rank's hello publishes a probe (its
// shm socket and a small region holding a random nonce), and each rank
// probes the peers that claim its machine (same host name and boot ID) by
// dialing that socket, mapping the region by its key and checking the
// nonce. Two containers or network namespaces of one host with separate
// file systems fail the probe and use tcp; rank 0 makes a pair shm only when
// both of its probes passed, so both sides agree. Fabric.Transport reports
// the choice.
//
// tcp listens on Config.Listen or SERIEMA_LISTEN when set; otherwise on
// every interface when the coordinator is tcp (SERIEMA_COORD=host:port),
// advertising the address the rank reached the coordinator from — which
// its peers can reach — and on loopback when the coordinator is a unix
// socket (one machine).
//
//	h := dsfabric.NewHandlers()
//	greet, _ := h.Register("greet", func(c *dsfabric.Call, args []byte) ([]byte, error) {
//		return append([]byte("hello "), args...), nil
//	})
//	f, err := dsfabric.Start(ctx, dsfabric.Config{Procs: 4, ThreadsPerProcess: 2, Handlers: h})
//	if err != nil { ... }
//	defer f.Close()
//	me, _ := f.Names().Thread(f.Rank(), 0)
//	reply, err := f.CallReturn(ctx, me, dsfabric.ThreadID(5), greet, []byte("world"))
//
// # Names
//
// A ThreadID is rank × ThreadsPerProcess + thread rank; Names converts
// between them and knows which ranks share a machine. Worker threads are
// goroutines locked to OS threads (pinned with Config.Pin and
// Config.Placement); service threads run service calls, and take
// send-based messages from the process's shared receive queue while no
// worker does (see "Send-based calls" below).
//
// # Handlers
//
// A handler is registered by name; its HandlerID is the name's 32-bit FNV-1a
// hash, so every process of the same binary agrees without an exchange, and
// two names with one hash are refused at registration. Raw handlers take and
// return bytes (no allocation). RegisterTyped and CallReturnTyped encode Go
// values with, in order: msgp-generated MarshalMsg/UnmarshalMsg (detected by
// their methods), encoding.BinaryAppender/BinaryUnmarshaler, msgpack.
//
// # Calls (the paper's Table 1, send-based)
//
//	Call             run h on a worker thread (fire and forget)
//	CallService      run h on a service thread of a process
//	CallBuffer       the buffer travels inside the call
//	CallBufferWrite  one-sided write of the buffer into a destination buffer, then the call
//	CallBufferRead   the destination reads the buffer from the source, then runs h
//	CallReturn       run h and wait for its result
//	Broadcast        run h on every worker thread, along a binomial tree of depth ⌈log2 P⌉
//	BroadcastBuffer  Broadcast with a buffer
//
// A Synchronizer counts calls down when they are transmitted (Transmitted)
// or when the callee ran them (Executed, a notification back); Wait,
// WaitContext, C and a callback observe it. Once at zero it is done: a
// call given it then fails with ErrSyncDone, and Add panics (raise the
// count with Add before the calls, not after; make a new one to reuse). Calls to a worker run on that
// worker, in arrival order, when it polls (Worker.Poll; the default worker
// body serves forever).
//
// # Failures
//
// A call larger than Config.MaxMessage fails with ErrTooLarge before anything
// is sent. A call to an unknown handler returns an error to a caller that
// waits (CallReturn), notifies an Executed synchronizer anyway, and is
// otherwise counted (UnknownHandlerCalls) and logged; the receiver keeps
// running. A process that dies closes its sockets: every other process learns
// it within milliseconds (from rank 0, or from the broken connection), calls
// to it return ErrRankDead naming it, and a self-launched job's rank 0 gets
// an error naming the rank from Close, so its main can exit non-zero.
// Self-launched ranks die with their launcher (PR_SET_PDEATHSIG); Ctrl-C
// reaches every rank through the terminal's process group.
//
// # Send-based calls
//
// No message is acknowledged one by one. Each rank may have credits
// messages unconsumed at a process: max(RecvBuffers, ranks) posted receive
// buffers split evenly among the ranks. A call is built in a send buffer
// and sent (through a dtutils.Transmitter, selectively signaled); the
// sender waits only when it has used all its credits, until the receiver
// writes back (one-sided, into a word the sender named in its first
// message, a quarter of the credits at a time) how many it consumed.
//
// Arrivals are routed — copied into the inbox of the thread they are for,
// the buffer reposted at once; a call of up to dtutils.InlineMax bytes is
// copied from its completion and takes no buffer at all
// (dtutils.Process.PollRecvInPlace) — by whichever thread gets there first: a
// worker when it polls (Worker.Poll routes, then runs its own inbox), a
// worker sleeping in Serve or a caller awaiting a reply (both sleep on the
// receive queue's doorbell, so that an arrival wakes them directly), or,
// while no worker polls (all stuck in handlers, or bodies that stopped
// polling), the service thread. A worker blocked in a send for want of
// credits therefore never stops its process from consuming. One round of
// routing takes at most about as many messages as there are receive
// buffers (Config.RecvBuffers): credits go back during the round, and a
// sender as fast as the router would otherwise keep it going, its calls
// piling up in the inboxes while the routing thread runs none of its own.
// A worker that routes queues its own calls without the inbox's lock. A
// handler that polls its own worker routes but runs nothing: the calls
// behind it run after it returns, in order.
// Handlers get their arguments from the inbox (valid until they return)
// and the thread's own *Call (valid until they return). docs/wire.md has
// the credit hello.
//
// The fast path for bulk calls is one-sided (package riutils).
//
// Byte formats crossing processes are in wire.go and docs/wire.md.
package dsfabric
