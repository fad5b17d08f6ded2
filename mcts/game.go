package mcts

import (
	"fmt"

	"github.com/seriema-go/seriema/hex"
)

// Move is a move of a game, numbered by the game.
type Move int32

// Game describes a two-player game with a winner and no draws, as the search
// sees it. It holds no search and no communication code: the search decides
// everything, the game only answers questions about positions.
type Game interface {
	// Name names the game for logs and summaries.
	Name() string
	// Decode reads a state written by State.AppendBinary (from another
	// process); malformed input is an error, never a panic.
	Decode(data []byte) (State, error)
}

// State is one position. The search never changes a state after giving it to
// a node, so many goroutines may read one state at once.
type State interface {
	// ToMove is the player to move: 0 (the first player) or 1.
	ToMove() int
	// Winner is the winner, 0 or 1, or −1 while the game goes on.
	Winner() int
	// Moves appends the legal moves to dst (none once the game is won).
	Moves(dst []Move) []Move
	// Clone returns an independent copy.
	Clone() State
	// Play plays m for the player to move.
	Play(m Move) error
	// Simulate plays n random playouts to the end from this state, seeded
	// with seed, and returns how many player 0 won.
	Simulate(n int, seed uint64) int
	// AppendBinary appends the wire form of the state (for Game.Decode).
	AppendBinary(dst []byte) ([]byte, error)
	// MoveName writes a move for people.
	MoveName(m Move) string
	// String draws the position for people.
	String() string
}

// Hex is the Game of package hex.
type Hex struct{}

// Name implements Game.
func (Hex) Name() string { return "hex" }

// Decode implements Game.
func (Hex) Decode(data []byte) (State, error) {
	s := &HexState{}
	if err := s.Board.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return s, nil
}

// NewHex returns the empty board of the given side as a State.
func NewHex(size int) (*HexState, error) {
	b, err := hex.New(size)
	if err != nil {
		return nil, err
	}
	return &HexState{Board: b}, nil
}

// HexState adapts hex.Board to State.
type HexState struct{ Board hex.Board }

func player(c hex.Color) int {
	switch c {
	case hex.Black:
		return 0
	case hex.White:
		return 1
	}
	return -1
}

func (s *HexState) ToMove() int  { return player(s.Board.ToMove()) }
func (s *HexState) Winner() int  { return player(s.Board.Winner()) }
func (s *HexState) Clone() State { c := *s; return &c }
func (s *HexState) Play(m Move) error {
	return s.Board.Play(hex.Cell(m))
}
func (s *HexState) Moves(dst []Move) []Move {
	var buf [hex.MaxSize * hex.MaxSize]hex.Cell
	for _, c := range s.Board.Moves(buf[:0]) {
		dst = append(dst, Move(c))
	}
	return dst
}
func (s *HexState) Simulate(n int, seed uint64) int {
	r := hex.NewRNG(seed)
	wins := 0
	for i := 0; i < n; i++ {
		if s.Board.Playout(r) == hex.Black {
			wins++
		}
	}
	return wins
}
func (s *HexState) AppendBinary(dst []byte) ([]byte, error) { return s.Board.AppendBinary(dst) }
func (s *HexState) MoveName(m Move) string                  { return s.Board.CellName(hex.Cell(m)) }
func (s *HexState) String() string                          { return s.Board.String() }

// ParseMove reads a cell name for the board of s.
func (s *HexState) ParseMove(name string) (Move, error) {
	c, err := hex.ParseCell(name, s.Board.Size())
	if err != nil {
		return 0, fmt.Errorf("mcts: %w", err)
	}
	return Move(c), nil
}
