// Command peers measures the Go RPC systems Seriema for Go is compared with
// (docs/design.md §9), over a unix socket between two processes, with the sizes
// and the JSON schema of `mctsbench micro` and `mctsbench latency`:
//
//	netrpc        net/rpc calls, pipelined with Go() and a window of 128
//	grpc-stream   a gRPC-go bidirectional stream: one message per call, the
//	              server answers once at the end
//	grpc-unary    gRPC-go unary round trips (latency)
//	netrpc-unary  net/rpc Call round trips (latency)
//
// Every payload byte is written by the client and read by the server. The
// gRPC service is declared by hand with a raw-bytes codec, so no generated
// code or protobuf messages stand between the bytes and the transport. It
// is a separate module so that the library's dependencies stay three.
//
//	peers [-mode netrpc,grpc-stream,grpc-unary,netrpc-unary] [-sizes 8,64,256]
//	      [-n 200000] [-reps 3] [-latency-n 20000] [-json]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seriema-go/seriema/rconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

// serveEnv names the socket directory of a server process.
const serveEnv = "SERIEMA_PEERS_SERVE"

// Result is a throughput line, as `mctsbench micro -json` writes it.
type Result struct {
	Mode      string  `json:"mode"`
	Size      int     `json:"size"`
	Transport string  `json:"transport"`
	Net       string  `json:"net"`
	CallsPerS float64 `json:"calls_per_s"`
	MBPerS    float64 `json:"mb_per_s"`
	N         int     `json:"n"`
	Reps      int     `json:"reps"`
}

// Latency is a round-trip line, as `mctsbench latency -json` writes it.
type Latency struct {
	Mode      string  `json:"mode"`
	Size      int     `json:"size"`
	Transport string  `json:"transport"`
	Net       string  `json:"net"`
	N         int     `json:"n"`
	P50ns     float64 `json:"p50_ns"`
	P99ns     float64 `json:"p99_ns"`
	P999ns    float64 `json:"p999_ns"`
}

// rawCodec sends *[]byte messages as they are, copied as a protobuf codec
// would encode them: gRPC writes the encoding later, from its own
// goroutine, and a caller may change its message once SendMsg returns.
type rawCodec struct{}

func (rawCodec) Name() string { return "raw" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T is not *[]byte", v)
	}
	return append([]byte(nil), *b...), nil
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func init() { encoding.RegisterCodec(rawCodec{}) }

// touch reads every byte, as the micro benchmark's receiver does.
func touch(b []byte) uint64 {
	var s uint64
	for _, c := range b {
		s += uint64(c)
	}
	return s
}

// Sink is the net/rpc service.
type Sink struct{}

// Put reads the payload and returns its byte sum.
func (Sink) Put(args []byte, reply *uint64) error { *reply = touch(args); return nil }

var sinkDesc = grpc.ServiceDesc{
	ServiceName: "peers.Sink",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var in []byte
		if err := dec(&in); err != nil {
			return nil, err
		}
		touch(in)
		return &in, nil
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
		var msg []byte
		var n, sum uint64
		for {
			err := ss.RecvMsg(&msg)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			n++
			sum += touch(msg)
		}
		out := []byte(strconv.FormatUint(n, 10) + " " + strconv.FormatUint(sum, 10))
		return ss.SendMsg(&out)
	}}},
}

// listen opens a server's listener: a unix socket in dir, TCP on
// loopback, or conn: an rconn listener on a unix socket in dir (its
// connections move to shared-memory rings).
func listen(network, dir, name string) (net.Listener, error) {
	switch network {
	case "tcp":
		return net.Listen("tcp", "127.0.0.1:0")
	case "conn":
		return rconn.Listen("unix", filepath.Join(dir, name))
	}
	return net.Listen("unix", filepath.Join(dir, name))
}

// dial connects a client to a server's address over network.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "conn":
		return rconn.DialContext(ctx, "unix", addr)
	case "tcp":
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	return (&net.Dialer{}).DialContext(ctx, "unix", addr)
}

// rpcDial is rpc.Dial over network.
func rpcDial(network, addr string) (*rpc.Client, error) {
	c, err := dial(context.Background(), network, addr)
	if err != nil {
		return nil, err
	}
	return rpc.NewClient(c), nil
}

