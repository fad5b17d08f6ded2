package hex

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// bruteWins is the plain definition: the side to move wins if some move
// connects or leads to a position the opponent loses. No table, no rules.
func bruteWins(b Board) bool {
	me := b.ToMove()
	for _, m := range b.Moves(nil) {
		c := b
		c.Play(m)
		if c.Winner() == me || !bruteWins(c) {
			return true
		}
	}
	return false
}

// randomPosition plays k random moves on an empty board of side n, not
// ending the game.
func randomPosition(r *rand.Rand, n, k int) (Board, bool) {
	b, _ := New(n)
	for i := 0; i < k; i++ {
		moves := b.Moves(nil)
		if len(moves) == 0 {
			return b, false
		}
		b.Play(moves[r.IntN(len(moves))])
		if b.Winner() != Empty {
			return b, false
		}
	}
	return b, true
}

// TestSolverAgreesWithDefinition: on random 3×3 and 4×4 positions the
// solver's verdict and winning moves are the brute-force minimax's.
func TestSolverAgreesWithDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := NewSolver()
	checked := 0
	for i := 0; i < 400; i++ {
		n := 3 + i%2
		b, ok := randomPosition(r, n, n*n-8+r.IntN(3))
		if !ok {
			continue
		}
		got, err := s.Wins(b)
		if err != nil {
			t.Fatal(err)
		}
		if want := bruteWins(b); got != want {
			t.Fatalf("position\n%s%v to move: solver says win=%v, definition %v", b.String(), b.ToMove(), got, want)
		}
		wins, err := s.WinningMoves(b)
		if err != nil {
			t.Fatal(err)
		}
		var want []Cell
		for _, m := range b.Moves(nil) {
			c := b
			c.Play(m)
			if c.Winner() == b.ToMove() || !bruteWins(c) {
				want = append(want, m)
			}
		}
		if !slices.Equal(wins, want) {
			t.Fatalf("position\n%swinning moves %v, want %v", b.String(), wins, want)
		}
		checked++
	}
	if checked < 200 {
		t.Fatalf("only %d positions checked", checked)
	}
}

// TestSolverEmptyBoards: the first player wins every empty n×n board (the
// strategy-stealing argument), checked up to 4×4 (5×5 from empty is beyond
// this solver in test time).
func TestSolverEmptyBoards(t *testing.T) {
	for n := 1; n <= 4; n++ {
		b, _ := New(n)
		win, err := NewSolver().Wins(b)
		if err != nil || !win {
			t.Fatalf("%d×%d: first player wins=%v, %v; want true", n, n, win, err)
		}
	}
}

// TestSolverNodeLimit: past MaxNodes the solver says so.
func TestSolverNodeLimit(t *testing.T) {
	b, _ := New(6)
	s := NewSolver()
	s.MaxNodes = 1000
	if _, err := s.Wins(b); !errors.Is(err, ErrTooHard) {
		t.Fatalf("6×6 with 1000 nodes: %v, want ErrTooHard", err)
	}
}
