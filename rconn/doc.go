// Package rconn is sockets over the transport (seed 003, "Network Sockets
// over RDMA"): a net.Conn and a net.Listener that any Go client and server
// use unchanged — gRPC, net/rpc, net/http, database drivers — whose bytes
// move through shared-memory rings when both ends are on one machine.
//
// # Use
//
//	ln, _ := rconn.Listen("unix", "/run/app.sock") // or "tcp", ":7000"
//	go grpcServer.Serve(ln)
//
//	conn, _ := rconn.DialContext(ctx, "unix", "/run/app.sock")
//	// gRPC: grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
//	//         return rconn.DialContext(ctx, "unix", a) })
//	// net/http: http.Transport{DialContext: ...}; net/rpc: rpc.NewClient(conn)
//
// # Setup
//
// As in the seed, a real socket (unix or TCP) connects first, and the two
// ends agree over it, by a handshake (docs/wire.md, "rconn"), whether to
// move the data. Each end creates the ring it will read (a memfd of
// Config.RingBytes, owner-only, with a random key in its header) and
// names it in its hello: its process ID and the ring's descriptor. When
// both ends report the same machine (host name and boot ID), each opens
// the other's ring through /proc/<pid>/fd/<fd> (the kernel checks that it
// may) and checks its key; only if both succeed does the connection move
// to the rings (the returned net.Conn is a *Conn). Otherwise — another
// machine, another PID namespace, Config.DisableRings — the socket itself
// is returned, and it is plain TCP or unix. The rings' descriptors are
// closed once the handshake ends, so the memory dies with the last mapping
// of it: nothing is left behind in /dev/shm, even when a process is
// killed.
//
// The socket stays open as the control channel and the death signal: it
// carries nothing after the handshake, so its end means the peer closed or
// died (a blocked Read returns what was written and then io.EOF; a Write
// fails with EPIPE), and any byte on it is a protocol violation
// (ErrProtocol).
//
// # Data path
//
// A record is a validity word (length and a tag of its position) and the
// payload, the word stored last with a release store: the reader, polling
// that word, sees the whole record once it sees the word. A record is at
// most a quarter of the ring; larger writes are split. The reader copies
// the payload out and publishes how far it has read, which returns the
// space to the writer; no system call is made per message. A blocked
// reader (or a writer waiting for space) polls for Config.Spin, then parks
// on a doorbell that the other side rings only when it sees it asleep: a
// pipe in Go's network poller, so an idle connection burns no core and
// holds no OS thread, as a socket's reader would. While it polls it yields
// the processor between polls after the first 500 ns: a program that
// hands each message to another goroutine (gRPC, net/rpc) has that
// goroutine readied on the reader's processor, where Go runs it next, and
// a reader that kept spinning there held it up (gRPC unary p50 over rconn
// 168 µs, 1.3 × a unix socket's, with 12.5 µs of unyielded polling; 29 µs,
// 0.23 ×, yielding after 500 ns; net/rpc 34 → 5 µs).
//
// Read, Write, deadlines (os.ErrDeadlineExceeded, including for calls
// already blocked), Close (net.ErrClosed for blocked calls) and CloseWrite
// (half-close: the peer reads io.EOF) behave as on *net.TCPConn; x/net's
// nettest.TestConn passes (bench/peers).
package rconn
