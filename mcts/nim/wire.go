package nim

import (
	"fmt"

	"github.com/seriema-go/seriema/mcts"
)

// A Nim state crossing processes (docs/wire.md, "nim"):
//
//	0 u8 heap count (1…16)   1 u8 player to move (0 or 1)   2 u8 × count heap sizes

// Decode implements mcts.Game (the format above).
func (Game) Decode(b []byte) (mcts.State, error) {
	if len(b) < 2 || b[0] == 0 || int(b[0]) > MaxHeaps || len(b) != 2+int(b[0]) || b[1] > 1 {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadState, len(b))
	}
	s := &State{n: int(b[0]), toMove: int(b[1])}
	copy(s.heaps[:], b[2:])
	return s, nil
}

// AppendBinary implements mcts.State (the format above).
func (s *State) AppendBinary(dst []byte) ([]byte, error) {
	dst = append(dst, byte(s.n), byte(s.toMove))
	return append(dst, s.heaps[:s.n]...), nil
}
