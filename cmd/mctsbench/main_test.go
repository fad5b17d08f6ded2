package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/internal/jobtest"
	"github.com/seriema-go/seriema/rdmo"
)

// The smoke tests run the real binary path: the test binary re-executes
// itself as the sender, so TestMain dispatches like main.
func TestMain(m *testing.M) {
	if os.Getenv(pipeEchoEnv) != "" {
		os.Exit(pipeEcho())
	}
	if env := os.Getenv(rawRoleEnv); env != "" {
		os.Exit(senderMain(env, os.Stdin, os.Stdout, os.Stderr))
	}
	if env := os.Getenv(limitEnv); env != "" { // the limit and tcp-plain peers
		os.Exit(peerMain(env, os.Stderr))
	}
	if env := os.Getenv(connPeerEnv); env != "" { // the far end of mctsbench conn
		os.Exit(connPeer(env))
	}
	if env := os.Getenv(rdmoTargetEnv); env != "" { // the target of mctsbench rdmo
		os.Exit(rdmoTargetMain(env))
	}
	if env := os.Getenv(preTouchEnv); env != "" { // TestPreTouchHeap's fresh process
		os.Exit(preTouchChild(env))
	}
	// A rank self-launched by the send benchmark runs the same micro
	// command as the test that started it.
	if args := os.Getenv(microArgsEnv); args != "" && underLauncher() {
		os.Exit(run(strings.Fields(args), os.Stdin, os.Stdout, os.Stderr))
	}
	// A process started by the scale test runs the command it was given
	// (and its self-launched ranks, which inherit it, the same).
	if args := os.Getenv(childArgsEnv); args != "" {
		os.Exit(run(strings.Fields(args), os.Stdin, os.Stdout, os.Stderr))
	}
	jobtest.Main(m)
}

// microArgsEnv carries the mctsbench command (micro or latency) a
// self-launched test rank must run.
const microArgsEnv = "SERIEMA_TEST_MICRO_ARGS"

// TestMicroSendUnderMpirun: the send benchmark as two ranks of mpirun.
func TestMicroSendUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun is not installed (Debian package openmpi-bin; .ci/run installs it)")
	}
	args := "micro -mode send -sizes 64 -n 500 -reps 1 -json"
	cmd := exec.Command(mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", microArgsEnv+"="+args, os.Args[0], "-test.run=^$")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	var r Result
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil || r.Mode != "send" || r.CallsPerS <= 0 {
		t.Fatalf("want one send result from rank 0, got %q (%v)", out, err)
	}
}

// TestMicroSendSmoke runs the fabric benchmarks (send, write, trad, ovfl)
// for real: self-launched processes, tiny N, over shm and tcp; in a job
// of four, ranks 2 and 3 only poll, backing off.
func TestMicroSendSmoke(t *testing.T) {
	for _, c := range []struct {
		mode, tr string
		procs    int
	}{{"send", "shm", 2}, {"send", "tcp", 2}, {"write", "shm", 2}, {"write", "tcp", 2}, {"trad", "shm", 2}, {"ovfl", "tcp", 2}, {"send", "tcp", 4}, {"write", "shm", 4}} {
		mode, tr := c.mode, c.tr
		t.Run(fmt.Sprintf("%s-%s-%d", mode, tr, c.procs), func(t *testing.T) {
			args := []string{"micro", "-mode", mode, "-sizes", "8,64", "-n", "500", "-reps", "1", "-transport", tr, "-procs", strconv.Itoa(c.procs), "-json"}
			t.Setenv(microArgsEnv, strings.Join(args, " "))
			runMicro(t, args, mode, tr, 2)
		})
	}
}

