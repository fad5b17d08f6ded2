package hex

import (
	"fmt"
	"math/bits"
)

// Solver decides small Hex positions exactly: who wins with perfect play,
// and which moves keep the win. It is the oracle the search's strength is
// checked against. It takes boards up to 8×8; 4×4 solves from any
// position at once, 5×5 from positions of a few stones in seconds, larger
// boards only late in the game (MaxNodes bounds the effort).
//
// The search is a negamax over win/loss (Hex has no draws) with a
// transposition table, and two rules that are exact in Hex: a side that
// can connect at once wins, and a side whose opponent threatens to connect
// at two different cells loses unless it connects first; with one such
// threat, the only move worth trying is to block it.
type Solver struct {
	// MaxNodes bounds the positions one search expands (0: 50 million):
	// Wins is one search, WinningMoves one per move; past it
	// the call returns ErrTooHard.
	MaxNodes int

	tt      []uint64 // hash with its low bit replaced by "the side to move wins"; 0 empty
	nodes   int
	bufs    [][]Cell                  // move lists by depth
	history [MaxSize * MaxSize]uint32 // how often each cell won a position: tried first
}

// ttBits sizes the transposition table (2^ttBits entries, 8 bytes each).
const ttBits = 22

// NewSolver returns a solver with an empty transposition table; the table
// is kept across calls (positions of one game share most of it).
func NewSolver() *Solver { return &Solver{tt: make([]uint64, 1<<ttBits)} }

// lookup returns the table's verdict on hash h, if it holds one. Entries
// are replaced on collision; a verdict is trusted only for the same hash
// (its low bit aside: a false match needs two positions whose 64-bit hashes
// differ in that bit alone).
func (s *Solver) lookup(h uint64) (win, ok bool) {
	e := s.tt[h>>(64-ttBits)]
	if e == 0 || e|1 != h|1 {
		return false, false
	}
	return e&1 == 1, true
}

func (s *Solver) store(h uint64, win bool) {
	e := h &^ 1
	if win {
		e |= 1
	}
	if e == 0 {
		e = 2 // never the empty marker
	}
	s.tt[h>>(64-ttBits)] = e
}

// Wins reports whether the side to move of b wins with perfect play. A
// position already won reports whether its winner is the side to move.
func (s *Solver) Wins(b Board) (bool, error) {
	if b.Size() > maxSolve {
		return false, fmt.Errorf("%w: the solver takes boards up to %d×%d", ErrTooHard, maxSolve, maxSolve)
	}
	if w := b.Winner(); w != Empty {
		return w == b.ToMove(), nil
	}
	s.nodes = 0
	win, ok := s.search(&b, 0)
	if !ok {
		return false, fmt.Errorf("%w (%d nodes)", ErrTooHard, s.limit())
	}
	return win, nil
}

