package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/mcts"
	"github.com/seriema-go/seriema/mcts/hexgame"
	"github.com/seriema-go/seriema/mcts/nim"
	"github.com/seriema-go/seriema/riutils"
)

// demoDefaultVisits is the rollout budget per move of `make demo`: a whole
// 11×11 game in about a minute on two cores. Measured on the development
// machine (2 processes × 1 thread, about 120 visits/ms): 1.1–1.3 s a move,
// 29–76 s of search a game (36 and 71 moves took 45 s and 76 s); 250000
// took 51–113 s.
const demoDefaultVisits = 150000

// DemoSummary is the result of one demo run (the JSON of -json).
type DemoSummary struct {
	Config           string   `json:"config"` // "seq" or PxT, e.g. "2x1"
	Game             string   `json:"game"`   // hex or nim
	Board            string   `json:"board"`  // e.g. "11x11"
	Mode             string   `json:"mode"`
	Transport        string   `json:"transport"`
	VisitsPerMove    int      `json:"visits_per_move"`
	VisitsPerMs      float64  `json:"visits_per_ms"`
	SimulationsPerMs float64  `json:"simulations_per_ms"`
	SearchMs         float64  `json:"search_ms"`
	Moves            []string `json:"moves"`
	// PerMove is each move's search: what `scale` computes the rate
	// past the first moves from (-warmup).
	PerMove []MoveWork   `json:"per_move"`
	Winner  string       `json:"winner,omitempty"`
	Threads []ThreadWork `json:"threads"`
}

// MoveWork is one move's search.
type MoveWork struct {
	Ms          float64 `json:"ms"`
	Simulations int     `json:"simulations"`
}

// ThreadWork is one worker thread's share of the work.
type ThreadWork struct {
	Thread   int    `json:"thread"`
	Rank     int    `json:"rank"`
	Playouts uint64 `json:"playouts"`
	Leaves   uint64 `json:"leaves"`
	Nodes    uint64 `json:"nodes"`
	Rollouts uint64 `json:"rollouts"`
	Calls    uint64 `json:"calls"`
	// Stolen is how many of Leaves the thread evaluated for another
	// process (work stealing).
	Stolen uint64 `json:"stolen"`
	// Shares of the search time spent in playouts and idle.
	SimulateShare float64 `json:"simulate_share"`
	IdleShare     float64 `json:"idle_share"`
}

type demoOpts struct {
	procs, threads, board, visits, moves, playouts int
	inFlight, chunk, spread, preTouch              int
	mode, transport, game, heaps                   string
	c                                              float64
	seed                                           uint64
	seq, noShortcut, noSteal, asJSON, quiet        bool
	cpuProfile                                     string
	moveTime                                       time.Duration
}

func (o demoOpts) config() string {
	if o.seq {
		return "seq"
	}
	return fmt.Sprintf("%dx%d", o.procs, o.threads)
}