// TestMicroModesOneJob: several fabric modes run for real in one job still
// give their results mode by mode, size by size, each the median of its
// own repetitions (the order of the runs themselves is
// TestFabricModesTakeTurns's).
func TestMicroModesOneJob(t *testing.T) {
	args := []string{"micro", "-mode", "write,trad,ovfl", "-sizes", "8,64", "-n", "500", "-reps", "2", "-json"}
	t.Setenv(microArgsEnv, strings.Join(args, " "))
	var out, errb bytes.Buffer
	if code := run(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r Result
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Reps != 2 || r.CallsPerS <= 0 {
			t.Fatalf("bad result %q: %v", l, err)
		}
		got = append(got, fmt.Sprintf("%s/%d", r.Mode, r.Size))
	}
	if want := "write/8 write/64 trad/8 trad/64 ovfl/8 ovfl/64"; strings.Join(got, " ") != want {
		t.Errorf("results %v, want %s", got, want)
	}
}

// fakeJob is one rank 0 alone: barriers pass, every run takes a moment.
type fakeJob struct{}

func (fakeJob) Barrier(context.Context) error { return nil }
func (fakeJob) Rank() int                     { return 0 }
func (fakeJob) Transports() string            { return "shm" }

// The runs themselves alternate between the modes within every repetition.
func TestFabricModesTakeTurns(t *testing.T) {
	var st atomic.Pointer[runStats]
	var order []string
	spec := rawSpec{sizes: []int{8, 64}, n: 10, reps: 2}
	rs, err := runFabricModesOn(context.Background(), fakeJob{}, []string{"write", "ovfl"}, spec, &st, func(mode string, size int) error {
		order = append(order, fmt.Sprintf("%s/%d", mode, size))
		s := st.Load()
		s.start.Store(1)
		s.end.Store(int64(1 + size)) // a rate to tell the runs apart
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "write/8 ovfl/8 write/8 ovfl/8 write/64 ovfl/64 write/64 ovfl/64"; strings.Join(order, " ") != want {
		t.Errorf("runs %v, want %s", order, want)
	}
	if len(rs) != 4 || rs[0].Mode != "write" || rs[0].Size != 8 || rs[1].Mode != "write" || rs[1].Size != 64 || rs[2].Mode != "ovfl" || rs[0].Reps != 2 || rs[0].CallsPerS <= rs[1].CallsPerS {
		t.Errorf("results %+v", rs)
	}
}

// limit and raw take turns too: one repetition of each per round.
func TestPairModesTakeTurns(t *testing.T) {
	var order []string
	fake := func(mode string, rate float64) func(rawSpec) ([]Result, error) {
		round := 0
		return func(s rawSpec) ([]Result, error) {
			if s.reps != 1 {
				t.Errorf("%s asked for %d repetitions at once", mode, s.reps)
			}
			order = append(order, mode)
			round++
			var rs []Result
			for _, size := range s.sizes {
				rs = append(rs, newResult(mode, "shm", size, s.n, []float64{rate * float64(round)}))
			}
			return rs, nil
		}
	}
	spec := rawSpec{sizes: []int{8, 64}, n: 10, reps: 3}
	rs, err := takeTurns([]string{"limit", "raw"}, spec, map[string]func(rawSpec) ([]Result, error){"limit": fake("limit", 100), "raw": fake("raw", 10)})
	if err != nil {
		t.Fatal(err)
	}
	if want := "limit raw limit raw limit raw"; strings.Join(order, " ") != want {
		t.Errorf("runs %v, want %s", order, want)
	}
	if len(rs) != 4 || rs[0].Mode != "limit" || rs[1].Size != 64 || rs[2].Mode != "raw" || rs[0].CallsPerS != 200 || rs[3].CallsPerS != 20 || rs[0].Reps != 3 {
		t.Errorf("results %+v, want limit then raw, the median of rounds 1–3 (× 2)", rs)
	}
}

func TestBadArgumentsFailClearly(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"bogus"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown subcommand") {
		t.Errorf("unknown subcommand: %d %q", code, errb.String())
	}
	if code := run(nil, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage") {
		t.Errorf("no arguments: %d %q", code, out.String())
	}
	errb.Reset()
	if code := run([]string{"micro", "-mode", "bogus"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown mode") {
		t.Errorf("unknown mode: %d %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"micro", "-mode", "raw,write,raw"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "names raw twice") {
		t.Errorf("a mode named twice: %d %q", code, errb.String())
	}
	if code := run([]string{"micro", "-sizes", "8,x"}, nil, &out, &errb); code != 2 {
		t.Errorf("bad sizes accepted")
	}
	// Each bad flag is named with its value, before any process starts.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"micro", "-n", "-1"}, "micro: -n -1 (want ≥ 10)"},
		{[]string{"micro", "-reps", "0"}, "micro: -reps 0 (want ≥ 1)"},
		{[]string{"micro", "-sizes", "8,x"}, `micro: -sizes: bad size "x"`},
		{[]string{"latency", "-n", "3"}, "latency: -n 3 (want ≥ 10)"},
		{[]string{"rdmo", "-n", "1"}, "rdmo: -n 1 (want ≥ 10)"},
		{[]string{"conn", "-stream-mb", "0"}, "conn: -stream-mb 0 (want ≥ 1)"},
		{[]string{"shuffle", "repartition", "-config", "x"}, `shuffle: -config "x" (want se or me)`},
		{[]string{"shuffle", "repartition", "-buffer", "96"}, "shuffle: -buffer 96 holds no record of -record 100 (104 bytes with its length)"},
		{[]string{"shuffle", "join", "-buffer", "36"}, "shuffle: -buffer or -depth: shuffle: bad config: BufferBytes 36"},
		{[]string{"shuffle", "broadcast", "-depth", "5000"}, "Depth 5000 (want 1…4096)"},
	} {
		out.Reset()
		errb.Reset()
		if code := run(c.args, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), "rank") {
			t.Errorf("%q: exit %d, %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

func TestStatistics(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4 = %v", m)
	}
	xs := make([]float64, 1001)
	for i := range xs {
		xs[len(xs)-1-i] = float64(i)
	}
	for p, want := range map[float64]float64{0: 0, 50: 500, 99: 990, 99.9: 999, 100: 1000} {
		if got := percentile(xs, p); math.Abs(got-want) > 1e-9 {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
}

func TestResultJSONSchema(t *testing.T) {
	var b bytes.Buffer
	r := newResult("raw", "shm", 64, 1000, []float64{1e6, 3e6, 2e6})
	if err := printResults(&b, []Result{r}, true); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mode", "size", "transport", "calls_per_s", "mb_per_s"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b.String())
		}
	}
	if m["calls_per_s"].(float64) != 2e6 || m["mb_per_s"].(float64) != 128 {
		t.Errorf("median or MB/s wrong: %s", b.String())
	}
}

// TestMicroRawSmoke runs the raw benchmark for real, cross-process, with a
// tiny N, over both transports.
func TestMicroRawSmoke(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			args := []string{"micro", "-mode", "raw", "-sizes", "8,256", "-n", "2000", "-reps", "1", "-transport", tr, "-json"}
			runMicro(t, args, "raw", tr, 2)
		})
	}
}

// TestMicroLimitSmoke: the limit peers (a shared-memory ring of sealed
// records, a plain Go TCP frame stream) run as two processes and report.
func TestMicroLimitSmoke(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			args := []string{"micro", "-mode", "limit", "-sizes", "8,64", "-n", "2000", "-reps", "1", "-transport", tr, "-json"}
			runMicro(t, args, "limit", tr, 2)
		})
	}
}

