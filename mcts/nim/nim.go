// Package nim is Nim as an mcts.Game: heaps of objects, a move takes one or
// more objects from one heap, and whoever takes the last object wins
// (normal play). It is the framework's second game: small, with no draws,
// and solved exactly (Bouton: the player to move wins if and only if the
// heaps' sizes XOR to non-zero, by moving to an XOR of zero), so tests can
// check the search against the truth.
package nim

import (
	"fmt"
	"strings"

	"github.com/seriema-go/seriema/mcts"
)

// MaxHeaps and MaxHeap bound a position.
const (
	MaxHeaps = 16
	MaxHeap  = 255
)

// Game is Nim for the search.
type Game struct{}

// Name implements mcts.Game.
func (Game) Name() string { return "nim" }

// State is a Nim position.
type State struct {
	heaps  [MaxHeaps]uint8
	n      int
	toMove int
}

// New returns the position with the given heap sizes, first player to move.
func New(heaps ...int) (*State, error) {
	if len(heaps) == 0 || len(heaps) > MaxHeaps {
		return nil, fmt.Errorf("%w: %d heaps (1…%d)", ErrBadState, len(heaps), MaxHeaps)
	}
	s := &State{n: len(heaps)}
	for i, h := range heaps {
		if h < 0 || h > MaxHeap {
			return nil, fmt.Errorf("%w: heap of %d (0…%d)", ErrBadState, h, MaxHeap)
		}
		s.heaps[i] = uint8(h)
	}
	return s, nil
}

// Move numbers: heap × 256 + objects taken.
func move(heap, take int) mcts.Move { return mcts.Move(heap<<8 | take) }

// Take returns the move that takes take objects from heap.
func Take(heap, take int) mcts.Move { return move(heap, take) }

func (s *State) empty() bool {
	for _, h := range s.heaps[:s.n] {
		if h != 0 {
			return false
		}
	}
	return true
}

// ToMove implements mcts.State.
func (s *State) ToMove() int { return s.toMove }

// Winner implements mcts.State: the player who took the last object.
func (s *State) Winner() int {
	if s.empty() {
		return 1 - s.toMove // the previous player took the last object
	}
	return -1
}

// Moves implements mcts.State.
func (s *State) Moves(dst []mcts.Move) []mcts.Move {
	for i, h := range s.heaps[:s.n] {
		for t := 1; t <= int(h); t++ {
			dst = append(dst, move(i, t))
		}
	}
	return dst
}

// Clone implements mcts.State.
func (s *State) Clone() mcts.State { c := *s; return &c }

// Play implements mcts.State.
func (s *State) Play(m mcts.Move) error {
	heap, take := int(m)>>8, int(m)&0xff
	if m < 0 || heap >= s.n || take < 1 || take > int(s.heaps[heap]) {
		return fmt.Errorf("%w: move %d on %v", ErrBadState, m, s)
	}
	s.heaps[heap] -= uint8(take)
	s.toMove = 1 - s.toMove
	return nil
}

// Simulate implements mcts.State: uniform random moves to the end.
func (s *State) Simulate(n int, seed uint64) int {
	rng := seed | 1
	next := func(k int) int { // xorshift64*
		rng ^= rng >> 12
		rng ^= rng << 25
		rng ^= rng >> 27
		return int((rng * 2685821657736338717) >> 33 % uint64(k))
	}
	wins := 0
	for i := 0; i < n; i++ {
		heaps, toMove := s.heaps, s.toMove
		for {
			total := 0
			for _, h := range heaps[:s.n] {
				total += int(h)
			}
			if total == 0 {
				break
			}
			// A uniform legal move: pick one of the total (heap, take) pairs.
			k := next(total)
			for j, h := range heaps[:s.n] {
				if k < int(h) {
					heaps[j] -= uint8(k + 1)
					break
				}
				k -= int(h)
			}
			toMove = 1 - toMove
		}
		if 1-toMove == 0 { // player 0 took the last object
			wins++
		}
	}
	return wins
}

// MoveName implements mcts.State: "take T from heap H" as "H-T" (heaps
// counted from 1).
func (s *State) MoveName(m mcts.Move) string { return fmt.Sprintf("%d-%d", int(m)>>8+1, int(m)&0xff) }

// String implements mcts.State: the heaps as bars.
func (s *State) String() string {
	var b strings.Builder
	for i, h := range s.heaps[:s.n] {
		fmt.Fprintf(&b, "  heap %d: %-3d %s\n", i+1, h, strings.Repeat("|", int(h)))
	}
	return b.String()
}

// Heaps returns the heap sizes.
func (s *State) Heaps() []int {
	out := make([]int, s.n)
	for i, h := range s.heaps[:s.n] {
		out[i] = int(h)
	}
	return out
}

// Winning reports whether the player to move wins with perfect play
// (Bouton's theorem), and the moves that keep the win.
func (s *State) Winning() (bool, []mcts.Move) {
	x := 0
	for _, h := range s.heaps[:s.n] {
		x ^= int(h)
	}
	if x == 0 {
		return false, nil
	}
	var ms []mcts.Move
	for i, h := range s.heaps[:s.n] {
		if t := int(h) ^ x; t < int(h) {
			ms = append(ms, move(i, int(h)-t))
		}
	}
	return true, ms
}