// demoFlags declares the flags shared by demo and htp.
func demoFlags(fs *flag.FlagSet, o *demoOpts) {
	fs.IntVar(&o.procs, "procs", 2, "processes (self-launched; mpirun/srun set their own)")
	fs.IntVar(&o.threads, "threads", 1, "worker threads per process")
	fs.IntVar(&o.board, "board", 11, "board side, 1…19 (hex)")
	fs.StringVar(&o.game, "game", "hex", "the game: hex, or nim (the search's second game, solved exactly)")
	fs.StringVar(&o.heaps, "heaps", "3,4,5", "the heaps of nim")
	fs.IntVar(&o.visits, "visits", demoDefaultVisits, "rollouts (visits) per move")
	fs.DurationVar(&o.moveTime, "time", 0, "time limit per move (0: -visits alone); a move ends at whichever comes first")
	fs.IntVar(&o.playouts, "playouts", 16, "random playouts per evaluated leaf")
	fs.StringVar(&o.mode, "mode", "trad", "aggregation: trad or ovfl")
	fs.StringVar(&o.transport, "transport", "", "\"\" (automatic per pair: shm where shared memory is provably reachable, else tcp), shm, tcp or ofi (builds with -tags ofi)")
	fs.Float64Var(&o.c, "c", 1.0, "UCB exploration constant")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (0: from the clock)")
	fs.BoolVar(&o.seq, "seq", false, "run the sequential baseline (no fabric) instead")
	fs.IntVar(&o.inFlight, "inflight", 0, "rollouts under way at once (0: 8 per worker thread × processes)")
	fs.IntVar(&o.spread, "spread", mcts.DefaultConfig().SpreadDepth, "nodes this many moves below the root go to any thread of the job, deeper ones stay in their parent's process (0: every node anywhere, the paper's placement)")
	fs.IntVar(&o.chunk, "chunk", 0, "bytes of each chunk of a receiver's memory for one-sided calls (0: riutils' default, 2 MiB)")
	fs.BoolVar(&o.noShortcut, "no-shortcut", false, "send every node operation as a call, even within a process")
	fs.BoolVar(&o.noSteal, "no-steal", false, "no work stealing between processes (mcts.Config.NoSteal)")
	fs.IntVar(&o.preTouch, "pretouch", demoPreTouch, preTouchUsage)
}

const preTouchUsage = "MiB of the Go heap each search process faults in before searching (as the JVM's AlwaysPreTouch), so that the first moves do not grow it page by page (0: none)"

func (o demoOpts) searchConfig() (mcts.Config, error) {
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Playouts, cfg.C, cfg.Seed, cfg.NoShortcut, cfg.InFlight = o.visits, o.playouts, o.c, o.seed, o.noShortcut, o.inFlight
	cfg.MoveTime, cfg.SpreadDepth, cfg.NoSteal = o.moveTime, o.spread, o.noSteal
	if o.chunk != 0 {
		cfg.Messaging = riutils.DefaultConfig()
		cfg.Messaging.ChunkSize = o.chunk
		if err := cfg.Messaging.VerifyConfig(); err != nil {
			return cfg, fmt.Errorf("-chunk: %w", err)
		}
	}
	switch o.mode {
	case "trad":
		cfg.Mode = riutils.Trad
	case "ovfl":
		cfg.Mode = riutils.Ovfl
	default:
		return cfg, fmt.Errorf("unknown -mode %q (want trad or ovfl)", o.mode)
	}
	switch o.transport {
	case "", "shm", "tcp":
	case "ofi":
		if !dtutils.OFIAvailable {
			return cfg, fmt.Errorf("-transport ofi needs mctsbench built with -tags ofi (make build-ofi)")
		}
	default:
		return cfg, fmt.Errorf("unknown -transport %q (want shm, tcp, ofi, or empty for automatic)", o.transport)
	}
	if o.procs < 1 || o.threads < 1 {
		return cfg, fmt.Errorf("-procs and -threads must be at least 1")
	}
	if o.preTouch < 0 || o.preTouch > 1<<20 {
		return cfg, fmt.Errorf("-pretouch %d: want 0 (none) to %d MiB", o.preTouch, 1<<20)
	}
	return cfg, cfg.VerifyConfig()
}

// searchFunc searches one move, within limit when positive (else the
// configured -time, if any).
type searchFunc func(ctx context.Context, s mcts.State, limit time.Duration) (mcts.Result, error)

// engine is the configured search: sequential, or a distributed job whose
// ranks other than 0 serve until rank 0 closes it. close returns the work
// per thread.
type engine struct {
	search searchFunc
	close  func() ([]ThreadWork, error)
	rank0  bool
	// transport is what rank 0 uses to its peers ("shm", "tcp", "shm+tcp",
	// "loop"), as chosen by dsfabric.
	transport string
}

// searchGCPercent is the collector's target for a search process unless
// GOGC is set. A search allocates a node and a state per rollout and keeps
// a small live heap, so at the default each process of a 2×1 job collected
// about 20 times in six moves, every cycle stopping its worker thread;
// the measurements behind 200 (and against 800) are in docs/benchmarks.md,
// "The collector's target for searches". startEngine sets it, so every
// configuration of `scale`, seq included, runs alike.
const searchGCPercent = 200