// runMicro runs a micro command and checks it printed want JSON results of
// mode over transport tr, each with a positive rate.
func runMicro(t *testing.T, args []string, mode, tr string, want int) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != want {
		t.Fatalf("want %d results, got %q", want, out.String())
	}
	for _, l := range lines {
		var r Result
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Mode != mode || r.Transport != resultTransport(tr) || r.CallsPerS <= 0 {
			t.Fatalf("bad result %q: %v", l, err)
		}
	}
}

// TestLatencySmoke runs the latency command for real with a tiny N and
// checks its JSON schema (p50 ≤ p99 ≤ p99.9, all positive).
func TestLatencySmoke(t *testing.T) {
	for _, tr := range append(testTransports[:len(testTransports):len(testTransports)], "tcp-plain") {
		t.Run(tr, func(t *testing.T) {
			mode := "call_return"
			if tr == "tcp-plain" {
				mode = "ping_pong" // the plain Go TCP peer
			}
			args := []string{"latency", "-size", "8", "-n", "300", "-transport", tr, "-json"}
			t.Setenv(microArgsEnv, strings.Join(args, " "))
			var out, errb bytes.Buffer
			if code := run(args, nil, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var r map[string]any
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("%q: %v", out.String(), err)
			}
			p50, _ := r["p50_ns"].(float64)
			p99, _ := r["p99_ns"].(float64)
			p999, _ := r["p999_ns"].(float64)
			if r["mode"] != mode || r["transport"] != resultTransport(tr) || p50 <= 0 || p50 > p99 || p99 > p999 {
				t.Fatalf("bad latency result %s", out.String())
			}
		})
	}
}

