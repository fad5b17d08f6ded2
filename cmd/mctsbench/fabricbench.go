package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/riutils"
)

// launcherRank returns this process's rank when it is a rank of a job
// started by dsfabric's self-launcher, mpirun, srun or a PMI launcher.
func launcherRank() (string, bool) {
	for _, v := range []string{dsfabric.EnvRank, "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"} {
		if r := os.Getenv(v); r != "" {
			return r, true
		}
	}
	return "", false
}

// underLauncher reports whether this process is a rank of a launched job.
func underLauncher() bool {
	_, ok := launcherRank()
	return ok
}

// runStats is the receiver's side of one run.
type runStats struct {
	// count is the calls run so far. Plain, not atomic: the receiving
	// thread runs the handler and the loop that reads it, and a locked add
	// per call (5–10 ns, a full barrier) is bench overhead that the limit
	// ring's reader does not pay.
	count    int64
	sum      uint64
	warm, n  int64
	start    atomic.Int64 // ns, when the warm-up ended
	end      atomic.Int64 // ns, when the last call ran
	finished chan struct{}
}

// record is the benchmark's handler body: read every payload byte, count.
// Eight bytes at a time: a byte loop was 55 % of the receiver's profile at
// 256 B (write mode), the handler's arithmetic rather than the messaging
// measured (raw's reader checks two words of each record).
func (s *runStats) record(args []byte) {
	var x uint64
	for len(args) >= 8 {
		x += binary.LittleEndian.Uint64(args)
		args = args[8:]
	}
	for _, b := range args {
		x += uint64(b)
	}
	s.sum += x // one receiving thread runs the handler; read after finished
	s.count++
	k := s.count
	if k == s.warm {
		s.start.Store(time.Now().UnixNano())
	}
	if k == s.n {
		s.end.Store(time.Now().UnixNano())
		close(s.finished)
	}
}

// runFabricModes measures calls from a worker thread of rank 1 to the
// worker thread of rank 0, which reads every payload byte: mode "send" uses
// dsfabric's send-based Call, "write" riutils' one-sided Messenger, "trad"
// and "ovfl" riutils' Aggregator in those modes (flushed at the end). All
// modes run in one job, in order (every rank runs the same list). Rank 0
// returns the results, the others nil.
func runFabricModes(modes []string, spec rawSpec, procs int, stderr io.Writer) ([]Result, error) {
	if procs < 2 {
		return nil, fmt.Errorf("-procs must be at least 2")
	}
	var st atomic.Pointer[runStats]
	h := dsfabric.NewHandlers()
	recv, _ := h.Register("micro.recv", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		st.Load().record(args)
		return nil, nil
	})
	type job struct {
		mode string
		size int
		done chan error
	}
	jobs := make(chan job)
	worker := func(w *dsfabric.Worker, m *riutils.Messengers) {
		f := w.Fabric()
		dst, _ := f.Names().Thread(0, 0)
		var trad, ovfl *riutils.Aggregator
		trad, merr := m.Aggregator(riutils.AggregatorConfig{Mode: riutils.Trad})
		if merr == nil {
			ovfl, merr = m.Aggregator(riutils.AggregatorConfig{Mode: riutils.Ovfl})
		}
		calls := map[string]func([]byte) error{
			"send":  func(p []byte) error { return f.Call(w.ID(), dst, recv, p, nil) },
			"write": func(p []byte) error { return m.Call(dst, recv, p) },
			"trad":  func(p []byte) error { return trad.Call(dst, recv, p) },
			"ovfl":  func(p []byte) error { return ovfl.Call(dst, recv, p) },
		}
		flushes := map[string]func() error{"trad": trad.Flush, "ovfl": ovfl.Flush}
		pollBoth := func() int { return w.Poll() + m.Poll() }
		// Between jobs, and in ranks past 1 (idle throughout), polls back
		// off: spinning, they took the cores the measured pair needed
		// (send over tcp: 1.6 M calls/s with 2 processes, 94 K with 4).
		var idle dtutils.Backoff
		for {
			select {
			case j := <-jobs:
				idle.Reset()
				if merr != nil {
					j.done <- merr
					continue
				}
				call, poll := calls[j.mode], pollBoth
				var err error
				if f.Rank() == 1 {
					payload := make([]byte, j.size)
					// The byte varied per call walks the payload with a
					// counter: i % size was a division per call, 5 % of the
					// trad sender's profile.
					for i, k := 0, 0; i < spec.n && err == nil; i++ {
						payload[k] = byte(i) // varying payload
						if k++; k == j.size {
							k = 0
						}
						err = call(payload)
					}
					if fl := flushes[j.mode]; fl != nil && err == nil {
						err = fl()
					}
				} else if f.Rank() == 0 {
					s := st.Load()
					deadline := time.Now().Add(5 * time.Minute)
					// Reading the clock on every empty poll also paces the
					// polling (about 50 ns): polling the next record's cache
					// line back to back slows the sender writing it by a
					// third (measured: write 4.0 → 4.8 M/s).
					for s.count < s.n && err == nil {
						if poll() == 0 {
							if time.Now().After(deadline) {
								err = fmt.Errorf("only %d of %d calls arrived", s.count, s.n)
							} else {
								err = f.DeadErr() // the sender died
							}
						}
					}
				}
				j.done <- err
			case <-f.Done():
				return
			default:
				if merr == nil && pollBoth() > 0 {
					idle.Reset()
				} else {
					idle.Wait()
				}
			}
		}
	}
	f, err := startJob(procs, spec.transport, h, worker, stderr)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctx := context.Background()
	return runFabricModesOn(ctx, f, modes, spec, &st, func(mode string, size int) error {
		j := job{mode: mode, size: size, done: make(chan error, 1)}
		jobs <- j
		return <-j.done
	})
}