// searchGC sets the collector's target for a search process, unless the
// user chose one with GOGC.
func searchGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(searchGCPercent)
	}
}

// demoPreTouch is the default of -pretouch: a 2×1 search of six moves
// grew each process's heap to about 40 MiB (GODEBUG=gctrace=1).
const demoPreTouch = 64

// preTouchHeap faults mib MiB of the Go heap in and frees it again, as
// the JVM's -XX:+AlwaysPreTouch does, before the clock of any search
// starts. Otherwise the first moves grow the heap page by page, at about
// 10 µs a fault on the development VM (docs/benchmarks.md, "MCTS: the
// first moves of a run are its warm-up"): with it a 2×1 scale run took
// 9 300 page faults instead of 28 600, and five interleaved rounds of
// `scale` searched 5–14 % more simulations/ms over all moves (2×1 the
// most). The freed pages stay with the runtime, which reuses them for the
// search's small objects; its background scavenger returns the surplus to
// the OS at about 1 % of a core, slower than a search's first moves take
// them.
func preTouchHeap(mib int) {
	if mib <= 0 {
		return
	}
	// Every block stays live until all are touched, so that they are
	// distinct pages; the collection after frees them all at once and
	// sets the next heap goal from what is live without them.
	blocks := make([][]byte, 0, mib)
	for range mib {
		b := make([]byte, 1<<20)
		// One madvise faults the block in ten times faster than a write
		// to each page (0.05 against 0.5 s for 64 MiB here); before Linux
		// 5.14, the writes.
		if alloc.Populate(b) != nil {
			for i := 0; i < len(b); i += os.Getpagesize() {
				b[i] = 1
			}
		}
		blocks = append(blocks, b)
	}
	runtime.KeepAlive(blocks)
	runtime.GC()
}

// startEngine starts the search; searchNs must hold the total search time
// when close is called (for the shares of time per thread).
func startEngine(o demoOpts, progress func(done, budget int), searchNs *int64, stderr io.Writer) (*engine, error) {
	cfg, err := o.searchConfig()
	if err != nil {
		return nil, err
	}
	searchGC()
	preTouchHeap(o.preTouch)
	if o.seq {
		e := &engine{rank0: true}
		var work ThreadWork
		e.search = func(ctx context.Context, s mcts.State, limit time.Duration) (mcts.Result, error) {
			c := cfg
			if limit > 0 {
				c.MoveTime = limit
			}
			r, err := mcts.Sequential(ctx, s, c)
			work.Playouts += uint64(r.Simulations)
			work.Rollouts += uint64(r.Rollouts)
			work.Leaves += uint64(r.Rollouts)
			return r, err
		}
		e.close = func() ([]ThreadWork, error) { work.SimulateShare = 1; return []ThreadWork{work}, nil }
		return e, nil
	}
	cfg.Progress = progress
	game, _, _, err := o.newGame()
	if err != nil {
		return nil, err
	}
	d, err := mcts.Start(context.Background(), game, cfg, dsfabric.Config{
		Procs: o.procs, ThreadsPerProcess: o.threads, Transport: o.transport, Stdout: stderr,
	})
	if err != nil {
		return nil, err
	}
	search := func(ctx context.Context, s mcts.State, limit time.Duration) (mcts.Result, error) {
		if limit > 0 {
			return d.SearchTime(ctx, s, limit)
		}
		return d.Search(ctx, s)
	}
	e := &engine{search: search, rank0: d.Rank() == 0, transport: d.Fabric().Transports()}
	e.close = func() ([]ThreadWork, error) {
		if d.Rank() != 0 {
			err := d.Serve(context.Background())
			if _, cerr := d.Close(); err == nil {
				err = cerr
			}
			return nil, err
		}
		stats, err := d.Close()
		names := d.Fabric().Names()
		var out []ThreadWork
		for _, s := range stats {
			out = append(out, ThreadWork{Thread: int(s.Thread), Rank: names.Rank(s.Thread), Playouts: s.Playouts, Leaves: s.Leaves, Nodes: s.Nodes, Rollouts: s.Rollouts, Calls: s.Calls, Stolen: s.Stolen,
				SimulateShare: float64(s.SimulateNs) / float64(*searchNs), IdleShare: float64(s.IdleNs) / float64(*searchNs)})
		}
		return out, err
	}
	return e, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func demo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demoOpts
	demoFlags(fs, &o)
	fs.IntVar(&o.moves, "moves", 0, "moves to play (0: until the game is won)")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON summary object instead of the boards and table")
	fs.BoolVar(&o.quiet, "quiet", false, "print the moves and the summary but not the boards")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write each rank's CPU profile to FILE.rankN")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.cpuProfile != "" {
		stop, err := startProfile(o.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "mctsbench demo: %v\n", err)
			return 1
		}
		defer stop()
	}
	if o.moves < 0 {
		fmt.Fprintln(stderr, "mctsbench demo: -moves must be ≥ 0")
		return 2
	}
	sum, err := runDemo(o, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench demo: %v\n", err)
		return 1
	}
	if sum == nil {
		return 0 // a rank other than 0
	}
	if o.asJSON {
		if err := json.NewEncoder(stdout).Encode(sum); err != nil {
			return 1
		}
		return 0
	}
	printSummary(stdout, sum)
	return 0
}