// TestIdleMeasures runs mctsbench idle for real (self-launched processes,
// a 1 s window): one CPU share per rank, plausible for an idle process,
// then the wake-up round trips, with the plain Go TCP peer's over tcp, or
// with -wakes 0 none.
func TestIdleMeasures(t *testing.T) {
	for _, tc := range []struct {
		transport    string
		procs, wakes int
		modes        []string // after the idle lines
	}{
		{"shm", 2, 3, []string{"wake", "pipe-wake"}},
		{"tcp", 2, 3, []string{"wake", "pipe-wake", "tcp-plain-wake"}},
		{"tcp", 3, 0, nil},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.transport, tc.procs), func(t *testing.T) {
			args := []string{"idle", "-procs", strconv.Itoa(tc.procs), "-duration", "1s", "-wakes", strconv.Itoa(tc.wakes), "-transport", tc.transport, "-json"}
			t.Setenv(microArgsEnv, strings.Join(args, " "))
			var out, errb bytes.Buffer
			if code := run(args, nil, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != tc.procs+len(tc.modes) {
				t.Fatalf("want %d idle lines and %v, got %q", tc.procs, tc.modes, out.String())
			}
			for i, l := range lines {
				var r IdleResult
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("bad line %q: %v", l, err)
				}
				switch {
				case i < tc.procs && (r.Mode != "idle" || r.Rank != i || r.Procs != tc.procs || r.Transport != tc.transport || r.WindowS < 1 || r.CPUShare <= 0 || r.CPUShare > 1):
					t.Fatalf("idle line %d: %+v", i, r)
				case i >= tc.procs && (r.Mode != tc.modes[i-tc.procs] || r.N != tc.wakes || r.P50ns <= 0 || r.MaxNs < r.P50ns):
					t.Fatalf("line %d: %+v, want mode %s", i, r, tc.modes[i-tc.procs])
				}
			}
		})
	}
}

// TestConnSmoke runs mctsbench conn for real with tiny sizes: one JSON line
// per mode and pattern, positive rates, and rconn on its rings (connMode
// refuses a conn-mode connection that is not).
func TestConnSmoke(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"conn", "-n", "200", "-stream-sizes", "64,4096", "-stream-mb", "1", "-json"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 9 {
		t.Fatalf("want 9 lines (3 modes × ping-pong and 2 streams), got %q", out.String())
	}
	for _, l := range lines {
		var r ConnResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		ok := r.Pattern == "pingpong" && r.RTPerS > 0 && r.P50ns > 0 && r.P99ns >= r.P50ns || r.Pattern == "stream" && r.MBPerS > 0
		if !ok || r.Mode != "conn" && r.Mode != "unix" && r.Mode != "tcp" {
			t.Errorf("bad line %s", l)
		}
	}
}

