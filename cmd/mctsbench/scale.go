package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/seriema-go/seriema/internal/chart"
	"github.com/seriema-go/seriema/mcts"
)

// ScaleResult is one configuration of the scaling figure (the paper's
// Fig. 3): the median over repetitions of the global simulations/ms.
type ScaleResult struct {
	Config           string  `json:"config"`
	SimulationsPerMs float64 `json:"simulations_per_ms"`
	VisitsPerMs      float64 `json:"visits_per_ms"`
	VsSeq            float64 `json:"vs_seq,omitempty"`
	Vs1x1            float64 `json:"vs_1x1,omitempty"`
	// VsCeiling is a PxT configuration against seqN with N = P×T measured
	// in the same run: N independent sequential searches at once, what the
	// machine gives N workers that never coordinate.
	VsCeiling float64 `json:"vs_ceiling,omitempty"`
	// Steady* are the same figures over the moves after the first
	// -warmup of each run (absent when a run has no more moves): a
	// process's first moves grow its heap and its messengers' rings,
	// page by page (about 10 µs a page fault on the development VM).
	SteadySimulationsPerMs float64 `json:"steady_simulations_per_ms,omitempty"`
	SteadyVsSeq            float64 `json:"steady_vs_seq,omitempty"`
	SteadyVs1x1            float64 `json:"steady_vs_1x1,omitempty"`
	Warmup                 int     `json:"warmup_moves,omitempty"`
	Reps                   int     `json:"reps"`
	// Runs are the simulations/ms of each repetition, in the order run.
	Runs []float64 `json:"simulations_per_ms_runs"`
	// Vs1x1Rounds are each repetition's simulations/ms over the 1x1 run of
	// the same round (configurations take turns, so a round's runs are
	// seconds apart): where they spread far, a spell of the machine
	// (docs/benchmarks.md) hit some runs and not others, which the
	// medians alone do not show.
	Vs1x1Rounds []float64 `json:"vs_1x1_rounds,omitempty"`
}

type scaleOpts struct {
	configs              []string
	board, visits, moves int
	warmup               int // moves left out of the steady figures
	spread               int
	noSteal              bool
	reps                 int
	preTouch             int // MiB of heap each search process faults in first (demo -pretouch)
	mode, transport, png string
	seed                 uint64
	asJSON               bool
	command              func(args []string) *exec.Cmd // runs `mctsbench args...`
}

// parseConfig reads "seq", "seqN" (N independent sequential searches at
// once: procs is N) or "PxT".
func parseConfig(s string) (procs, threads int, seq bool, err error) {
	if s == "seq" {
		return 1, 1, true, nil
	}
	if n, ok := strings.CutPrefix(s, "seq"); ok {
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 || k > 64 {
			return 0, 0, false, fmt.Errorf("bad configuration %q (want seqN with N in 1…64)", s)
		}
		return k, 1, true, nil
	}
	p, t, ok := strings.Cut(s, "x")
	procs, err1 := strconv.Atoi(p)
	threads, err2 := strconv.Atoi(t)
	if !ok || err1 != nil || err2 != nil || procs < 1 || threads < 1 {
		return 0, 0, false, fmt.Errorf("bad configuration %q (want seq or PxT, e.g. 2x1)", s)
	}
	return procs, threads, false, nil
}

func scale(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o scaleOpts
	configs := fs.String("configs", "seq,seq2,1x1,1x2,2x1", "comma-separated configurations: seq (no fabric), seqN (N sequential searches at once: the machine's ceiling for N workers) or PxT")
	fs.IntVar(&o.board, "board", 11, "board side")
	fs.IntVar(&o.visits, "visits", 40000, "rollouts per move")
	fs.IntVar(&o.moves, "moves", 6, "moves searched per run, from the empty board")
	fs.IntVar(&o.warmup, "warmup", 2, "first moves of each run left out of the steady_* figures (which need more moves than this)")
	fs.IntVar(&o.spread, "spread", mcts.DefaultConfig().SpreadDepth, "mcts.Config.SpreadDepth of the distributed runs (0: the paper's uniform placement)")
	fs.BoolVar(&o.noSteal, "no-steal", false, "no work stealing between processes in the distributed runs (mcts.Config.NoSteal)")
	fs.IntVar(&o.reps, "reps", 3, "repetitions per configuration (median reported; configurations interleaved)")
	fs.StringVar(&o.mode, "mode", "trad", "aggregation: trad or ovfl")
	fs.StringVar(&o.transport, "transport", "shm", "shm or tcp")
	fs.StringVar(&o.png, "png", "", "also draw the figure into this PNG file")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of every run")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object per configuration")
	fs.IntVar(&o.preTouch, "pretouch", demoPreTouch, preTouchUsage)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.configs = strings.Split(*configs, ",")
	for _, c := range o.configs {
		if _, _, _, err := parseConfig(c); err != nil {
			fmt.Fprintf(stderr, "mctsbench scale: %v\n", err)
			return 2
		}
	}
	if o.reps < 1 || o.moves < 1 || o.warmup < 0 || o.preTouch < 0 {
		fmt.Fprintln(stderr, "mctsbench scale: -reps and -moves must be at least 1, -warmup and -pretouch at least 0")
		return 2
	}
	o.command = func(args []string) *exec.Cmd {
		exe, err := os.Executable()
		if err != nil {
			exe = os.Args[0]
		}
		return exec.Command(exe, args...)
	}
	rs, err := runScale(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench scale: %v\n", err)
		return 1
	}
	if o.png != "" {
		if err := scaleChart(o, rs); err != nil {
			fmt.Fprintf(stderr, "mctsbench scale: %v\n", err)
			return 1
		}
	}
	printScale(stdout, rs, o.asJSON)
	return 0
}

