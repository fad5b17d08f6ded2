package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seriema-go/seriema/rconn"
)

// ConnResult is one measurement of mctsbench conn: a byte stream between two
// processes over rconn (mode "conn": shared-memory rings), a unix socket
// or TCP loopback.
type ConnResult struct {
	Mode    string  `json:"mode"`    // conn, unix or tcp
	Pattern string  `json:"pattern"` // pingpong or stream
	Size    int     `json:"size"`    // bytes per message (ping-pong) or per Write (stream)
	N       int     `json:"n"`
	RTPerS  float64 `json:"round_trips_per_s,omitempty"`
	P50ns   float64 `json:"p50_ns,omitempty"`
	P99ns   float64 `json:"p99_ns,omitempty"`
	MBPerS  float64 `json:"mb_per_s,omitempty"`
}

// connPeerEnv makes a process the far end of mctsbench conn: "mode;address".
const connPeerEnv = "SERIEMA_CONN_PEER"

func connBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modes := fs.String("modes", "conn,unix,tcp", "comma-separated: conn (rconn rings), unix, tcp")
	n := fs.Int("n", 100000, "ping-pong round trips (the first 10% are warm-up)")
	sizes := fs.String("stream-sizes", "64,4096,65536", "write sizes of the stream pattern")
	mb := fs.Int("stream-mb", 256, "MiB each stream carries")
	asJSON := fs.Bool("json", false, "print one JSON object per measurement")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ss, err := parseSizes(*sizes)
	if !flagsOK(stderr, "conn",
		check{err != nil, "-stream-sizes: " + errMsg(err)},
		check{*n < 10, fmt.Sprintf("-n %d (want ≥ 10)", *n)},
		check{*mb < 1, fmt.Sprintf("-stream-mb %d (want ≥ 1)", *mb)}) {
		return 2
	}
	var out []ConnResult
	for _, m := range strings.Split(*modes, ",") {
		rs, err := connMode(m, *n, ss, *mb<<20)
		if err != nil {
			fmt.Fprintf(stderr, "mctsbench conn: %s: %v\n", m, err)
			return 1
		}
		out = append(out, rs...)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range out {
			enc.Encode(r)
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tpattern\tsize (B)\tround trips/s\tp50\tp99\tMB/s\t")
	for _, r := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%v\t%v\t%.0f\t\n", r.Mode, r.Pattern, r.Size, r.RTPerS, time.Duration(r.P50ns), time.Duration(r.P99ns), r.MBPerS)
	}
	tw.Flush()
	return 0
}

// connListen listens for mode in dir.
func connListen(mode, dir string) (net.Listener, error) {
	switch mode {
	case "conn":
		return rconn.Listen("unix", filepath.Join(dir, "conn.sock"))
	case "unix":
		return net.Listen("unix", filepath.Join(dir, "unix.sock"))
	case "tcp":
		return net.Listen("tcp", "127.0.0.1:0")
	}
	return nil, fmt.Errorf("unknown mode %q (want conn, unix or tcp)", mode)
}

func connDial(mode, addr string) (net.Conn, error) {
	switch mode {
	case "conn":
		return rconn.Dial("unix", addr)
	case "unix":
		return net.Dial("unix", addr)
	}
	return net.Dial("tcp", addr)
}

// connMode measures one mode: the peer process dials once per pattern.
func connMode(mode string, n int, sizes []int, total int) ([]ConnResult, error) {
	dir, err := os.MkdirTemp("", "mctsbench-conn-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ln, err := connListen(mode, dir)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), connPeerEnv+"="+mode+";"+ln.Addr().String())
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { in.Close(); cmd.Wait() }()
	accept := func() (net.Conn, error) {
		c, err := ln.Accept()
		if err == nil && mode == "conn" {
			if _, ok := c.(*rconn.Conn); !ok {
				c.Close()
				return nil, fmt.Errorf("the connection is not on shared-memory rings")
			}
		}
		return c, err
	}
	var out []ConnResult
	// Ping-pong: 64-byte messages echoed.
	fmt.Fprintln(in, "pingpong 64")
	c, err := accept()
	if err != nil {
		return nil, err
	}
	msg := make([]byte, 64)
	lat := make([]float64, 0, n)
	warm := n / 10
	var start time.Time
	for i := 0; i < n; i++ {
		if i == warm {
			start = time.Now()
		}
		t0 := time.Now()
		msg[0] = byte(i)
		if _, err := c.Write(msg); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			return nil, err
		}
		if i >= warm {
			lat = append(lat, float64(time.Since(t0).Nanoseconds()))
		}
	}
	el := time.Since(start)
	c.Close()
	sort.Float64s(lat)
	out = append(out, ConnResult{Mode: mode, Pattern: "pingpong", Size: 64, N: n - warm, RTPerS: float64(n-warm) / el.Seconds(), P50ns: percentile(lat, 50), P99ns: percentile(lat, 99)})
	// Streams: total bytes in writes of size, then the peer's count back.
	for _, size := range sizes {
		fmt.Fprintf(in, "stream %d\n", size)
		c, err := accept()
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size)
		start := time.Now()
		for sent := 0; sent < total; sent += size {
			if _, err := c.Write(buf); err != nil {
				return nil, err
			}
		}
		c.(interface{ CloseWrite() error }).CloseWrite()
		var got [8]byte
		if _, err := io.ReadFull(c, got[:]); err != nil {
			return nil, err
		}
		el := time.Since(start)
		c.Close()
		if int(binary.LittleEndian.Uint64(got[:])) < total {
			return nil, fmt.Errorf("stream of %d-byte writes: the peer counted %d of %d bytes", size, binary.LittleEndian.Uint64(got[:]), total)
		}
		out = append(out, ConnResult{Mode: mode, Pattern: "stream", Size: size, N: total / size, MBPerS: float64(total) / 1e6 / el.Seconds()})
	}
	return out, nil
}

// connPeer is the far end: for each line of stdin it dials and echoes
// (pingpong) or counts until EOF and answers the count (stream).
func connPeer(env string) int {
	mode, addr, _ := strings.Cut(env, ";")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var pattern string
		var size int
		if _, err := fmt.Sscan(sc.Text(), &pattern, &size); err != nil {
			fmt.Fprintln(os.Stderr, "conn peer:", err)
			return 1
		}
		c, err := connDial(mode, addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conn peer:", err)
			return 1
		}
		switch pattern {
		case "pingpong":
			io.Copy(c, c) // echoes until the other side closes
		case "stream":
			n, _ := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(n))
			c.Write(b[:])
		}
		c.Close()
	}
	return 0
}
