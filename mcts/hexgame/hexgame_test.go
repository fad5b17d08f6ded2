package hexgame

import (
	"testing"

	"github.com/seriema-go/seriema/mcts"
)

// The adapter is exercised by package mcts's tests (every search test plays
// Hex through it); these check what they do not: the round trip between
// processes, the player numbering and bad input.
func TestAdapter(t *testing.T) {
	s, err := New(5)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.ParseMove("c3")
	if err != nil || s.MoveName(m) != "c3" {
		t.Fatalf("c3: %v %v", m, err)
	}
	if s.ToMove() != 0 || s.Play(m) != nil || s.ToMove() != 1 || s.Winner() != -1 {
		t.Fatalf("player numbering after one move: to move %d", s.ToMove())
	}
	if len(s.Moves(nil)) != 24 {
		t.Fatalf("%d moves on a 5×5 board with one stone", len(s.Moves(nil)))
	}
	b, _ := s.AppendBinary(nil)
	var g mcts.Game = Game{}
	d, err := g.Decode(b)
	if err != nil || d.String() != s.String() || d.ToMove() != 1 {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := g.Decode([]byte{1, 2}); err == nil {
		t.Error("decoded garbage")
	}
	if _, err := s.ParseMove("z9"); err == nil {
		t.Error("parsed an off-board cell")
	}
	if s.PlayerName(0) != "black" || s.PlayerName(1) != "white" {
		t.Errorf("players named %q and %q", s.PlayerName(0), s.PlayerName(1))
	}
	if w := s.Simulate(10, 1); w < 0 || w > 10 {
		t.Errorf("%d wins of 10 playouts", w)
	}
}
