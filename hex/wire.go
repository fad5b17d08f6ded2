package hex

import "fmt"

// The wire form of a Board (docs/wire.md, "hex board"):
//
//	byte 0      size, 1…19
//	byte 1      side to move: 1 Black, 2 White
//	bytes 2…    2 bits per cell in index order (y*size+x), least significant
//	            bits first: 0 empty, 1 Black, 2 White (3 is invalid)
//
// EncodedLen(size) bytes in all; the hash is recomputed on decoding.

// EncodedLen returns the length of the wire form of a board of the side.
func EncodedLen(size int) int { return 2 + (size*size*2+7)/8 }

// AppendBinary appends the wire form of b to dst.
func (b *Board) AppendBinary(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, byte(b.size), byte(b.toMove))
	dst = append(dst, make([]byte, EncodedLen(b.size)-2)...)
	cells := dst[start+2:]
	for c := 0; c < b.size*b.size; c++ {
		cells[c/4] |= byte(b.At(Cell(c))) << (c % 4 * 2)
	}
	return dst, nil
}

// MarshalBinary returns the wire form of b.
func (b *Board) MarshalBinary() ([]byte, error) { return b.AppendBinary(nil) }

// UnmarshalBinary decodes the wire form into b. Any malformed input gives
// an error wrapping ErrBadFormat and leaves b unchanged.
func (b *Board) UnmarshalBinary(data []byte) error {
	if len(data) < 2 {
		return fmt.Errorf("%w: %d bytes", ErrBadFormat, len(data))
	}
	size := int(data[0])
	nb, err := New(size)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadFormat, err)
	}
	if len(data) != EncodedLen(size) {
		return fmt.Errorf("%w: %d bytes for size %d (want %d)", ErrBadFormat, len(data), size, EncodedLen(size))
	}
	toMove := Color(data[1])
	if toMove != Black && toMove != White {
		return fmt.Errorf("%w: side to move %d", ErrBadFormat, data[1])
	}
	cells := data[2:]
	for c := 0; c < len(cells)*4; c++ {
		v := Color(cells[c/4] >> (c % 4 * 2) & 3)
		if c >= size*size {
			if v != Empty {
				return fmt.Errorf("%w: padding bits set", ErrBadFormat)
			}
			continue
		}
		switch v {
		case Empty:
		case Black, White:
			_ = nb.PlayColor(v, Cell(c)) // empty and on the board: cannot fail
		default:
			return fmt.Errorf("%w: cell %s has code 3", ErrBadFormat, CellName(Cell(c), size))
		}
	}
	nb.SetToMove(toMove)
	*b = nb
	return nil
}