// runDemo plays a game of Hex against itself with the configured search.
// Rank 0 returns the summary, other ranks nil.
func runDemo(o demoOpts, stdout, stderr io.Writer) (*DemoSummary, error) {
	_, state, board, err := o.newGame()
	if err != nil {
		return nil, err
	}
	tty := isTerminal(stderr) && !o.asJSON
	moveNo := 0
	progress := func(done, budget int) {
		if tty {
			fmt.Fprintf(stderr, "\r  move %d: %3d%% (%d/%d visits)", moveNo+1, done*100/budget, done, budget)
		}
	}
	var searchNs int64
	e, err := startEngine(o, progress, &searchNs, stderr)
	if err != nil {
		return nil, err
	}
	if !e.rank0 {
		_, err := e.close()
		return nil, err
	}
	sum := &DemoSummary{Config: o.config(), Game: o.game, Board: board, Mode: o.mode, Transport: e.transport, VisitsPerMove: o.visits}
	if o.seq {
		sum.Mode, sum.Transport = "", ""
	}
	if !o.asJSON {
		fmt.Fprintf(stdout, "Seriema for Go: distributed MCTS playing %s %s against itself, %s (%s), %d visits per move\n",
			gameTitle(o.game), sum.Board, describeConfig(o), strings.TrimSpace(o.mode+" over "+sum.Transport), o.visits)
		if !o.seq {
			fmt.Fprintf(stdout, "transport: %s\n", sum.Transport)
		}
		fmt.Fprintln(stdout)
	}
	var visits, sims int
	var elapsed time.Duration
	var searchErr error
	for ; o.moves == 0 || moveNo < o.moves; moveNo++ {
		if state.Winner() >= 0 {
			break
		}
		r, err := e.search(context.Background(), state, 0)
		if tty {
			fmt.Fprint(stderr, "\r\033[K")
		}
		if err != nil {
			searchErr = fmt.Errorf("move %d: %w", moveNo+1, err)
			break
		}
		mover := playerName(state, state.ToMove())
		if err := state.Play(r.Move); err != nil {
			searchErr = err
			break
		}
		visits, sims, elapsed = visits+r.Rollouts, sims+r.Simulations, elapsed+r.Elapsed
		sum.Moves = append(sum.Moves, r.MoveName)
		sum.PerMove = append(sum.PerMove, MoveWork{Ms: float64(r.Elapsed) / 1e6, Simulations: r.Simulations})
		if !o.asJSON {
			wr := 0.0
			for _, c := range r.Children {
				if c.Move == r.Move {
					wr = c.WinRate
				}
			}
			fmt.Fprintf(stdout, "move %3d  %-5s %-4s  win rate %.2f  %6.0f ms  %6.0f visits/ms  %7.0f simulations/ms\n",
				moveNo+1, mover, r.MoveName, wr, float64(r.Elapsed)/1e6, r.VisitsPerMs(), r.SimulationsPerMs())
			if !o.quiet {
				fmt.Fprintln(stdout, state.String())
			}
		}
	}
	if w := state.Winner(); w >= 0 {
		sum.Winner = playerName(state, w)
	}
	sum.SearchMs = float64(elapsed) / 1e6
	searchNs = max(int64(elapsed), 1)
	if elapsed > 0 {
		sum.VisitsPerMs = float64(visits) / sum.SearchMs
		sum.SimulationsPerMs = float64(sims) / sum.SearchMs
	}
	work, err := e.close()
	sum.Threads = work
	if searchErr != nil {
		return nil, searchErr
	}
	if err != nil {
		return nil, err
	}
	return sum, nil
}

