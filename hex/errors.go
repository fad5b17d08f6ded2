package hex

import "errors"

// Sentinel errors of package hex; returned errors wrap them (errors.Is).
var (
	// ErrBadSize: a board size outside 1…19.
	ErrBadSize = errors.New("hex: board size out of range")
	// ErrBadCell: a cell name that does not parse, or a cell off the board.
	ErrBadCell = errors.New("hex: malformed or off-board cell")
	// ErrOccupied: a move onto a stone.
	ErrOccupied = errors.New("hex: cell is occupied")
	// ErrBadColor: a colour that is neither player.
	ErrBadColor = errors.New("hex: not a player")
	// ErrGameOver: a move after the game was won.
	ErrGameOver = errors.New("hex: the game is over")
	// ErrBadFormat: a board encoding that does not decode (see wire.go).
	ErrBadFormat = errors.New("hex: malformed board encoding")
	// ErrTooHard: the solver gave up at its node limit.
	ErrTooHard = errors.New("hex: position too large to solve within the node limit")
)
