package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// underLauncher reports whether this process is a rank of a job started by
// dsfabric's self-launcher, mpirun, srun or a PMI launcher.
func underLauncher() bool {
	for _, v := range []string{dsfabric.EnvRank, "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// sendStats is the receiver's side of one run.
type sendStats struct {
	count    atomic.Int64
	sum      atomic.Uint64
	warm     int64
	n        int64
	start    atomic.Int64 // ns, when the warm-up ended
	end      atomic.Int64 // ns, when the last call ran
	finished chan struct{}
}

// runSend measures send-based calls (dsfabric.Call) from a thread of rank 1
// to a thread of rank 0, which reads every payload byte. Every rank runs
// it; rank 0 returns the results, the others nil.
func runSend(spec rawSpec, procs int, stderr io.Writer) ([]Result, error) {
	if procs < 2 {
		return nil, fmt.Errorf("send: -procs must be at least 2")
	}
	var st atomic.Pointer[sendStats]
	h := dsfabric.NewHandlers()
	recv, _ := h.Register("micro.send", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		s := st.Load()
		var x uint64
		for _, b := range args {
			x += uint64(b)
		}
		s.sum.Add(x)
		k := s.count.Add(1)
		if k == s.warm {
			s.start.Store(time.Now().UnixNano())
		}
		if k == s.n {
			s.end.Store(time.Now().UnixNano())
			close(s.finished)
		}
		return nil, nil
	})
	transport := spec.transport
	f, err := dsfabric.Start(context.Background(), dsfabric.Config{
		Procs: procs, Handlers: h, Transport: transport, MaxMessage: 64 << 10,
		Stdout: stderr, // ranks other than 0 print nothing on stdout
	})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctx := context.Background()
	me, _ := f.Names().Thread(f.Rank(), 0)
	dst, _ := f.Names().Thread(0, 0)
	var results []Result
	for _, size := range spec.sizes {
		if size+32 > 64<<10 {
			return nil, fmt.Errorf("send: size %d exceeds the 64 KiB message", size)
		}
		payload := make([]byte, size)
		var rates []float64
		for rep := 0; rep < spec.reps; rep++ {
			s := &sendStats{warm: int64(spec.warmup()), n: int64(spec.n), finished: make(chan struct{})}
			if s.warm == 0 {
				s.warm = 1
			}
			st.Store(s)
			if err := f.Barrier(ctx); err != nil {
				return nil, err
			}
			if f.Rank() == 1 {
				for i := 0; i < spec.n; i++ {
					payload[i%size] = byte(i) // varying payload
					if err := f.Call(me, dst, recv, payload, nil); err != nil {
						return nil, fmt.Errorf("send: call %d: %w", i, err)
					}
				}
			}
			if f.Rank() == 0 {
				select {
				case <-s.finished:
				case <-time.After(5 * time.Minute):
					return nil, fmt.Errorf("send: only %d of %d calls arrived", s.count.Load(), spec.n)
				}
				el := time.Duration(s.end.Load() - s.start.Load())
				rates = append(rates, float64(s.n-s.warm)/el.Seconds())
			}
			if err := f.Barrier(ctx); err != nil {
				return nil, err
			}
		}
		if f.Rank() == 0 {
			results = append(results, newResult("send", transportName(transport), size, spec.n, rates))
		}
	}
	return results, nil
}

func transportName(t string) string {
	if t == "" {
		return "shm"
	}
	return t
}