// runScale runs every configuration reps times as `mctsbench demo -json`,
// interleaving the configurations so that drift of a noisy machine spreads
// over all of them.
func runScale(o scaleOpts, progress io.Writer) ([]ScaleResult, error) {
	sims := make([][]float64, len(o.configs))
	steady := make([][]float64, len(o.configs))
	visits := make([][]float64, len(o.configs))
	for rep := 0; rep < o.reps; rep++ {
		for i, c := range o.configs {
			procs, threads, seq, _ := parseConfig(c)
			copies := 1
			if seq {
				copies, procs = procs, 1 // seqN: N copies of one sequential search
			}
			args := []string{"demo", "-json", "-board", strconv.Itoa(o.board), "-visits", strconv.Itoa(o.visits),
				"-moves", strconv.Itoa(o.moves), "-seed", strconv.FormatUint(o.seed, 10), "-mode", o.mode, "-transport", o.transport,
				"-procs", strconv.Itoa(procs), "-threads", strconv.Itoa(threads), "-spread", strconv.Itoa(o.spread),
				"-pretouch", strconv.Itoa(o.preTouch)}
			if o.noSteal {
				args = append(args, "-no-steal")
			}
			if seq {
				args = append(args, "-seq")
			}
			fmt.Fprintf(progress, "scale: %s, repetition %d of %d\n", c, rep+1, o.reps)
			ss, st, vs, err := runDemos(o, c, args, copies)
			if err != nil {
				return nil, err
			}
			sims[i] = append(sims[i], ss)
			steady[i] = append(steady[i], st)
			visits[i] = append(visits[i], vs)
		}
	}
	rs := scaleResults(o.configs, sims, steady, visits, o.reps)
	if o.moves > o.warmup { // else every steady figure is 0 (steadyRate)
		for i := range rs {
			rs[i].Warmup = o.warmup
		}
	}
	return rs, nil
}

// scaleResults turns each configuration's repetitions (sims[i][rep], in
// round order; steady and visits alike) into the figure's rows: medians,
// the ratios of medians against seq, 1x1 and seqN, and each round's ratio
// against that round's 1x1.
func scaleResults(configs []string, sims, steady, visits [][]float64, reps int) []ScaleResult {
	rs := make([]ScaleResult, len(configs))
	var seqRate, oneRate, seqSteady, oneSteady float64
	one := -1
	for i, c := range configs {
		rs[i] = ScaleResult{Config: c, SimulationsPerMs: median(sims[i]), VisitsPerMs: median(visits[i]), Reps: reps,
			SteadySimulationsPerMs: median(steady[i]), Runs: sims[i]}
		switch c {
		case "seq":
			seqRate, seqSteady = rs[i].SimulationsPerMs, rs[i].SteadySimulationsPerMs
		case "1x1":
			oneRate, oneSteady, one = rs[i].SimulationsPerMs, rs[i].SteadySimulationsPerMs, i
		}
	}
	for i := range rs {
		if seqRate > 0 {
			rs[i].VsSeq = rs[i].SimulationsPerMs / seqRate
		}
		if oneRate > 0 {
			rs[i].Vs1x1 = rs[i].SimulationsPerMs / oneRate
		}
		if seqSteady > 0 {
			rs[i].SteadyVsSeq = rs[i].SteadySimulationsPerMs / seqSteady
		}
		if oneSteady > 0 {
			rs[i].SteadyVs1x1 = rs[i].SteadySimulationsPerMs / oneSteady
		}
		if one >= 0 {
			for k := range min(len(sims[i]), len(sims[one])) {
				if sims[one][k] > 0 {
					rs[i].Vs1x1Rounds = append(rs[i].Vs1x1Rounds, sims[i][k]/sims[one][k])
				}
			}
		}
		p, t, seq, _ := parseConfig(rs[i].Config)
		if seq {
			continue
		}
		for _, r := range rs {
			if r.Config == fmt.Sprintf("seq%d", p*t) && r.SimulationsPerMs > 0 {
				rs[i].VsCeiling = rs[i].SimulationsPerMs / r.SimulationsPerMs
			}
		}
	}
	return rs
}

