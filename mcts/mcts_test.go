package mcts_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/hex"
	"github.com/seriema-go/seriema/internal/jobtest"
	"github.com/seriema-go/seriema/mcts"
	"github.com/seriema-go/seriema/mcts/hexgame"
	"github.com/seriema-go/seriema/riutils"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func hexPosition(t testing.TB, size int, black, white []string, toMove int) *hexgame.State {
	t.Helper()
	s, err := hexgame.New(size)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < max(len(black), len(white)); i++ {
		if i < len(black) {
			play(t, s, black[i])
		}
		if i < len(white) {
			play(t, s, white[i])
		}
	}
	if s.ToMove() != toMove {
		t.Fatalf("position has player %d to move, want %d", s.ToMove(), toMove)
	}
	return s
}

func play(t testing.TB, s *hexgame.State, name string) {
	t.Helper()
	m, err := s.ParseMove(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Play(m); err != nil {
		t.Fatal(err)
	}
}

// searcher is a search under test: sequential or distributed.
type searcher func(t *testing.T, s mcts.State, cfg mcts.Config) mcts.Result

func sequential(t *testing.T, s mcts.State, cfg mcts.Config) mcts.Result {
	r, err := mcts.Sequential(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tactics are the positions every search must get right (§5.3 sanity):
// play an immediate win, block the opponent's only immediate win, and the
// solved centre openings of 3×3.
func tactics(t *testing.T, search searcher) {
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Seed = 3000, 11
	t.Run("win", func(t *testing.T) {
		s := hexPosition(t, 4, []string{"a1", "a2", "a3"}, []string{"d1", "d2", "d3"}, 0)
		r := search(t, s, cfg)
		if r.MoveName != "a4" {
			t.Errorf("played %s, want the winning a4: %+v", r.MoveName, r.Children)
		}
		checkAccounting(t, r, cfg)
	})
	t.Run("block", func(t *testing.T) {
		s := hexPosition(t, 4, []string{"a1", "a2", "a3"}, []string{"d1", "d2"}, 1)
		r := search(t, s, cfg)
		if r.MoveName != "a4" {
			t.Errorf("played %s, want the block a4", r.MoveName)
		}
		checkAccounting(t, r, cfg)
	})
	t.Run("opening3", func(t *testing.T) {
		s := hexPosition(t, 3, nil, nil, 0)
		r := search(t, s, cfg)
		// Five first moves win on 3×3 (b2, the centre, among them): the
		// search must pick one of them.
		after := s.Clone().(*hexgame.State)
		if err := after.Play(r.Move); err != nil {
			t.Fatal(err)
		}
		if solveHex(after.Board, map[uint64]bool{}) {
			t.Errorf("played the losing %s on the empty 3×3 board", r.MoveName)
		}
		checkAccounting(t, r, cfg)
	})
}

// solveHex reports whether the side to move wins b with perfect play
// (exhaustive, for boards of up to 4×4).
func solveHex(b hex.Board, memo map[uint64]bool) bool {
	if w := b.Winner(); w != hex.Empty {
		return w == b.ToMove()
	}
	if v, ok := memo[b.Hash()]; ok {
		return v
	}
	win := false
	for _, c := range b.Moves(nil) {
		nb := b
		_ = nb.Play(c)
		if !solveHex(nb, memo) {
			win = true
			break
		}
	}
	memo[b.Hash()] = win
	return win
}

// TestSolvedOpenings3 checks the solver the tactics rely on: on 3×3 the
// centre wins and the acute corner a1 loses.
func TestSolvedOpenings3(t *testing.T) {
	for name, wins := range map[string]bool{"b2": true, "a1": false, "c3": false} {
		s := hexPosition(t, 3, nil, nil, 0)
		play(t, s, name)
		if got := !solveHex(s.Board, map[uint64]bool{}); got != wins {
			t.Errorf("3×3 opening %s: first player wins = %v, want %v", name, got, wins)
		}
	}
}

// checkAccounting: every rollout of the budget came back to the root (no
// lost backpropagation): the root's children share exactly Budget visits.
func checkAccounting(t *testing.T, r mcts.Result, cfg mcts.Config) {
	t.Helper()
	sum := 0
	for _, c := range r.Children {
		sum += c.Visits
		if c.WinRate < 0 || c.WinRate > 1 {
			t.Errorf("child %d has win rate %v", c.Move, c.WinRate)
		}
	}
	if sum != cfg.Budget || r.Rollouts != cfg.Budget || r.Simulations != cfg.Budget*cfg.Playouts {
		t.Errorf("children visits %d, rollouts %d, simulations %d; budget %d × %d playouts", sum, r.Rollouts, r.Simulations, cfg.Budget, cfg.Playouts)
	}
}

func TestSequentialTactics(t *testing.T) {
	tactics(t, sequential)
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Seed = 3000, 11
	if r := sequential(t, hexPosition(t, 3, nil, nil, 0), cfg); r.MoveName != "b2" {
		t.Errorf("played %s on the empty 3×3 board, want the centre b2", r.MoveName)
	}
}

// TestSequentialOpenings (solved openings): the centre wins on 5×5, and the
// acute corner a1 loses on every size from 3 to 8 — a strong enough search
// answering a1 believes in its reply.
func TestSequentialOpenings(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Seed = 60000, 5
	if r := sequential(t, hexPosition(t, 5, nil, nil, 0), cfg); r.MoveName != "c3" {
		t.Errorf("5×5: played %s, want c3", r.MoveName)
	}
	for n := 3; n <= 8; n++ {
		cfg.Budget = 20000
		r := sequential(t, hexPosition(t, n, []string{"a1"}, nil, 1), cfg)
		best := 0.0
		for _, c := range r.Children {
			if c.Move == r.Move {
				best = c.WinRate
			}
		}
		if best <= 0.5 {
			t.Errorf("%d×%d after a1: White's reply %s wins only %.3f of its playouts", n, n, r.MoveName, best)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, mod := range []func(*mcts.Config){
		func(c *mcts.Config) { c.Budget = 0 },
		func(c *mcts.Config) { c.Playouts = 0 },
		func(c *mcts.Config) { c.Playouts = 1<<16 + 1 },
		func(c *mcts.Config) { c.C = -1 },
		func(c *mcts.Config) { c.Mode = 7 },
		func(c *mcts.Config) { c.InFlight = -2 },
		func(c *mcts.Config) { c.SpreadDepth = -1 },
		func(c *mcts.Config) { c.MoveTime = -time.Second },
	} {
		c := mcts.DefaultConfig()
		mod(&c)
		if err := c.VerifyConfig(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := mcts.Sequential(context.Background(), hexPosition(t, 3, []string{"a1", "a2", "a3"}, []string{"c1", "c2"}, 1), mcts.DefaultConfig()); err == nil {
		t.Error("search of a finished game accepted")
	}
}

// distributedJob starts a job, runs body on rank 0 and closes.
func distributedJob(t *testing.T, procs, threads int, cfg mcts.Config, body func(d *mcts.Distributed)) []mcts.Stats {
	d, err := mcts.Start(context.Background(), hexgame.Game{}, cfg, dsfabric.Config{
		Procs: procs, ThreadsPerProcess: threads, Args: jobtest.RunArgs(t), Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Rank() != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := d.Serve(ctx); err != nil {
			t.Error(err)
		}
		if _, err := d.Close(); err != nil {
			t.Error(err)
		}
		return nil
	}
	body(d)
	stats, err := d.Close()
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

func distributedSearch(d *mcts.Distributed) searcher {
	return func(t *testing.T, s mcts.State, cfg mcts.Config) mcts.Result {
		// A search of these budgets takes well under a second (seconds
		// under -race): one that does not end has lost rollouts.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := d.Search(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if t.Name() != "" {
			mcts.Audit(d, t)
		}
		return r
	}
}

// TestDistributed (paper §5.3): the distributed search, in 1×2, 2×1 and
// 2×2 configurations, in trad and ovfl modes, with the local shortcut off
// and with the paper's uniform placement (SpreadDepth 0) as well as the
// default, with and without work stealing between processes, plays the
// tactics right, loses no backpropagation, keeps visit counts consistent,
// places deep nodes in their parent's process, and shares the work among
// all threads; with several processes and stealing on, some leaves are
// evaluated by a process that does not own them (none with it off).
func TestDistributed(t *testing.T) {
	cases := []struct {
		procs, threads int
		mode           riutils.Mode
		noShortcut     bool
		spread         int
		noSteal        bool
	}{
		{1, 2, riutils.Trad, false, 2, false},
		{1, 2, riutils.Ovfl, true, 2, false},
		{2, 1, riutils.Trad, false, 2, false},
		{2, 1, riutils.Trad, false, 2, true},
		{2, 1, riutils.Trad, false, 0, false},
		{2, 1, riutils.Ovfl, false, 1, false},
		{2, 2, riutils.Trad, true, 2, false},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%dx%d-%s-shortcut=%v-spread=%d-steal=%v", c.procs, c.threads, c.mode, !c.noShortcut, c.spread, !c.noSteal)
		t.Run(name, func(t *testing.T) {
			cfg := mcts.DefaultConfig()
			cfg.Budget, cfg.Seed, cfg.Mode, cfg.NoShortcut, cfg.SpreadDepth, cfg.NoSteal = 3000, 11, c.mode, c.noShortcut, c.spread, c.noSteal
			stats := distributedJob(t, c.procs, c.threads, cfg, func(d *mcts.Distributed) {
				tactics(t, distributedSearch(d))
			})
			if stats == nil {
				return
			}
			if len(stats) != c.procs*c.threads {
				t.Fatalf("%d thread statistics, want %d", len(stats), c.procs*c.threads)
			}
			var stolen uint64
			for _, s := range stats {
				if s.Leaves == 0 || s.Nodes == 0 {
					t.Errorf("thread %d did no work: %+v", s.Thread, s)
				}
				if c.noShortcut && s.Calls == 0 {
					t.Errorf("thread %d received no calls without the shortcut", s.Thread)
				}
				stolen += s.Stolen
			}
			// Thousands of leaves over several searches: an idle moment of
			// one process while the other has two queued is all it takes.
			switch steals := c.procs > 1 && !c.noSteal; {
			case steals && stolen == 0:
				t.Error("no leaf was stolen between processes")
			case !steals && stolen != 0:
				t.Errorf("%d leaves stolen with stealing off or one process", stolen)
			}
		})
	}
}

// TestMoveTime: a time limit ends a search whose budget it could never
// finish, with the rollouts that came back (all of them accounted at the
// root), sequential and distributed; the distributed search stays
// consistent and the next phase runs its full budget.
func TestMoveTime(t *testing.T) {
	s := hexPosition(t, 5, nil, nil, 0)
	check := func(t *testing.T, r mcts.Result, budget int) {
		t.Helper()
		sum := 0
		for _, c := range r.Children {
			sum += c.Visits
		}
		if r.Rollouts < 1 || r.Rollouts >= budget || sum != r.Rollouts {
			t.Fatalf("%d rollouts (children's visits %d) of a budget of %d", r.Rollouts, sum, budget)
		}
	}
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.MoveTime, cfg.Seed = 1<<30, 50*time.Millisecond, 3
	t.Run("sequential", func(t *testing.T) {
		r, err := mcts.Sequential(context.Background(), s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		check(t, r, cfg.Budget)
	})
	t.Run("distributed", func(t *testing.T) {
		// The budget (3000 rollouts of 16 playouts) takes far longer than
		// 1 ms on any machine; the limit of each call ends the phase.
		cfg.Budget, cfg.MoveTime = 3000, 0
		distributedJob(t, 2, 1, cfg, func(d *mcts.Distributed) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for i := 0; i < 3; i++ {
				r, err := d.SearchTime(ctx, s, time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				check(t, r, cfg.Budget)
				mcts.Audit(d, t)
			}
			r, err := d.Search(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if r.Rollouts != cfg.Budget {
				t.Fatalf("a phase without a limit after timed ones: %d rollouts, want %d", r.Rollouts, cfg.Budget)
			}
			mcts.Audit(d, t)
		})
	})
}

// TestSearchCancel: a Search whose context ends gives its phase up at
// once, so that neither the next Search nor Close waits for a budget that
// nobody wants any more (here one that would take hours), and the next
// phase runs whole. A search of a finished game is refused.
func TestSearchCancel(t *testing.T) {
	s := hexPosition(t, 5, nil, nil, 0)
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Seed = 1<<30, 5
	won := hexPosition(t, 5, []string{"a1", "a2", "a3", "a4", "a5"}, []string{"b1", "b2", "b3", "b4"}, 1)
	if won.Winner() != 0 {
		t.Fatalf("the won position's winner is %d, want 0", won.Winner())
	}
	stats := distributedJob(t, 2, 1, cfg, func(d *mcts.Distributed) {
		gctx, gcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := d.Search(gctx, won); !errors.Is(err, mcts.ErrGameOver) {
			t.Fatalf("a search of a finished game: %v, want %v", err, mcts.ErrGameOver)
		}
		if _, err := d.SearchTime(gctx, s, -time.Second); !errors.Is(err, mcts.ErrBadConfig) {
			t.Fatalf("a search with a negative time limit: %v, want %v", err, mcts.ErrBadConfig)
		}
		gcancel()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := d.Search(ctx, s)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a search past its context's deadline: %v, want %v", err, context.DeadlineExceeded)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := d.SearchTime(ctx, s, 20*time.Millisecond)
		if err != nil {
			t.Fatalf("the search after a cancelled one: %v", err)
		}
		if r.Rollouts < 1 || r.Move < 0 {
			t.Fatalf("the search after a cancelled one: %d rollouts, move %d", r.Rollouts, r.Move)
		}
		mcts.Audit(d, t)
	})
	if stats == nil && !t.Failed() {
		return // another rank
	}
	if len(stats) != 2 {
		t.Fatalf("Close after a cancelled search: %d thread statistics, want 2", len(stats))
	}
}

// TestStartOpensMessengers: Start returns once every worker thread has set
// up its messengers to the threads its searches call (the threads of the
// other processes; every thread with NoShortcut), so that the first
// search's first calls pay no set-up (a round trip to the destination's
// process each), and no others (a messenger to a thread of its own
// process, which the shortcut never calls, is 4 MiB of chunks for
// nothing); the search then runs over them.
func TestStartOpensMessengers(t *testing.T) {
	for _, c := range []struct {
		procs, threads int
		noShortcut     bool
	}{{1, 2, false}, {2, 1, false}, {2, 2, false}, {2, 2, true}} {
		t.Run(fmt.Sprintf("%dx%d-noshortcut=%v", c.procs, c.threads, c.noShortcut), func(t *testing.T) {
			cfg := mcts.DefaultConfig()
			cfg.Budget, cfg.Seed, cfg.NoShortcut = 2000, 5, c.noShortcut
			want := int64((c.procs - 1) * c.threads) // the other processes' threads
			if c.noShortcut {
				want = int64(c.procs * c.threads)
			}
			distributedJob(t, c.procs, c.threads, cfg, func(d *mcts.Distributed) {
				if all := d.Fabric().Names().Threads(); all != c.procs*c.threads {
					t.Fatalf("job of %d threads, want %d", all, c.procs*c.threads)
				}
				for i, n := range mcts.OpenedAtStart(d) {
					if n != want {
						t.Errorf("thread %d of rank 0 had %d messengers set up when Start returned, want %d", i, n, want)
					}
				}
				distributedSearch(d)(t, hexPosition(t, 3, nil, nil, 0), cfg)
			})
		})
	}
}

// TestStartContextDuringOpen: Start's context bounds its wait for the
// worker threads' messengers (each an allocation round trip to the
// destination's process): a Start whose context ends while they are being
// set up returns its error at once, rather than when the opens end.
func TestStartContextDuringOpen(t *testing.T) {
	gate := make(chan struct{})
	late := time.AfterFunc(3*time.Second, func() { close(gate) }) // without ctx honoured: no hang
	defer func() {
		if late.Stop() {
			close(gate)
		}
	}()
	cfg := mcts.DefaultConfig()
	cfg.NoShortcut = true // a 1×2 job opens messengers to its own threads
	cfg = mcts.WithBeforeOpen(cfg, func(ctx context.Context) {
		select { // an open that takes until ctx ends
		case <-ctx.Done():
		case <-gate:
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	d, err := mcts.Start(ctx, hexgame.Game{}, cfg, dsfabric.Config{Procs: 1, ThreadsPerProcess: 2, Logger: quiet})
	waited := time.Since(t0)
	if err == nil {
		d.Close()
		t.Fatal("Start returned a search while its threads were still opening their messengers past its context")
	}
	if !errors.Is(err, context.DeadlineExceeded) || waited > 2*time.Second {
		t.Fatalf("Start: %v after %v, want context.DeadlineExceeded within 2 s", err, waited)
	}
}
