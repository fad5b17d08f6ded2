package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"golang.org/x/sys/unix"
)

// IdleResult is one line of mctsbench idle: the CPU share of one process of
// a job with nothing to do (mode "idle"), how fast a call wakes an idle
// worker (mode "wake"), how fast a plain pipe round trip wakes an idle
// process (mode "pipe-wake", the operating system's floor, same run), or,
// when the job runs over tcp, how fast a plain Go TCP round trip wakes one
// (mode "tcp-plain-wake", the peer a tcp call is compared with).
type IdleResult struct {
	Mode      string  `json:"mode"`
	Transport string  `json:"transport"`
	Procs     int     `json:"procs,omitempty"` // processes of the job (mode idle)
	Rank      int     `json:"rank,omitempty"`
	WindowS   float64 `json:"window_s,omitempty"`
	CPUShare  float64 `json:"cpu_share,omitempty"` // CPU seconds per second of the window, of one process
	N         int     `json:"n,omitempty"`
	P50ns     float64 `json:"p50_ns,omitempty"`
	MaxNs     float64 `json:"max_ns,omitempty"`
}

// idle measures what an idle job costs: P processes whose workers run the
// default loop (Worker.Serve: poll, then sleep on the doorbell after the
// hot period) and have nothing to do. After a settling second, rank 0 reads
// every process's CPU time (getrusage) at both ends of the window; then it
// times call-and-return round trips to a worker that has idled between them.
func idle(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	procs := fs.Int("procs", 2, "processes (self-launched)")
	window := fs.Duration("duration", 10*time.Second, "measurement window")
	hot := fs.Duration("hot", 0, "Config.HotPeriod of the job (0: the default)")
	transport := fs.String("transport", "", "\"\" (automatic), shm, tcp or ofi")
	wakes := fs.Int("wakes", 20, "round trips to a worker idle for 100 ms before each (0: measure the CPU share only)")
	asJSON := fs.Bool("json", false, "print one JSON object per result")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *procs < 2 || *window <= 0 || *wakes < 0 {
		fmt.Fprintf(stderr, "mctsbench idle: -procs %d, -duration %v, -wakes %d: want -procs ≥ 2, -duration > 0, -wakes ≥ 0\n", *procs, *window, *wakes)
		return 2
	}
	rs, err := runIdle(*procs, *window, *hot, *transport, *wakes, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench idle: %v\n", err)
		return 1
	}
	for _, r := range rs {
		if *asJSON {
			json.NewEncoder(stdout).Encode(r)
		} else if r.Mode == "idle" {
			fmt.Fprintf(stdout, "rank %d (%s): %.2f %% of a core over %.0f s idle\n", r.Rank, r.Transport, 100*r.CPUShare, r.WindowS)
		} else if r.Mode == "wake" {
			fmt.Fprintf(stdout, "first call after 100 ms idle (%s, %d tries): p50 %v, max %v\n", r.Transport, r.N, time.Duration(r.P50ns), time.Duration(r.MaxNs))
		} else {
			peer := "pipe"
			if r.Mode == "tcp-plain-wake" {
				peer = "Go TCP (loopback)"
			}
			fmt.Fprintf(stdout, "plain %s round trip to a process idle for 100 ms (%d tries): p50 %v, max %v\n", peer, r.N, time.Duration(r.P50ns), time.Duration(r.MaxNs))
		}
	}
	return 0
}

// cpuNanos is this process's user and system CPU time.
func cpuNanos() uint64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return uint64(ru.Utime.Nano() + ru.Stime.Nano())
}