// TestRDMOSmoke runs mctsbench rdmo for real with few operations over every
// test transport: per transport and initiator count, the write reference
// and each of the five operations as rdmo and rdma, with the issue's
// fields filled; goal lines for the network transports only.
func TestRDMOSmoke(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"rdmo", "-n", "60", "-initiators", "1,2", "-transports", strings.Join(testTransports, ","), "-json"}
	if code := run(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	results, direct := map[string]int{}, map[string]int{}
	goals := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["goal"]; ok {
			var g RDMOGoal
			json.Unmarshal([]byte(l), &g)
			if g.Value <= 0 || g.Limit <= 0 {
				t.Errorf("bad goal line %s", l)
			}
			goals[g.Transport]++
			continue
		}
		var r RDMOResult
		json.Unmarshal([]byte(l), &r)
		if r.P50ns <= 0 || r.P99ns < r.P50ns || r.OpsPerS <= 0 || (r.Impl != "rdmo" && r.Impl != "rdma" && r.Impl != "rdmo-direct") {
			t.Errorf("bad line %s", l)
		}
		// An RDMO is a request and its answer; one the initiator runs
		// itself sends nothing (its one describe RDMO is in the warm-up).
		if r.Impl == "rdmo-direct" && r.MessagesPerOp != 0 || r.Impl != "rdmo-direct" && r.MessagesPerOp < 2 {
			t.Errorf("%s %s over %s: %.2f messages per operation", r.Op, r.Impl, r.Transport, r.MessagesPerOp)
		}
		if r.Impl == "rdmo-direct" {
			direct[r.Transport]++
		}
		if r.Impl == "rdma" && r.Op == "SlottedAppend" && r.MessagesPerOp < 8 {
			t.Errorf("one-sided SlottedAppend counted %.1f messages, at least 8 expected", r.MessagesPerOp)
		}
		results[r.Transport]++
	}
	for _, tr := range testTransports {
		name := resultTransport(tr)
		// 11 per initiator count, and 4 direct ones where memory is shared.
		want := 2 * 11
		if tr == "shm" {
			want += 2 * 4
		}
		if results[name] != want || direct[name] != want-2*11 {
			t.Errorf("%s: %d result lines (%d direct), want %d (%d)", name, results[name], direct[name], want, want-2*11)
		}
		if want := 8; tr != "shm" && goals[name] != want {
			t.Errorf("%s: %d goal lines, want %d", name, goals[name], want)
		}
	}
	if goals["shm"] != 0 {
		t.Errorf("goal lines over shm: %d", goals["shm"])
	}
}