// serve runs both servers until stdin closes; spec is "network;dir". It
// prints "ready NETRPC-ADDRESS GRPC-ADDRESS".
func serve(spec string) error {
	network, dir, _ := strings.Cut(spec, ";")
	nl, err := listen(network, dir, "netrpc.sock")
	if err != nil {
		return err
	}
	rs := rpc.NewServer()
	if err := rs.Register(Sink{}); err != nil {
		return err
	}
	go func() {
		for { // rpc.Server.Accept would log the listener's close
			conn, err := nl.Accept()
			if err != nil {
				return
			}
			go rs.ServeConn(conn)
		}
	}()
	gl, err := listen(network, dir, "grpc.sock")
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	gs.RegisterService(&sinkDesc, struct{}{})
	go gs.Serve(gl)
	fmt.Println("ready", nl.Addr().String(), gl.Addr().String())
	io.Copy(io.Discard, os.Stdin)
	gs.Stop()
	nl.Close()
	return nil
}

// server is a running server process.
type server struct {
	dir               string
	network           string // "unix" or "tcp"
	rpcAddr, grpcAddr string
	cmd               *exec.Cmd
	in                io.WriteCloser
}

func startServer(network string) (*server, error) {
	dir, err := os.MkdirTemp("", "peers-")
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$") // ignored by the command, selects nothing in tests
	cmd.Env = append(os.Environ(), serveEnv+"="+network+";"+dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "ready" {
		cmd.Process.Kill()
		return nil, fmt.Errorf("server did not start: %q %v", line, err)
	}
	return &server{dir: dir, network: network, rpcAddr: f[1], grpcAddr: f[2], cmd: cmd, in: in}, nil
}

func (s *server) stop() {
	s.in.Close()
	s.cmd.Wait()
	os.RemoveAll(s.dir)
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func median(xs []float64) float64 { return percentile(xs, 50) }

// netrpcRate measures n pipelined net/rpc calls of size bytes (the first
// tenth is warm-up), at most 128 in flight.
func netrpcRate(s *server, size, n int) (float64, error) {
	c, err := rpcDial(s.network, s.rpcAddr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	const window = 128
	done := make(chan *rpc.Call, window)
	payload := make([]byte, size)
	inflight, warm := 0, n/10
	var start time.Time
	wait := func() error {
		call := <-done
		inflight--
		return call.Error
	}
	for i := 0; i < n; i++ {
		if i == warm {
			for inflight > 0 {
				if err := wait(); err != nil {
					return 0, err
				}
			}
			start = time.Now()
		}
		if inflight == window {
			if err := wait(); err != nil {
				return 0, err
			}
		}
		payload[i%size] = byte(i) // varying payload; Go encodes it before returning
		c.Go("Sink.Put", payload, new(uint64), done)
		inflight++
	}
	for inflight > 0 {
		if err := wait(); err != nil {
			return 0, err
		}
	}
	return float64(n-warm) / time.Since(start).Seconds(), nil
}

func grpcConn(s *server) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+s.grpcAddr,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, s.network, addr) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("raw")))
}

