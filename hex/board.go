package hex

import (
	"fmt"
	"strconv"
)

// MaxSize is the largest board side; DefaultSize is the usual one.
const (
	MaxSize     = 19
	DefaultSize = 11
	maxCells    = MaxSize * MaxSize
)

// Color is the content of a cell, or a player.
type Color int8

const (
	Empty Color = iota
	// Black moves first and connects the top and bottom rows.
	Black
	// White moves second and connects the left and right columns.
	White
)

// Opponent returns the other player (Empty for Empty).
func (c Color) Opponent() Color {
	switch c {
	case Black:
		return White
	case White:
		return Black
	}
	return Empty
}

func (c Color) String() string {
	switch c {
	case Black:
		return "black"
	case White:
		return "white"
	}
	return "empty"
}

// Cell is a cell index y*size+x of a board of a given size; the column x is
// written as a letter and the row y+1 as a number: a1 is the top-left cell.
type Cell int16

// Board is a Hex position: stones, the side to move and its Zobrist hash.
// It is a value (copying it copies the position) and allocates nothing.
//
// Stones are kept twice, as row masks (bit x of rows[y]) for Black's
// top–bottom test and as column masks (bit y of cols[x]) for White's
// left–right test: the neighbourhood of Hex is symmetric under exchanging x
// and y, so one flood routine serves both.
type Board struct {
	size   int
	toMove Color
	stones int
	hash   uint64
	rows   [2][MaxSize]uint32 // [Black-1 | White-1][y], bit x
	cols   [2][MaxSize]uint32 // [Black-1 | White-1][x], bit y
}

// New returns an empty board of the given side, Black to move.
func New(size int) (Board, error) {
	if size < 1 || size > MaxSize {
		return Board{}, fmt.Errorf("%w: %d (want 1…%d)", ErrBadSize, size, MaxSize)
	}
	return Board{size: size, toMove: Black, hash: zobrist.size[size]}, nil
}

// Size returns the side of the board.
func (b *Board) Size() int { return b.size }

// ToMove returns the player whose turn it is.
func (b *Board) ToMove() Color { return b.toMove }

// SetToMove sets the player whose turn it is (HTP lets either colour play).
func (b *Board) SetToMove(c Color) {
	if c == b.toMove || (c != Black && c != White) {
		return
	}
	b.hash ^= zobrist.white
	b.toMove = c
}

// Hash returns the Zobrist hash of the position (stones, size, side to move),
// kept incrementally.
func (b *Board) Hash() uint64 { return b.hash }

// Stones returns the number of stones on the board.
func (b *Board) Stones() int { return b.stones }

// Cells returns the number of cells.
func (b *Board) Cells() int { return b.size * b.size }

// At returns the content of cell c.
func (b *Board) At(c Cell) Color {
	x, y := int(c)%b.size, int(c)/b.size
	switch {
	case b.rows[0][y]>>x&1 != 0:
		return Black
	case b.rows[1][y]>>x&1 != 0:
		return White
	}
	return Empty
}

// Cell returns the cell at column x and row y (both from 0).
func (b *Board) Cell(x, y int) Cell { return Cell(y*b.size + x) }

// Legal reports whether c is an empty cell of the board.
func (b *Board) Legal(c Cell) bool {
	return c >= 0 && int(c) < b.size*b.size && b.At(c) == Empty
}

// Play puts a stone of the side to move on c and passes the turn.
func (b *Board) Play(c Cell) error { return b.PlayColor(b.toMove, c) }

// PlayColor puts a stone of colour col on c; the other colour moves next.
func (b *Board) PlayColor(col Color, c Cell) error {
	if col != Black && col != White {
		return ErrBadColor
	}
	if c < 0 || int(c) >= b.size*b.size {
		return fmt.Errorf("%w: %d on a %d×%d board", ErrBadCell, c, b.size, b.size)
	}
	if b.At(c) != Empty {
		return fmt.Errorf("%w: %s", ErrOccupied, b.CellName(c))
	}
	x, y := int(c)%b.size, int(c)/b.size
	i := col - 1
	b.rows[i][y] |= 1 << x
	b.cols[i][x] |= 1 << y
	b.stones++
	b.hash ^= zobrist.stone[i][c]
	b.SetToMove(col.Opponent())
	return nil
}

// Moves appends the empty cells to dst (no moves once the game is won).
func (b *Board) Moves(dst []Cell) []Cell {
	if b.Winner() != Empty {
		return dst
	}
	full := uint32(1)<<b.size - 1
	for y := 0; y < b.size; y++ {
		for e := full &^ (b.rows[0][y] | b.rows[1][y]); e != 0; e &= e - 1 {
			dst = append(dst, Cell(y*b.size+trailingZeros(e)))
		}
	}
	return dst
}

// Winner returns the player who has connected their edges, or Empty.
func (b *Board) Winner() Color {
	if b.stones < b.size {
		return Empty // too few stones for any chain across
	}
	if connects(&b.rows[0], b.size) {
		return Black
	}
	if connects(&b.cols[1], b.size) {
		return White
	}
	return Empty
}

// CellName writes c as a letter and a number: a1 is the top-left cell.
func (b *Board) CellName(c Cell) string { return CellName(c, b.size) }

// CellName writes cell c of a board of the given side: column letter, row number.
func CellName(c Cell, size int) string {
	if c < 0 || int(c) >= size*size {
		return "?"
	}
	return string(rune('a'+int(c)%size)) + strconv.Itoa(int(c)/size+1)
}

// ParseCell reads a cell name such as "a1" or "K11" for a board of the side.
func ParseCell(s string, size int) (Cell, error) {
	if len(s) < 2 {
		return 0, fmt.Errorf("%w: %q", ErrBadCell, s)
	}
	col := s[0] | 0x20 // lower case
	if col < 'a' || col > 'z' {
		return 0, fmt.Errorf("%w: %q", ErrBadCell, s)
	}
	row, err := strconv.Atoi(s[1:])
	if err != nil || s[1] == '+' || s[1] == '-' {
		return 0, fmt.Errorf("%w: %q", ErrBadCell, s)
	}
	x, y := int(col-'a'), row-1
	if x >= size || y < 0 || y >= size {
		return 0, fmt.Errorf("%w: %q is off a %d×%d board", ErrBadCell, s, size, size)
	}
	return Cell(y*size + x), nil
}

// String draws the board as a rhombus, each row shifted right by one more
// space, with column letters and row numbers.
func (b *Board) String() string {
	var out []byte
	out = append(out, "   "...)
	for x := 0; x < b.size; x++ {
		out = append(out, ' ', byte('a'+x))
	}
	out = append(out, '\n')
	for y := 0; y < b.size; y++ {
		for i := 0; i < y; i++ {
			out = append(out, ' ')
		}
		out = append(out, fmt.Sprintf("%3d", y+1)...)
		for x := 0; x < b.size; x++ {
			out = append(out, ' ')
			switch b.At(b.Cell(x, y)) {
			case Black:
				out = append(out, 'X')
			case White:
				out = append(out, 'O')
			default:
				out = append(out, '.')
			}
		}
		out = append(out, '\n')
	}
	return string(out)
}

// recomputeHash computes the Zobrist hash from scratch (tests and decoding).
func (b *Board) recomputeHash() uint64 {
	h := zobrist.size[b.size]
	if b.toMove == White {
		h ^= zobrist.white
	}
	for c := Cell(0); int(c) < b.size*b.size; c++ {
		if col := b.At(c); col != Empty {
			h ^= zobrist.stone[col-1][c]
		}
	}
	return h
}
