package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// childArgsEnv carries the mctsbench command a process started by the scale
// test runs.
const childArgsEnv = "SERIEMA_TEST_MCTSBENCH_ARGS"

// runDemoJSON runs demo with args in this process (ranks other than 0
// self-launched as test binaries running the same command) and returns its
// summary.
func runDemoJSON(t *testing.T, args ...string) DemoSummary {
	t.Helper()
	args = append([]string{"demo", "-json"}, args...)
	t.Setenv(microArgsEnv, strings.Join(args, " "))
	var out, errb bytes.Buffer
	if code := run(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var s DemoSummary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	return s
}

// TestDemoSmoke plays short games of every kind: sequential, 1×2 and 2×1 in
// both aggregation modes, and checks the summary's schema and sums.
func TestDemoSmoke(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		cfg  string
		thr  int
	}{
		{"seq", []string{"-seq"}, "seq", 1},
		{"1x2", []string{"-procs", "1", "-threads", "2"}, "1x2", 2},
		{"2x1-trad", []string{"-procs", "2", "-mode", "trad"}, "2x1", 2},
		{"2x1-ovfl-tcp", []string{"-procs", "2", "-mode", "ovfl", "-transport", "tcp"}, "2x1", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := runDemoJSON(t, append([]string{"-board", "5", "-visits", "300", "-seed", "2"}, c.args...)...)
			if s.Config != c.cfg || s.Board != "5x5" || s.VisitsPerMs <= 0 || s.SimulationsPerMs <= 0 {
				t.Errorf("summary %+v", s)
			}
			if s.Winner == "" || len(s.Moves) < 5 || len(s.Moves) > 25 {
				t.Errorf("a 5×5 game to the end: %d moves, winner %q", len(s.Moves), s.Winner)
			}
			if len(s.Threads) != c.thr {
				t.Fatalf("%d threads reported, want %d", len(s.Threads), c.thr)
			}
			var rollouts uint64
			for _, w := range s.Threads {
				rollouts += w.Rollouts
			}
			if rollouts != uint64(300*len(s.Moves)) {
				t.Errorf("%d rollouts started, want %d", rollouts, 300*len(s.Moves))
			}
		})
	}
}