// modeJob is what runFabricModesOn needs of the job (a *dsfabric.Fabric).
type modeJob interface {
	Barrier(ctx context.Context) error
	Rank() int
	Transports() string
}

// runFabricModesOn runs the sizes × repetitions of every mode, the modes
// taking turns within each repetition so that a slow spell of the machine
// falls on all of them alike (their ratios are what the table is for); run
// hands one run to the local worker thread. Results come mode by mode.
func runFabricModesOn(ctx context.Context, f modeJob, modes []string, spec rawSpec, st *atomic.Pointer[runStats], run func(mode string, size int) error) ([]Result, error) {
	rates := make([][][]float64, len(modes)) // mode, size, repetition
	for m := range modes {
		rates[m] = make([][]float64, len(spec.sizes))
	}
	for si, size := range spec.sizes {
		for rep := 0; rep < spec.reps; rep++ {
			for m, mode := range modes {
				s := &runStats{warm: max(1, int64(spec.warmup())), n: int64(spec.n), finished: make(chan struct{})}
				st.Store(s)
				if err := f.Barrier(ctx); err != nil {
					return nil, err
				}
				if err := run(mode, size); err != nil {
					return nil, fmt.Errorf("%s, %d-byte calls: %w", mode, size, err)
				}
				if f.Rank() == 0 {
					rates[m][si] = append(rates[m][si], float64(s.n-s.warm)/time.Duration(s.end.Load()-s.start.Load()).Seconds())
				}
				if err := f.Barrier(ctx); err != nil {
					return nil, err
				}
			}
		}
	}
	if f.Rank() != 0 {
		return nil, nil
	}
	var results []Result
	for m, mode := range modes {
		for si, size := range spec.sizes {
			results = append(results, newResult(mode, f.Transports(), size, spec.n, rates[m][si]))
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

// startJob starts a job with one-sided invocation (riutils.Start) and
// returns its fabric. Ranks other than 0 print to stderr, not stdout.
func startJob(procs int, transport string, h *dsfabric.Handlers, worker riutils.WorkerFunc, stderr io.Writer) (*dsfabric.Fabric, error) {
	job, err := riutils.Start(context.Background(), dsfabric.Config{
		Procs: procs, Handlers: h, Transport: transport, Stdout: stderr,
	}, riutils.DefaultConfig(), worker)
	if err != nil {
		return nil, err
	}
	return job.Fabric, nil
}