// TestRDMOTargetKilled: the target process of RDMOs is SIGKILLed while an
// initiator issues them, over every test transport (and over shm with the
// initiator running them itself, on the target's mapped memory): every
// later RDMO fails with rdmo.ErrTargetLost within seconds, none hangs.
func TestRDMOTargetKilled(t *testing.T) {
	for _, tr := range append(testTransports, "shm-direct") {
		t.Run(tr, func(t *testing.T) {
			w, err := newRDMOWorld(strings.TrimSuffix(tr, "-direct"), 1, 100)
			if err != nil {
				t.Fatal(err)
			}
			defer w.close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := w.sides[0].client
			if strings.HasSuffix(tr, "-direct") {
				c = w.sides[0].direct
				defer func() {
					if s := c.Stats(); s.Direct == 0 {
						t.Errorf("the direct client ran nothing itself: %+v", s)
					}
				}()
			}
			pairs := []rdmo.KeyDelta{{Key: 1, Delta: 1}}
			if _, code, err := c.ScatterAndAccumulate(ctx, w.inst.Acc, pairs); err != nil || code != rdmo.OK {
				t.Fatalf("before the kill: %v %v", code, err)
			}
			done := make(chan error, 1)
			go func() {
				for {
					if _, _, err := c.ScatterAndAccumulate(ctx, w.inst.Acc, pairs); err != nil {
						done <- err
						return
					}
				}
			}()
			time.Sleep(20 * time.Millisecond)
			w.target.Process.Kill()
			select {
			case err := <-done:
				if !errors.Is(err, rdmo.ErrTargetLost) {
					t.Fatalf("RDMO to a killed target: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("RDMOs to a killed target still running (or hung) after 20 s")
			}
			if _, _, err := c.ScatterAndAccumulate(ctx, w.inst.Acc, pairs); !errors.Is(err, rdmo.ErrTargetLost) {
				t.Fatalf("RDMO after the target died: %v", err)
			}
		})
	}
}

// TestShuffleReportsInImplOrder: a rank that runs ahead (memcpy needs no
// peers) sends its next impl's report before rank 0 has collected this
// one's; rank 0 keeps it for later instead of counting it now.
func TestShuffleReportsInImplOrder(t *testing.T) {
	c := make(chan shuffleReport, 4)
	c <- shuffleReport{Rank: 1, Impl: "socket"}
	c <- shuffleReport{Rank: 1, Impl: "memcpy"}
	c <- shuffleReport{Rank: 0, Impl: "socket"}
	c <- shuffleReport{Rank: 0, Impl: "memcpy"}
	var q reportQueue
	for _, want := range []shuffleReport{{Rank: 1, Impl: "socket"}, {Rank: 0, Impl: "socket"}, {Rank: 1, Impl: "memcpy"}, {Rank: 0, Impl: "memcpy"}} {
		impl := want.Impl
		got, err := q.next(context.Background(), c, impl)
		if err != nil || got.Rank != want.Rank || got.Impl != impl {
			t.Fatalf("next %s: %+v, %v; want rank %d", impl, got, err, want.Rank)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.next(ctx, c, "wr"); !errors.Is(err, context.Canceled) {
		t.Fatalf("no report left: %v", err)
	}
}

// TestShuffleSmoke runs mctsbench shuffle for real, both patterns and the
// two-stage join, our three designs in both configurations and the socket
// peer, with small data: every line has the fields and says the
// data arrived intact (the join: its result is the single-process one).
// With -reps and -buffers, each line is one implementation and window mode,
// the median of its runs within their range.
func TestShuffleSmoke(t *testing.T) {
	for _, c := range []struct {
		name        string
		args        []string
		lines, reps int
	}{
		{"repartition", []string{"repartition", "-impl", "wr,rd,sr,socket,memcpy"}, 5, 1},
		{"broadcast", []string{"broadcast", "-impl", "wr,rd,sr,socket", "-threads", "2", "-config", "me", "-transport", "tcp"}, 4, 1},
		{"join", []string{"join", "-impl", "wr,rd,sr,socket", "-threads", "2", "-orders", "5000"}, 4, 1},
		{"reps", []string{"repartition", "-impl", "wr,rd,socket", "-buffers", "fixed,adaptive", "-reps", "3"}, 5, 3},
		{"join-reps", []string{"join", "-impl", "sr,socket", "-orders", "5000", "-reps", "2"}, 2, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := shuffleLines(t, c.args, c.lines)
			buffers := map[string]int{}
			for _, r := range rs {
				v := r.GBPerSPerProc
				measured := v > 0 && r.Bytes == 2<<20
				if r.Pattern == "join" {
					v = r.Seconds
					measured = v > 0 // ok: the result equals the single-process run's
				}
				if !r.OK || !measured || r.Pattern != c.args[0] || r.Procs != 2 || r.Reps != c.reps || r.Min > v || v > r.Max {
					t.Errorf("bad line %+v", r)
				}
				buffers[r.Buffers]++
			}
			if c.name == "reps" && (buffers["fixed"] != 2 || buffers["adaptive"] != 2 || buffers[""] != 1) {
				t.Errorf("lines by window mode %v, want wr and rd in each and the socket without", buffers)
			}
		})
	}
}

// shuffleLines runs mctsbench shuffle with args and small data (2 MiB of
// 64-byte records per process) as a job of self-launched processes, and
// returns its JSON lines, of which there must be lines.
func shuffleLines(t *testing.T, args []string, lines int) []ShuffleResult {
	t.Helper()
	args = append(append([]string{"shuffle"}, args...), "-mb", "2", "-record", "64", "-json")
	t.Setenv(microArgsEnv, strings.Join(args, " "))
	var out, errb bytes.Buffer
	if code := run(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	ls := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(ls) != lines {
		t.Fatalf("%d lines, want %d: %q", len(ls), lines, out.String())
	}
	rs := make([]ShuffleResult, len(ls))
	for i, l := range ls {
		if err := json.Unmarshal([]byte(l), &rs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// TestFoldShuffle: make bench runs the MPI peer and our implementations in
// turns, one command per round; the report folds each cell's lines into
// one median, and keeps cells apart (here by impl and by window mode).
func TestFoldShuffle(t *testing.T) {
	mpi := func(gb float64) ShuffleResult {
		return ShuffleResult{Pattern: "repartition", Impl: "mpi", Config: "-", Transport: "mpi", Procs: 2, Threads: 1, Bytes: 512 << 20, GBPerSPerProc: gb, OK: true, Reps: 1, Min: gb, Max: gb}
	}
	wr := func(gb float64, buffers string) ShuffleResult {
		return ShuffleResult{Pattern: "repartition", Impl: "wr", Config: "se", Buffers: buffers, Transport: "shm", Procs: 2, Threads: 1, Bytes: 512 << 20, GBPerSPerProc: gb, OK: true, Reps: 1}
	}
	// A line that is already a median of its own runs keeps its range.
	ranged := wr(3, "fixed")
	ranged.Reps, ranged.Min, ranged.Max = 3, 0.5, 3.5
	in := []ShuffleResult{wr(2, "fixed"), wr(1.5, "adaptive"), mpi(4), ranged, wr(1, "adaptive"), mpi(2), wr(1, "fixed"), mpi(3)}
	in[5].OK = false
	out := foldShuffle(in)
	if len(out) != 3 {
		t.Fatalf("%d lines, want 3 (wr fixed, wr adaptive, mpi): %+v", len(out), out)
	}
	for i, want := range []struct {
		impl, buffers string
		gb, lo, hi    float64
		reps          int
		ok            bool
	}{{"wr", "fixed", 2, 0.5, 3.5, 5, true}, {"wr", "adaptive", 1.25, 1, 1.5, 2, true}, {"mpi", "", 3, 2, 4, 3, false}} {
		r := out[i]
		if r.Impl != want.impl || r.Buffers != want.buffers || r.GBPerSPerProc != want.gb || r.Min != want.lo || r.Max != want.hi || r.Reps != want.reps || r.OK != want.ok {
			t.Errorf("line %d: %s/%s %.2f GB/s in [%.2f, %.2f] of %d runs ok=%v, want %+v", i, r.Impl, r.Buffers, r.GBPerSPerProc, r.Min, r.Max, r.Reps, r.OK, want)
		}
	}
	if one := foldShuffle(in[:1]); len(one) != 1 || one[0] != in[0] {
		t.Errorf("a cell of one line changed: %+v", one)
	}
}

// TestShuffleChecks: a run is ok only when every process received
// exactly what was sent to it, and a join only when every group's sum, at
// its owner, is the single-process query's; one record lost, a checksum
// off, a report missing, a sum off or a group at the wrong process each
// make it not ok.
func TestShuffleChecks(t *testing.T) {
	// Process 0 sent 3 records (sum 10) to itself and 2 (sum 7) to 1;
	// process 1 sent 1 (sum 5) to 0 and 4 (sum 9) to itself.
	good := func() []shuffleReport {
		return []shuffleReport{
			{Rank: 0, Sent: [][2]uint64{{3, 10}, {2, 7}}, Got: [2]uint64{4, 15}},
			{Rank: 1, Sent: [][2]uint64{{1, 5}, {4, 9}}, Got: [2]uint64{6, 16}},
		}
	}
	if !patternChecked(good(), 2) {
		t.Fatal("a consistent run is not ok")
	}
	for name, edit := range map[string]func(rs []shuffleReport) []shuffleReport{
		"a record lost":  func(rs []shuffleReport) []shuffleReport { rs[1].Got[0]--; return rs },
		"a checksum off": func(rs []shuffleReport) []shuffleReport { rs[0].Got[1]++; return rs },
		"a report absent": func(rs []shuffleReport) []shuffleReport {
			rs[0].Got = rs[0].Sent[0] // consistent with its own records alone
			return rs[:1]
		},
		"a sender's count": func(rs []shuffleReport) []shuffleReport {
			rs[0].Sent[1][0]++
			return rs
		},
	} {
		if patternChecked(edit(good()), 2) {
			t.Errorf("%s: ok", name)
		}
	}

	o := shuffleOpts{procs: 2, orders: 50}
	want := joinWant(o)
	if want[1] == 0 || want[2] == 0 {
		t.Fatalf("groups 1 and 2 are empty (%v): the cases below would test nothing", want)
	}
	groups := func() []shuffleReport { // group p at process p mod 2
		rs := []shuffleReport{{Rank: 0, Groups: make([]uint64, joinPriorities)}, {Rank: 1, Groups: make([]uint64, joinPriorities)}}
		for p, v := range want {
			rs[p%2].Groups[p] = v
		}
		return rs
	}
	if !joinChecked(groups(), o) {
		t.Fatal("the join's own result is not ok")
	}
	for name, edit := range map[string]func(rs []shuffleReport){
		"a sum off":                  func(rs []shuffleReport) { rs[0].Groups[2]++ },
		"a group at the wrong owner": func(rs []shuffleReport) { rs[0].Groups[1], rs[1].Groups[1] = rs[1].Groups[1], 0 },
		"a group missing":            func(rs []shuffleReport) { rs[1].Groups = rs[1].Groups[:joinPriorities-1] },
	} {
		rs := groups()
		edit(rs)
		if joinChecked(rs, o) {
			t.Errorf("join with %s: ok", name)
		}
	}
}

func TestMedianShuffle(t *testing.T) {
	rs := []ShuffleResult{{Pattern: "join", Seconds: 3, OK: true}, {Pattern: "join", Seconds: 1, OK: true}, {Pattern: "join", Seconds: 2, OK: false}}
	m := medianShuffle(rs)
	if m.Seconds != 2 || m.Min != 1 || m.Max != 3 || m.Reps != 3 || m.OK {
		t.Errorf("join: %+v, want median 2 in [1, 3] of 3 runs, not ok", m)
	}
	rs = []ShuffleResult{{Pattern: "repartition", GBPerSPerProc: 4, OK: true}, {Pattern: "repartition", GBPerSPerProc: 1, OK: true}}
	if m := medianShuffle(rs); m.GBPerSPerProc != 2.5 || m.Min != 1 || m.Max != 4 || !m.OK {
		t.Errorf("repartition: %+v, want median 2.5 in [1, 4], ok", m)
	}
}

// The search commands raise the collector's target unless GOGC chooses one.
func TestSearchGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	start := func() {
		t.Helper()
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		var o demoOpts
		demoFlags(fs, &o)
		if err := fs.Parse([]string{"-seq"}); err != nil {
			t.Fatal(err)
		}
		var ns int64
		e, err := startEngine(o, nil, &ns, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		e.close()
	}
	t.Setenv("GOGC", "")
	start()
	if got := debug.SetGCPercent(100); got != searchGCPercent {
		t.Fatalf("GOGC unset: a search runs with the collector's target at %d %%, want %d", got, searchGCPercent)
	}
	t.Setenv("GOGC", "150")
	start()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC=150: the search changed the collector's target to %d %%; the user's choice must stand", got)
	}
}
