// Package hexgame adapts Hex (package hex) to the search (package mcts):
// Game decodes boards shipped between processes, State answers the
// search's questions about a position. It holds no search code; package
// mcts holds no Hex code.
package hexgame

import (
	"fmt"
	"slices"

	"github.com/seriema-go/seriema/hex"
	"github.com/seriema-go/seriema/mcts"
)

// Game is Hex for the search.
type Game struct{}

// Name implements mcts.Game.
func (Game) Name() string { return "hex" }

// Decode implements mcts.Game: a board in hex's wire format.
func (Game) Decode(data []byte) (mcts.State, error) {
	s := &State{}
	if err := s.Board.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return s, nil
}

// New returns the empty board of the given side.
func New(size int) (*State, error) {
	b, err := hex.New(size)
	if err != nil {
		return nil, err
	}
	return &State{Board: b}, nil
}

// State adapts hex.Board to mcts.State: player 0 is Black.
type State struct{ Board hex.Board }

func player(c hex.Color) int {
	switch c {
	case hex.Black:
		return 0
	case hex.White:
		return 1
	}
	return -1
}

func (s *State) ToMove() int       { return player(s.Board.ToMove()) }
func (s *State) Winner() int       { return player(s.Board.Winner()) }
func (s *State) Clone() mcts.State { c := *s; return &c }
func (s *State) Play(m mcts.Move) error {
	return s.Board.Play(hex.Cell(m))
}
func (s *State) Moves(dst []mcts.Move) []mcts.Move {
	var buf [hex.MaxSize * hex.MaxSize]hex.Cell
	cells := s.Board.Moves(buf[:0])
	dst = slices.Grow(dst, len(cells)) // one allocation, not a doubling series
	for _, c := range cells {
		dst = append(dst, mcts.Move(c))
	}
	return dst
}
func (s *State) Simulate(n int, seed uint64) int {
	r := hex.NewRNG(seed)
	wins := 0
	for i := 0; i < n; i++ {
		if s.Board.Playout(r) == hex.Black {
			wins++
		}
	}
	return wins
}
func (s *State) AppendBinary(dst []byte) ([]byte, error) { return s.Board.AppendBinary(dst) }

// PlayerName implements mcts.PlayerNamer: black (0) and white (1).
func (s *State) PlayerName(p int) string {
	if p == 0 {
		return hex.Black.String()
	}
	return hex.White.String()
}

func (s *State) MoveName(m mcts.Move) string { return s.Board.CellName(hex.Cell(m)) }
func (s *State) String() string              { return s.Board.String() }

// ParseMove reads a cell name for the board of s.
func (s *State) ParseMove(name string) (mcts.Move, error) {
	c, err := hex.ParseCell(name, s.Board.Size())
	if err != nil {
		return 0, fmt.Errorf("hexgame: %w", err)
	}
	return mcts.Move(c), nil
}