func runIdle(procs int, window, hot time.Duration, transport string, wakes int, stderr io.Writer) ([]IdleResult, error) {
	h := dsfabric.NewHandlers()
	stop := make(chan struct{})
	hCPU, _ := h.Register("idle.cpu", func(c *dsfabric.Call, a []byte) ([]byte, error) {
		return binary.LittleEndian.AppendUint64(nil, cpuNanos()), nil
	})
	hEcho, _ := h.Register("idle.echo", func(c *dsfabric.Call, a []byte) ([]byte, error) { return a, nil })
	hStop, _ := h.Register("idle.stop", func(c *dsfabric.Call, a []byte) ([]byte, error) { close(stop); return nil, nil })
	f, err := dsfabric.Start(context.Background(), dsfabric.Config{
		Procs: procs, Handlers: h, Transport: transport, HotPeriod: hot, Stdout: stderr,
	})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Rank() != 0 {
		select {
		case <-stop:
		case <-f.Done():
		}
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), window+time.Minute)
	defer cancel()
	src, _ := f.Names().Thread(0, 0)
	cpu := func() ([]uint64, error) {
		out := make([]uint64, procs)
		for r := range out {
			b, err := f.CallServiceReturn(ctx, src, r, hCPU, nil)
			if err != nil || len(b) != 8 {
				return nil, fmt.Errorf("reading rank %d's CPU time: %v (%d bytes)", r, err, len(b))
			}
			out[r] = binary.LittleEndian.Uint64(b)
		}
		return out, nil
	}
	time.Sleep(time.Second) // past every hot period: the job is asleep
	c0, err := cpu()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	time.Sleep(window)
	c1, err := cpu()
	if err != nil {
		return nil, err
	}
	wall := time.Since(t0).Seconds()
	var out []IdleResult
	for r := range c0 {
		out = append(out, IdleResult{Mode: "idle", Transport: f.Transports(), Procs: procs, Rank: r, WindowS: wall, CPUShare: float64(c1[r]-c0[r]) / 1e9 / wall})
	}
	if wakes > 0 {
		w, err := idleWakes(ctx, f, src, hEcho, wakes)
		if err != nil {
			return nil, err
		}
		out = append(out, w...)
	}
	for r := 1; r < procs; r++ {
		if err := f.CallService(src, r, hStop, nil, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// idleWakes times calls to a worker that idled before each (rank 1's
// first thread), then the operating system's floor beside them: a plain
// pipe round trip, and over tcp a plain Go TCP one, after the same idle.
func idleWakes(ctx context.Context, f *dsfabric.Fabric, src dsfabric.ThreadID, hEcho dsfabric.HandlerID, wakes int) ([]IdleResult, error) {
	var out []IdleResult
	dst, _ := f.Names().Thread(1, 0)
	wake, err := afterIdle("wake", f.Transports(), wakes, func(i int) error {
		_, err := f.CallReturn(ctx, src, dst, hEcho, []byte{byte(i)})
		return err
	})
	if err != nil {
		return nil, err
	}
	out = append(out, wake)
	pw, err := pipeWake(wakes)
	if err != nil {
		return nil, err
	}
	out = append(out, pw)
	if f.Transport(1) == "tcp" { // the transport the calls above crossed
		tw, err := tcpPlainWake(wakes)
		if err != nil {
			return nil, err
		}
		out = append(out, tw)
	}
	return out, nil
}

// pipeEchoEnv makes mctsbench (or its test binary) echo its standard input
// to its standard output: the plain-pipe peer of mctsbench idle.
const pipeEchoEnv = "MCTSBENCH_PIPE_ECHO"

// pipeEcho is that peer's body.
func pipeEcho() int {
	b := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(b); err != nil {
			return 0
		}
		if _, err := os.Stdout.Write(b); err != nil {
			return 0
		}
	}
}

// pipeWake times one-byte round trips through pipes to a child process
// that has idled (blocked in read) for 100 ms before each: what waking a
// sleeping process costs on this machine, whatever the middleware.
func pipeWake(wakes int) (IdleResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return IdleResult{}, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), pipeEchoEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		return IdleResult{}, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return IdleResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return IdleResult{}, fmt.Errorf("pipe peer: %w", err)
	}
	defer cmd.Wait()
	defer in.Close()
	b := make([]byte, 1)
	return afterIdle("pipe-wake", "pipe", wakes, func(int) error {
		if _, err := in.Write(b); err != nil {
			return fmt.Errorf("pipe peer: %w", err)
		}
		if _, err := io.ReadFull(out, b); err != nil {
			return fmt.Errorf("pipe peer: %w", err)
		}
		return nil
	})
}

// tcpPlainWake times one-byte round trips over a plain Go TCP connection
// (loopback) to an echoing process idle for 100 ms before each: what Go's
// own network stack, poller and scheduler take to wake a sleeping process,
// the peer of a call over the tcp transport.
func tcpPlainWake(wakes int) (IdleResult, error) {
	c, done, err := acceptPeer(peerSpec{role: "echo", transport: "tcp", size: 1, n: wakes, reps: 1})
	if err != nil {
		return IdleResult{}, fmt.Errorf("tcp-plain peer: %w", err)
	}
	defer done()
	b := make([]byte, 1)
	return afterIdle("tcp-plain-wake", "tcp-plain", wakes, func(i int) error {
		b[0] = byte(i)
		if _, err := c.Write(b); err != nil {
			return fmt.Errorf("tcp-plain peer: %w", err)
		}
		if _, err := io.ReadFull(c, b); err != nil || b[0] != byte(i) {
			return fmt.Errorf("tcp-plain peer: echo %d: %v (got %d)", i, err, b[0])
		}
		return nil
	})
}

// afterIdle times wakes round trips, each after 100 ms of idling, and
// returns their median and maximum as one result of mode and transport.
func afterIdle(mode, transport string, wakes int, roundTrip func(i int) error) (IdleResult, error) {
	lat := make([]float64, 0, wakes)
	for i := 0; i < wakes; i++ {
		time.Sleep(100 * time.Millisecond)
		t := time.Now()
		if err := roundTrip(i); err != nil {
			return IdleResult{}, fmt.Errorf("%s %d: %w", mode, i, err)
		}
		lat = append(lat, float64(time.Since(t).Nanoseconds()))
	}
	sort.Float64s(lat)
	return IdleResult{Mode: mode, Transport: transport, N: len(lat), P50ns: percentile(lat, 50), MaxNs: lat[len(lat)-1]}, nil
}