// newGame returns the game -game names, its starting state and a label for
// its board.
func (o demoOpts) newGame() (mcts.Game, mcts.State, string, error) {
	switch o.game {
	case "hex", "":
		s, err := hexgame.New(o.board)
		return hexgame.Game{}, s, fmt.Sprintf("%dx%d", o.board, o.board), err
	case "nim":
		var hs []int
		for _, f := range strings.Split(o.heaps, ",") {
			h, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, nil, "", fmt.Errorf("-heaps %q: %w", o.heaps, err)
			}
			hs = append(hs, h)
		}
		s, err := nim.New(hs...)
		return nim.Game{}, s, "heaps " + o.heaps, err
	}
	return nil, nil, "", fmt.Errorf("unknown -game %q (want hex or nim)", o.game)
}

func gameTitle(game string) string {
	if game == "nim" {
		return "Nim"
	}
	return "Hex"
}

// playerName names player p (0 or 1) of s's game: its own names when the
// game has them (Hex: black, white), else first and second.
func playerName(s mcts.State, p int) string {
	if n, ok := s.(mcts.PlayerNamer); ok {
		return n.PlayerName(p)
	}
	return [2]string{"first", "second"}[p]
}

func describeConfig(o demoOpts) string {
	if o.seq {
		return "sequential baseline (one thread, no fabric)"
	}
	return fmt.Sprintf("%d process(es) × %d thread(s)", o.procs, o.threads)
}

func printSummary(w io.Writer, s *DemoSummary) {
	result := "unfinished"
	if s.Winner != "" {
		result = s.Winner + " wins"
	}
	fmt.Fprintf(w, "\nSummary: %s, %s, %d moves, %s\n", s.Config, s.Board, len(s.Moves), result)
	fmt.Fprintf(w, "  search time      %.1f s\n", s.SearchMs/1000)
	fmt.Fprintf(w, "  visits/ms        %.1f (global)\n", s.VisitsPerMs)
	fmt.Fprintf(w, "  simulations/ms   %.1f (global)\n", s.SimulationsPerMs)
	fmt.Fprintf(w, "  moves            %s\n\n", strings.Join(s.Moves, " "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "thread\trank\tplayouts\tleaves\tstolen\tnodes\trollouts started\tcalls received\tplayout time\tidle time\t")
	for _, t := range s.Threads {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f%%\t%.0f%%\t\n", t.Thread, t.Rank, t.Playouts, t.Leaves, t.Stolen, t.Nodes, t.Rollouts, t.Calls, 100*t.SimulateShare, 100*t.IdleShare)
	}
	tw.Flush()
}

// startProfile writes this process's CPU profile to prefix.rankN (N from
// the launcher's environment, 0 for the first process).
func startProfile(prefix string) (func(), error) {
	rank, ok := launcherRank()
	if !ok {
		rank = "0"
	}
	f, err := os.Create(prefix + ".rank" + rank)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