// grpcStreamRate measures n messages of size bytes on one bidirectional
// stream (after a warm-up stream of n/10), the server's final answer
// included.
func grpcStreamRate(s *server, size, n int) (float64, error) {
	conn, err := grpcConn(s)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	run := func(n int) error {
		cs, err := conn.NewStream(context.Background(), &sinkDesc.Streams[0], "/peers.Sink/Stream")
		if err != nil {
			return err
		}
		payload := make([]byte, size)
		for i := 0; i < n; i++ {
			payload[i%size] = byte(i)
			if err := cs.SendMsg(&payload); err != nil {
				return err
			}
		}
		if err := cs.CloseSend(); err != nil {
			return err
		}
		var reply []byte
		if err := cs.RecvMsg(&reply); err != nil {
			return err
		}
		if got := strings.Fields(string(reply)); len(got) != 2 || got[0] != strconv.Itoa(n) {
			return fmt.Errorf("server saw %q, want %d messages", reply, n)
		}
		return nil
	}
	if err := run(max(n/10, 1)); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := run(n); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// roundTrips times n round trips of call (the first tenth is warm-up).
func roundTrips(n int, call func() error) ([]float64, error) {
	var ns []float64
	for i := 0; i < n; i++ {
		t := time.Now()
		if err := call(); err != nil {
			return nil, err
		}
		if i >= n/10 {
			ns = append(ns, float64(time.Since(t)))
		}
	}
	return ns, nil
}

func latency(s *server, mode string, size, n int) (Latency, error) {
	payload := make([]byte, size)
	var ns []float64
	var err error
	switch mode {
	case "grpc-unary":
		conn, cerr := grpcConn(s)
		if cerr != nil {
			return Latency{}, cerr
		}
		defer conn.Close()
		var reply []byte
		ns, err = roundTrips(n, func() error {
			payload[0]++
			if err := conn.Invoke(context.Background(), "/peers.Sink/Echo", &payload, &reply); err != nil {
				return err
			}
			if len(reply) != size {
				return fmt.Errorf("echo of %d bytes came back with %d", size, len(reply))
			}
			return nil
		})
	case "netrpc-unary":
		c, cerr := rpcDial(s.network, s.rpcAddr)
		if cerr != nil {
			return Latency{}, cerr
		}
		defer c.Close()
		var reply uint64
		ns, err = roundTrips(n, func() error { payload[0]++; return c.Call("Sink.Put", payload, &reply) })
	}
	if err != nil {
		return Latency{}, err
	}
	return Latency{Mode: mode, Size: size, Transport: s.network, Net: s.network, N: n, P50ns: percentile(ns, 50), P99ns: percentile(ns, 99), P999ns: percentile(ns, 99.9)}, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modes := fs.String("mode", "netrpc,grpc-stream,grpc-unary,netrpc-unary", "comma-separated modes")
	sizes := fs.String("sizes", "8,64,256", "payload sizes in bytes (throughput modes)")
	n := fs.Int("n", 200000, "calls per repetition (throughput modes; the first 10% warm up)")
	reps := fs.Int("reps", 3, "repetitions; the median is reported")
	latSize := fs.Int("latency-size", 8, "payload bytes of the round-trip modes")
	latN := fs.Int("latency-n", 20000, "round trips of the round-trip modes")
	asJSON := fs.Bool("json", false, "print JSON lines")
	network := fs.String("net", "unix", "what the peers talk over: unix (a unix socket), tcp (TCP on loopback) or conn (rconn: shared-memory rings set up over a unix socket)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var sz []int
	for _, f := range strings.Split(*sizes, ",") {
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			fmt.Fprintf(stderr, "peers: bad size %q\n", f)
			return 2
		}
		sz = append(sz, v)
	}
	if *n < 10 || *reps < 1 || *latN < 10 || *latSize < 1 {
		fmt.Fprintln(stderr, "peers: -n and -latency-n must be ≥ 10, -reps and -latency-size ≥ 1")
		return 2
	}
	for _, m := range strings.Split(*modes, ",") {
		switch m {
		case "netrpc", "grpc-stream", "grpc-unary", "netrpc-unary":
		default:
			fmt.Fprintf(stderr, "peers: unknown mode %q\n", m)
			return 2
		}
	}
	if *network != "unix" && *network != "tcp" && *network != "conn" {
		fmt.Fprintf(stderr, "peers: unknown -net %q (want unix, tcp or conn)\n", *network)
		return 2
	}
	s, err := startServer(*network)
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	defer s.stop()
	var results []Result
	var lats []Latency
	for _, m := range strings.Split(*modes, ",") {
		if strings.HasSuffix(m, "-unary") {
			l, err := latency(s, m, *latSize, *latN)
			if err != nil {
				fmt.Fprintf(stderr, "peers: %s: %v\n", m, err)
				return 1
			}
			lats = append(lats, l)
			continue
		}
		for _, size := range sz {
			var rates []float64
			for r := 0; r < *reps; r++ {
				var rate float64
				var err error
				if m == "netrpc" {
					rate, err = netrpcRate(s, size, *n)
				} else {
					rate, err = grpcStreamRate(s, size, *n)
				}
				if err != nil {
					fmt.Fprintf(stderr, "peers: %s %d: %v\n", m, size, err)
					return 1
				}
				rates = append(rates, rate)
			}
			c := median(rates)
			results = append(results, Result{Mode: m, Size: size, Transport: s.network, Net: s.network, CallsPerS: c, MBPerS: c * float64(size) / 1e6, N: *n, Reps: *reps})
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range results {
			enc.Encode(r)
		}
		for _, l := range lats {
			enc.Encode(l)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttransport\tsize (B)\tcalls/s\tpayload MB/s\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.1f\t\n", r.Mode, r.Transport, r.Size, r.CallsPerS, r.MBPerS)
	}
	for _, l := range lats {
		fmt.Fprintf(tw, "%s\t%s\t%d\tp50 %v\tp99 %v\t\n", l.Mode, l.Transport, l.Size, time.Duration(l.P50ns), time.Duration(l.P99ns))
	}
	tw.Flush()
	return 0
}

func main() {
	if dir := os.Getenv(serveEnv); dir != "" {
		if err := serve(dir); err != nil {
			fmt.Fprintln(os.Stderr, "peers server:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