// WinningMoves returns every move of the side to move that keeps a win
// with perfect play (none when it loses).
func (s *Solver) WinningMoves(b Board) ([]Cell, error) {
	if b.Size() > maxSolve {
		return nil, fmt.Errorf("%w: the solver takes boards up to %d×%d", ErrTooHard, maxSolve, maxSolve)
	}
	if b.Winner() != Empty {
		return nil, ErrGameOver
	}
	var out []Cell
	for _, m := range b.Moves(nil) {
		c := b
		c.Play(m)
		if c.Winner() == b.ToMove() {
			out = append(out, m)
			continue
		}
		s.nodes = 0
		opp, ok := s.search(&c, 1)
		if !ok {
			return nil, fmt.Errorf("%w (%d nodes)", ErrTooHard, s.limit())
		}
		if !opp {
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *Solver) limit() int {
	if s.MaxNodes > 0 {
		return s.MaxNodes
	}
	return 50_000_000
}

// search reports whether the side to move of b (not yet won) wins; ok is
// false once the node limit is passed.
func (s *Solver) search(b *Board, depth int) (win, ok bool) {
	h := b.Hash()
	if v, hit := s.lookup(h); hit {
		return v, true
	}
	if s.nodes++; s.nodes > s.limit() {
		return false, false
	}
	for len(s.bufs) <= depth {
		s.bufs = append(s.bufs, make([]Cell, 0, MaxSize*MaxSize))
	}
	me := b.ToMove()
	// A side that can connect at once wins; one whose opponent can connect
	// at two cells loses (it cannot connect itself, or it would have), and
	// with one such cell it must block there.
	if b.connectingCells(me) != 0 {
		s.store(h, true)
		return true, true
	}
	threatMask := b.connectingCells(me.Opponent())
	if threatMask&(threatMask-1) != 0 {
		s.store(h, false)
		return false, true
	}
	moves := s.bufs[depth][:0]
	threats := 0
	if threatMask != 0 {
		moves, threats = append(moves, Cell(bits.TrailingZeros64(uint64(threatMask)))), 1
	} else {
		moves = b.Moves(moves)
	}
	s.bufs[depth] = moves
	if threats == 0 {
		s.order(moves, b.Size())
	}
	for _, m := range moves {
		c := *b
		c.Play(m)
		oppWins, ok := s.search(&c, depth+1)
		if !ok {
			return false, false
		}
		if !oppWins {
			s.history[m]++
			s.store(h, true)
			return true, true
		}
	}
	s.store(h, false)
	return false, true
}

// order sorts moves by how often each won a position so far, then by
// distance from the board's centre (in the hexagonal metric): wins are
// found sooner, and a won position needs only one.
func (s *Solver) order(moves []Cell, size int) {
	key := func(c Cell) int {
		x, y := 2*(int(c)%size)-(size-1), 2*(int(c)/size)-(size-1)
		z := -x - y
		return -int(s.history[c])<<6 + max(abs(x), abs(y), abs(z))
	}
	for i := 1; i < len(moves); i++ { // insertion sort: ≤ 64 moves, no allocation
		m, d := moves[i], key(moves[i])
		j := i
		for ; j > 0 && key(moves[j-1]) > d; j-- {
			moves[j] = moves[j-1]
		}
		moves[j] = m
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// cellMask is a set of cells of a board of at most 8×8 (bit c for cell c);
// the solver's boards fit.
type cellMask uint64

// maxSolve is the largest board side the solver takes (cellMask's).
const maxSolve = 8

// connectingCells returns the empty cells where a stone of col would
// connect col's edges at once: cells touching both a group joined to one
// edge (or that edge) and a group joined to the other.
func (b *Board) connectingCells(col Color) cellMask {
	n := b.size
	var own, other *[MaxSize]uint32
	if col == Black {
		own, other = &b.rows[0], &b.rows[1]
	} else {
		own, other = &b.cols[1], &b.cols[0] // White's edges are columns: the same sweep on the transpose
	}
	full := uint32(1)<<n - 1
	top := reachEdge(own, n)
	var rot [MaxSize]uint32
	for y := 0; y < n; y++ {
		rot[n-1-y] = bits.Reverse32(own[y]) >> (32 - n)
	}
	bot := reachEdge(&rot, n)
	var out cellMask
	for y := 0; y < n; y++ {
		touchTop, touchBot := adjacent(&top, y, n, full), uint32(0)
		if y == 0 {
			touchTop = full
		}
		// Row y of the rotated board is row n-1-y here, mirrored.
		yb := n - 1 - y
		tb := adjacent(&bot, yb, n, full)
		if yb == 0 {
			tb = full
		}
		touchBot = bits.Reverse32(tb) >> (32 - n)
		empty := full &^ (own[y] | other[y])
		for e := empty & touchTop & touchBot; e != 0; e &= e - 1 {
			x := bits.TrailingZeros32(e)
			if col == Black {
				out |= 1 << (y*n + x)
			} else {
				out |= 1 << (x*n + y) // the transpose: row y is column y
			}
		}
	}
	return out
}

// reachEdge returns the stones of rows joined to row 0 (the sweep of
// connects, run to its fixed point).
func reachEdge(rows *[MaxSize]uint32, n int) [MaxSize]uint32 {
	full := uint32(1)<<n - 1
	var reach [MaxSize]uint32
	reach[0] = expand(rows[0], rows[0])
	for {
		changed := false
		for y := 1; y < n; y++ {
			r := reach[y-1]
			if s := (r|r>>1)&rows[y] | reach[y]; s != reach[y] {
				reach[y] = expand(rows[y], s)
				changed = true
			}
		}
		for y := n - 2; y >= 0; y-- {
			r := reach[y+1]
			if s := (r|r<<1)&full&rows[y] | reach[y]; s != reach[y] {
				reach[y] = expand(rows[y], s)
				changed = true
			}
		}
		if !changed {
			return reach
		}
	}
}

// adjacent returns the cells of row y next to a cell of set (per row):
// (x±1, y), (x, y−1), (x+1, y−1), (x, y+1), (x−1, y+1).
func adjacent(set *[MaxSize]uint32, y, n int, full uint32) uint32 {
	r := set[y]
	a := (r<<1 | r>>1) & full
	if y > 0 {
		u := set[y-1]
		a |= u | u>>1
	}
	if y < n-1 {
		d := set[y+1]
		a |= (d | d<<1) & full
	}
	return a
}