// roundsText writes the range of per-round ratios, "1.52–1.71" (one
// value when both ends print alike), or "–" without any.
func roundsText(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	lo, hi := fmt.Sprintf("%.2f", slices.Min(v)), fmt.Sprintf("%.2f", slices.Max(v))
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// runDemos runs copies of `mctsbench args...` at once (one for a PxT
// configuration) and returns their summed simulations/ms, the same past
// the first o.warmup moves (0 without more moves), and visits/ms.
func runDemos(o scaleOpts, c string, args []string, copies int) (sims, steady, visits float64, err error) {
	type res struct {
		s   DemoSummary
		err error
	}
	ch := make(chan res, copies)
	for k := 0; k < copies; k++ {
		cmd := o.command(args)
		go func() {
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, err := cmd.Output()
			if err != nil {
				ch <- res{err: fmt.Errorf("%s: %v\n%s", c, err, errb.String())}
				return
			}
			var s DemoSummary
			if err := json.Unmarshal(bytes.TrimSpace(out), &s); err != nil {
				ch <- res{err: fmt.Errorf("%s: unreadable summary %q: %v", c, out, err)}
				return
			}
			ch <- res{s: s}
		}()
	}
	want := c
	if copies > 1 || strings.HasPrefix(c, "seq") {
		want = "seq"
	}
	var errs []error
	for k := 0; k < copies; k++ {
		r := <-ch
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.s.Config != want || r.s.SimulationsPerMs <= 0:
			errs = append(errs, fmt.Errorf("%s: summary of %q with %v simulations/ms", c, r.s.Config, r.s.SimulationsPerMs))
		default:
			sims += r.s.SimulationsPerMs
			steady += steadyRate(r.s.PerMove, o.warmup)
			visits += r.s.VisitsPerMs
		}
	}
	return sims, steady, visits, errors.Join(errs...)
}

// steadyRate is the simulations/ms of the moves after the first warmup;
// 0 when there are none.
func steadyRate(moves []MoveWork, warmup int) float64 {
	var ms float64
	sims := 0
	for _, m := range moves[min(warmup, len(moves)):] {
		ms += m.Ms
		sims += m.Simulations
	}
	if ms <= 0 {
		return 0
	}
	return float64(sims) / ms
}

func printScale(w io.Writer, rs []ScaleResult, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range rs {
			enc.Encode(r)
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "config\tsimulations/ms\tvisits/ms\t× seq\t× 1x1\t× 1x1 by round\t× seqN\tsteady/ms\tsteady × 1x1\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%.0f\t%s\t\n", r.Config, r.SimulationsPerMs, r.VisitsPerMs, ratioOrDash(r.VsSeq), ratioOrDash(r.Vs1x1), roundsText(r.Vs1x1Rounds), ratioOrDash(r.VsCeiling), r.SteadySimulationsPerMs, ratioOrDash(r.SteadyVs1x1))
	}
	tw.Flush()
}

func scaleChart(o scaleOpts, rs []ScaleResult) error {
	ch := &chart.Chart{Title: fmt.Sprintf("mcts on hex %dx%d: simulations/ms (%s, %s)", o.board, o.board, o.mode, o.transport), YLabel: "simulations/ms"}
	s := chart.Series{Name: "simulations/ms (median of " + strconv.Itoa(o.reps) + ")"}
	for _, r := range rs {
		ch.Categories = append(ch.Categories, r.Config)
		s.Values = append(s.Values, r.SimulationsPerMs)
	}
	ch.Series = []chart.Series{s}
	f, err := os.Create(o.png)
	if err != nil {
		return err
	}
	if err := ch.WritePNG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ratioOrDash prints a ratio, or – when it was not measured.
func ratioOrDash(v float64) string {
	if v == 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
