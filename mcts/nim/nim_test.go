package nim

import (
	"context"
	"slices"
	"testing"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/mcts"
)

// solve is a brute-force oracle: whether the player to move wins.
func solve(s *State, memo map[[MaxHeaps]uint8]bool) bool {
	if v, ok := memo[s.heaps]; ok {
		return v
	}
	win := false
	for _, m := range s.Moves(nil) {
		c := s.Clone().(*State)
		c.Play(m)
		if c.Winner() >= 0 || !solve(c, memo) {
			win = true
			break
		}
	}
	memo[s.heaps] = win
	return win
}

// TestBoutonAgainstOracle: Winning's verdict and moves match exhaustive
// search on every position of three heaps of up to 5.
func TestBoutonAgainstOracle(t *testing.T) {
	memo := map[[MaxHeaps]uint8]bool{}
	for a := 0; a <= 5; a++ {
		for b := 0; b <= 5; b++ {
			for c := 0; c <= 5; c++ {
				s, _ := New(a, b, c)
				if s.Winner() >= 0 {
					continue
				}
				win, moves := s.Winning()
				if win != solve(s, memo) {
					t.Fatalf("%v: Bouton says %v", s.Heaps(), win)
				}
				for _, m := range moves {
					n := s.Clone().(*State)
					n.Play(m)
					if n.Winner() < 0 && solve(n, memo) {
						t.Fatalf("%v: %s leaves the opponent a win", s.Heaps(), s.MoveName(m))
					}
				}
			}
		}
	}
}

// TestSearchFindsWinningMoves: the sequential search, at the default
// budget, plays a winning move in at least 95 % of the won positions of
// three heaps of up to 4 (all 86 of them, when written). With heaps of up
// to 5 it finds one in only 84 % at 3000 visits, and {3, 4, 5} needs about
// 100 000: averaged playouts misjudge Nim until the tree is nearly whole
// (issue 19, "strength you can check").
func TestSearchFindsWinningMoves(t *testing.T) {
	cfg := mcts.DefaultConfig()
	cfg.Seed = 7
	won, found := 0, 0
	for a := 1; a <= 4; a++ {
		for b := 0; b <= 4; b++ {
			for c := 0; c <= 4; c++ {
				s, _ := New(a, b, c)
				win, moves := s.Winning()
				if !win {
					continue
				}
				won++
				r, err := mcts.Sequential(context.Background(), s, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(moves, r.Move) {
					found++
				}
			}
		}
	}
	if found*100 < 95*won {
		t.Fatalf("a winning move in %d of %d won positions", found, won)
	}
	t.Logf("a winning move in %d of %d won positions", found, won)
}

// TestDistributedGame: the distributed search (two worker threads) plays
// Nim {2, 3, 4} against itself unchanged, and the first player, who has the
// win, wins.
func TestDistributedGame(t *testing.T) {
	cfg := mcts.DefaultConfig()
	cfg.Seed = 11
	d, err := mcts.Start(context.Background(), Game{}, cfg, dsfabric.Config{Procs: 1, ThreadsPerProcess: 2})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := New(2, 3, 4)
	var moves []string
	for s.Winner() < 0 {
		r, err := d.Search(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		moves = append(moves, s.MoveName(r.Move))
		if err := s.Play(r.Move); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Winner() != 0 {
		t.Fatalf("the first player lost a won game: %v", moves)
	}
	t.Logf("moves %v", moves)
}

func TestDecodeRoundTrip(t *testing.T) {
	s, _ := New(1, 0, 7)
	s.Play(Take(2, 3))
	b, _ := s.AppendBinary(nil)
	g, err := Game{}.Decode(b)
	if err != nil || !slices.Equal(g.(*State).Heaps(), []int{1, 0, 4}) || g.ToMove() != 1 {
		t.Fatalf("%v %v", g, err)
	}
	for _, bad := range [][]byte{nil, {3, 0, 1}, {1, 2, 1}, {17, 0}} {
		if _, err := (Game{}).Decode(bad); err == nil {
			t.Errorf("decoded %v", bad)
		}
	}
	if err := s.Play(Take(0, 2)); err == nil {
		t.Error("took 2 from a heap of 1")
	}
}

func FuzzDecode(f *testing.F) {
	s, _ := New(3, 4, 5)
	b, _ := s.AppendBinary(nil)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Game{}.Decode(b)
		if err != nil {
			return
		}
		again, _ := g.AppendBinary(nil)
		if string(again) != string(b) {
			t.Fatalf("re-encoding differs")
		}
		g.Moves(nil)
		g.Simulate(2, 1)
	})
}
