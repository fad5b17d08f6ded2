package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/riutils"
)

// LatencyResult is the output of mctsbench latency.
type LatencyResult struct {
	Mode      string  `json:"mode"`
	Size      int     `json:"size"`
	Transport string  `json:"transport"`
	N         int     `json:"n"`
	P50ns     float64 `json:"p50_ns"`
	P99ns     float64 `json:"p99_ns"`
	P999ns    float64 `json:"p999_ns"`
}

// latency measures call-and-return round trips (riutils.CallReturn, one-sided
// both ways) from the worker thread of rank 0 to an echo handler on the
// worker thread of rank 1.
func latency(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	size := fs.Int("size", 8, "argument and result bytes")
	n := fs.Int("n", 100000, "round trips (the first 10% are warm-up, not counted)")
	transport := fs.String("transport", "", "\"\" (automatic: shm on one machine), shm, tcp, ofi, or tcp-plain (a plain Go TCP ping-pong, the peer to compare with)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !flagsOK(stderr, "latency",
		check{*size < 0, fmt.Sprintf("-size %d (want ≥ 0)", *size)},
		check{*n < 10, fmt.Sprintf("-n %d (want ≥ 10)", *n)}) {
		return 2
	}
	var r *LatencyResult
	var err error
	if *transport == "tcp-plain" {
		r, err = plainPingPong(*size, *n)
	} else {
		r, err = runLatency(*size, *n, *transport, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench latency: %v\n", err)
		return 1
	}
	if r == nil {
		return 0 // rank 1
	}
	if *asJSON {
		json.NewEncoder(stdout).Encode(r)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttransport\tsize (B)\tp50\tp99\tp99.9\t")
	fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\t%v\t\n", r.Mode, r.Transport, r.Size,
		time.Duration(r.P50ns), time.Duration(r.P99ns), time.Duration(r.P999ns))
	tw.Flush()
	return 0
}

func runLatency(size, n int, transport string, stderr io.Writer) (*LatencyResult, error) {
	h := dsfabric.NewHandlers()
	var stop atomic.Bool
	echo, _ := h.Register("latency.echo", func(c *dsfabric.Call, a []byte) ([]byte, error) { return a, nil })
	hStop, _ := h.Register("latency.stop", func(c *dsfabric.Call, a []byte) ([]byte, error) { stop.Store(true); return nil, nil })
	result := make(chan *LatencyResult, 1)
	failed := make(chan error, 1)
	worker := func(w *dsfabric.Worker, m *riutils.Messengers) {
		f := w.Fabric()
		if f.Rank() != 0 {
			for !stop.Load() {
				m.Poll()
			}
			result <- nil
			w.Serve(context.Background())
			return
		}
		obj, err := m.NewRemoteObject(size)
		if err == nil {
			dst, _ := f.Names().Thread(1, 0)
			payload := make([]byte, size)
			lat := make([]float64, 0, n)
			ctx := context.Background()
			for i := 0; i < n && err == nil; i++ {
				if size > 0 {
					payload[i%size] = byte(i)
				}
				t0 := time.Now()
				var out []byte
				out, err = m.CallReturn(ctx, dst, echo, payload, obj)
				d := time.Since(t0)
				if err == nil && len(out) != size {
					err = fmt.Errorf("echo returned %d bytes, want %d", len(out), size)
				}
				if i >= n/10 {
					lat = append(lat, float64(d.Nanoseconds()))
				}
			}
			if err == nil {
				err = m.Call(dst, hStop, nil)
			}
			if err == nil {
				result <- &LatencyResult{Mode: "call_return", Size: size, Transport: resultTransport(f.Transports()), N: len(lat),
					P50ns: percentile(lat, 50), P99ns: percentile(lat, 99), P999ns: percentile(lat, 99.9)}
				w.Serve(context.Background())
				return
			}
		}
		failed <- err
	}
	f, err := startJob(2, transport, h, worker, stderr)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	select {
	case r := <-result:
		return r, nil
	case err := <-failed:
		return nil, err
	}
}