// TestDemoNim: the search's second game, distributed over two processes
// unchanged, played to the end from Nim {2, 3, 4}, which the first player
// wins with perfect play (Bouton); and a bad game or heaps are refused.
func TestDemoNim(t *testing.T) {
	s := runDemoJSON(t, "-game", "nim", "-heaps", "2,3,4", "-procs", "2", "-seed", "3")
	if s.Game != "nim" || s.Board != "heaps 2,3,4" || s.Winner != "first" || len(s.Threads) != 2 {
		t.Errorf("summary %+v", s)
	}
	var out, errb bytes.Buffer
	for _, bad := range [][]string{{"demo", "-game", "chess"}, {"demo", "-game", "nim", "-heaps", "3,x"}, {"demo", "-game", "nim", "-heaps", "300"}} {
		if code := run(bad, nil, &out, &errb); code == 0 {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestDemoTextOutput(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"demo", "-seq", "-board", "4", "-visits", "200", "-moves", "2"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"move   1  black", "move   2  white", "a b c d", "Summary: seq, 4x4, 2 moves, unfinished", "simulations/ms", "thread"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, bad := range [][]string{{"demo", "-mode", "x"}, {"demo", "-board", "20"}, {"demo", "-transport", "ib"}, {"demo", "-moves", "-1"}, {"scale", "-configs", "3y2"}} {
		if code := run(bad, nil, &out, &errb); code == 0 {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestHTPCommand drives `mctsbench htp` with a scripted session, with the
// sequential search and with a 2-process job behind genmove.
func TestHTPCommand(t *testing.T) {
	for _, c := range [][]string{{"-seq"}, {"-procs", "2"}} {
		t.Run(c[0], func(t *testing.T) {
			args := append([]string{"htp", "-visits", "500", "-seed", "3"}, c...)
			t.Setenv(microArgsEnv, strings.Join(args, " "))
			// Black has a1-a3 and only a4 wins at once: genmove must find
			// it; then the game is over and White's moves are refused.
			in := "name\nboardsize 4\nplay b a1\nplay w d1\nplay b a2\nplay w d2\nplay b a3\nplay w d3\n" +
				"genmove b\nplay w a4\nplay w b4\nshowboard\nquit\n"
			var out, errb bytes.Buffer
			if code := run(args, strings.NewReader(in), &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			replies := strings.Split(out.String(), "\n\n")
			if len(replies) < 12 {
				t.Fatalf("replies %q", replies)
			}
			want := []string{"= seriema-mcts", "= ", "= ", "= ", "= ", "= ", "= ", "= ", "= a4", "? hex: the game is over", "? hex: the game is over"}
			for i, w := range want {
				if replies[i] != w {
					t.Errorf("reply %d: %q, want %q", i, replies[i], w)
				}
			}
			if !strings.Contains(replies[11], "X") || !strings.Contains(replies[11], "O") {
				t.Errorf("showboard: %q", replies[11])
			}
		})
	}
}

// TestHTPTimeControl: with a visit budget no search could finish, genmove
// still answers, and right, once the clock of time_settings (or -time)
// runs out, sequential and distributed, and undo takes the move back.
func TestHTPTimeControl(t *testing.T) {
	for _, c := range [][]string{{"-seq"}, {"-procs", "2"}, {"-procs", "2", "-time", "100ms"}} {
		t.Run(strings.Join(c, ""), func(t *testing.T) {
			args := append([]string{"htp", "-visits", "2000000000", "-seed", "3"}, c...)
			t.Setenv(microArgsEnv, strings.Join(args, " "))
			in := "boardsize 4\nplay b a1\nplay w d1\nplay b a2\nplay w d2\nplay b a3\nplay w d3\n" +
				"time_settings 2 0 0\ngenmove b\nfinal_score\nundo\nfinal_score\nquit\n"
			var out, errb bytes.Buffer
			if code := run(args, strings.NewReader(in), &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			replies := strings.Split(out.String(), "\n\n")
			want := []string{"= ", "= ", "= ", "= ", "= ", "= ", "= ", "= ", "= a4", "= B+", "= ", "? the game is not over"}
			if len(replies) < len(want) {
				t.Fatalf("replies %q", replies)
			}
			for i, w := range want {
				if replies[i] != w {
					t.Errorf("reply %d: %q, want %q", i, replies[i], w)
				}
			}
		})
	}
}

// TestSteadyRate: the rate past the warm-up moves, none when no move is
// left.
func TestSteadyRate(t *testing.T) {
	moves := []MoveWork{{Ms: 10, Simulations: 1000}, {Ms: 5, Simulations: 1000}, {Ms: 5, Simulations: 1000}}
	for warmup, want := range map[int]float64{0: 150, 1: 200, 3: 0, 9: 0} {
		if got := steadyRate(moves, warmup); got != want {
			t.Errorf("past %d moves: %v simulations/ms, want %v", warmup, got, want)
		}
	}
}

// TestScaleRounds: each round's run is divided by the same round's 1x1
// run, so a spell that slowed one 1x1 run shows as one high ratio, while
// the ratio of the medians hides it; runs stay in the order run.
func TestScaleRounds(t *testing.T) {
	configs := []string{"seq", "1x1", "2x1"}
	sims := [][]float64{{1900, 1950, 1800}, {1000, 1500, 2000}, {3000, 1600, 2200}}
	steady := [][]float64{{2000, 2000, 2000}, {1000, 1000, 1000}, {1500, 1500, 1500}}
	visits := [][]float64{{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}
	rs := scaleResults(configs, sims, steady, visits, 3)
	two := rs[2]
	if math.Abs(two.Vs1x1-2200.0/1500) > 1e-9 || two.SimulationsPerMs != 2200 || two.SteadyVs1x1 != 1.5 {
		t.Errorf("2x1: %+v", two)
	}
	want := []float64{3, 1600.0 / 1500, 1.1}
	if len(two.Vs1x1Rounds) != 3 {
		t.Fatalf("2x1 by round: %v", two.Vs1x1Rounds)
	}
	for k, w := range want {
		if math.Abs(two.Vs1x1Rounds[k]-w) > 1e-9 {
			t.Errorf("round %d: %v, want %v", k, two.Vs1x1Rounds[k], w)
		}
	}
	if !slices.Equal(two.Runs, sims[2]) || !slices.Equal(sims[2], []float64{3000, 1600, 2200}) {
		t.Errorf("runs %v (input now %v): the order run, untouched", two.Runs, sims[2])
	}
	if got := roundsText(two.Vs1x1Rounds); got != "1.07–3.00" {
		t.Errorf("roundsText %q", got)
	}
	if got := roundsText(rs[1].Vs1x1Rounds); got != "1.00" {
		t.Errorf("1x1 against itself: %q", got)
	}
	// Without a 1x1 configuration there are no rounds to pair.
	rs = scaleResults([]string{"seq", "2x1"}, [][]float64{sims[0], sims[2]}, [][]float64{steady[0], steady[2]}, [][]float64{visits[0], visits[2]}, 3)
	if rs[1].Vs1x1Rounds != nil || rs[1].Vs1x1 != 0 || roundsText(nil) != "–" {
		t.Errorf("no 1x1: %+v", rs[1])
	}
}

// TestScaleSmoke runs the scaling figure with tiny runs and checks the JSON
// and the PNG.
func TestScaleSmoke(t *testing.T) {
	dir := t.TempDir()
	pngPath := filepath.Join(dir, "scale.png")
	o := scaleOpts{configs: []string{"seq", "1x1", "2x1"}, board: 5, visits: 300, moves: 3, warmup: 1, reps: 1, mode: "trad", transport: "shm", seed: 1, png: pngPath}
	o.command = func(args []string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childArgsEnv+"="+strings.Join(args, " "))
		return cmd
	}
	var progress bytes.Buffer
	rs, err := runScale(o, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Config != "seq" || rs[0].VsSeq != 1 || rs[1].Vs1x1 != 1 || rs[2].SimulationsPerMs <= 0 {
		t.Fatalf("results %+v", rs)
	}
	for _, r := range rs {
		if r.SteadySimulationsPerMs <= 0 || r.Warmup != 1 {
			t.Errorf("%s: steady figure %v past %d moves, want one past 1", r.Config, r.SteadySimulationsPerMs, r.Warmup)
		}
	}
	for _, r := range rs {
		if len(r.Runs) != 1 || r.Runs[0] != r.SimulationsPerMs {
			t.Errorf("%s: runs %v, median %v", r.Config, r.Runs, r.SimulationsPerMs)
		}
		if len(r.Vs1x1Rounds) != 1 || math.Abs(r.Vs1x1Rounds[0]-r.Vs1x1) > 1e-9 {
			t.Errorf("%s: one round, ratio %v, but by round %v", r.Config, r.Vs1x1, r.Vs1x1Rounds)
		}
	}
	if rs[0].SteadyVsSeq != 1 || rs[1].SteadyVs1x1 != 1 {
		t.Errorf("steady ratios of the references: %v × seq, %v × 1x1; want 1", rs[0].SteadyVsSeq, rs[1].SteadyVs1x1)
	}
	if err := scaleChart(o, rs); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	printScale(&b, rs, true)
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["config"] == nil || m["simulations_per_ms"] == nil {
			t.Errorf("scale JSON line %q: %v", l, err)
		}
	}
}

// TestSoakShort runs the soak for a few seconds: 3 processes × 2 threads,
// every primitive, sequence-checked; make test also runs it for 30 s
// without the race detector.
func TestSoakShort(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			args := []string{"soak", "-procs", "3", "-threads", "2", "-duration", "2s", "-transport", tr, "-json"}
			t.Setenv(microArgsEnv, strings.Join(args, " "))
			var out, errb bytes.Buffer
			code := run(args, nil, &out, &errb)
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if code != 0 || len(lines) != 3 {
				t.Fatalf("exit %d, %d report lines:\n%s\n%s", code, len(lines), out.String(), errb.String())
			}
			for i, l := range lines {
				var r SoakReport
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatal(err)
				}
				if r.Rank != i || r.Errors != 0 || r.Sent == 0 || r.Received == 0 || r.Returns == 0 || r.MaxRSSKB == 0 || r.Goroutines == 0 {
					t.Errorf("rank %d report %+v", i, r)
				}
			}
		})
	}
}
