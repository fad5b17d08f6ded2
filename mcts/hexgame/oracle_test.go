package hexgame_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/hex"
	"github.com/seriema-go/seriema/internal/jobtest"
	"github.com/seriema-go/seriema/mcts"
	"github.com/seriema-go/seriema/mcts/hexgame"
)

// oraclePosition is a position the solver decided: the side to move wins,
// and only some of its moves keep the win.
type oraclePosition struct {
	board hex.Board
	wins  []hex.Cell
}

// oraclePositions collects n positions reached in real games: self-play
// of the search at a small budget on 4×4 and 5×5 boards, after one or two
// random opening moves (so that the games differ), kept when the solver
// says the side to move wins and some of its moves lose. 5×5 positions
// have at least 6 stones, where the solver takes a second at most.
func oraclePositions(t *testing.T, n int) []oraclePosition {
	t.Helper()
	solver := hex.NewSolver()
	seen := map[uint64]bool{}
	var out []oraclePosition
	for g := 0; len(out) < n; g++ {
		if g > 20*n {
			t.Fatalf("only %d positions after %d games", len(out), g)
		}
		size, minStones := 5, 6
		if g%4 == 0 {
			size, minStones = 4, 2
		}
		s, _ := hexgame.New(size)
		r := rand.New(rand.NewPCG(uint64(g), 99))
		for i := 0; i < 1+g%2; i++ {
			moves := s.Board.Moves(nil)
			s.Board.Play(moves[r.IntN(len(moves))])
		}
		cfg := mcts.DefaultConfig()
		cfg.Budget, cfg.Seed = 200, uint64(g+1)
		for s.Winner() < 0 && len(out) < n {
			b := s.Board
			if b.Stones() >= minStones && !seen[b.Hash()] {
				seen[b.Hash()] = true
				wins, err := solver.WinningMoves(b)
				if err != nil {
					t.Fatal(err)
				}
				if len(wins) > 0 && len(wins) < b.Cells()-b.Stones() {
					out = append(out, oraclePosition{b, wins})
				}
			}
			r, err := mcts.Sequential(context.Background(), s, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Play(r.Move); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestOracle: at the default budget, the search finds a winning move in at
// least 95 % of won positions whose winning moves the exact solver knows.
// It runs without the race detector (make test gives it a line of its
// own): under it the searches take minutes.
func TestOracle(t *testing.T) {
	if raceEnabled {
		t.Skip("the oracle's searches are too slow under -race; make test runs TestOracle without it")
	}
	oracle(t, func(i int, s mcts.State) (mcts.Result, error) {
		cfg := mcts.DefaultConfig()
		cfg.Seed = uint64(i + 1)
		return mcts.Sequential(context.Background(), s, cfg)
	})
}

// TestOracleDistributed: the same positions and bound for the distributed
// search of two processes of one worker thread (2×1, the configuration
// whose rollouts cross processes most), at its defaults: InFlight
// rollouts under way at once, each seeing the others only as visits, make
// it less sequential than the search above, and this is the check that it
// still plays as strong.
func TestOracleDistributed(t *testing.T) {
	if raceEnabled {
		t.Skip("the oracle's searches are too slow under -race; make test runs TestOracle* without it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := mcts.DefaultConfig()
	cfg.Seed = 1
	d, err := mcts.Start(ctx, hexgame.Game{}, cfg, dsfabric.Config{
		Procs: 2, ThreadsPerProcess: 1, Args: jobtest.RunArgs(t),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Rank() != 0 {
		if err := d.Serve(ctx); err != nil {
			t.Error(err)
		}
		if _, err := d.Close(); err != nil {
			t.Error(err)
		}
		return
	}
	oracle(t, func(i int, s mcts.State) (mcts.Result, error) { return d.Search(ctx, s) })
	if _, err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// oracle runs search on each solved position and fails below 95 % of
// winning moves chosen, logging every miss with the root's children.
func oracle(t *testing.T, search func(i int, s mcts.State) (mcts.Result, error)) {
	t.Helper()
	positions := oraclePositions(t, 48)
	hits := 0
	for i, p := range positions {
		res, err := search(i, &hexgame.State{Board: p.board})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(p.wins, hex.Cell(res.Move)) {
			hits++
			continue
		}
		t.Logf("position %d (%d×%d, %v to move): chose %s, winning %d of %d moves\n%s", i, p.board.Size(), p.board.Size(), p.board.ToMove(), res.MoveName, len(p.wins), p.board.Cells()-p.board.Stones(), p.board.String())
		for _, c := range res.Children {
			t.Logf("  %s: %d visits, win rate %.3f, winning %v", p.board.CellName(hex.Cell(c.Move)), c.Visits, c.WinRate, slices.Contains(p.wins, hex.Cell(c.Move)))
		}
	}
	t.Logf("a winning move in %d of %d solved positions", hits, len(positions))
	if hits*100 < 95*len(positions) {
		t.Fatalf("a winning move in %d of %d solved positions (%.0f %%), want ≥ 95 %%", hits, len(positions), 100*float64(hits)/float64(len(positions)))
	}
}
