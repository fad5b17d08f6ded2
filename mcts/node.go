package mcts

import (
	"math"
	"math/rand/v2"
)

// ref names a node: the thread that owns it and its index in that thread's
// arena. The sequential search has one arena, owner 0.
type ref struct {
	owner uint32
	idx   uint32
}

// slot is what a node knows of one child: the move, the playouts through it
// (visits, counted when a rollout selects it), the playouts whose results
// came back (done: visits minus those under way) and how many of those the
// player to move at the node won, and where the child lives once it exists.
type slot struct {
	move     Move
	visits   uint32
	done     uint32
	wins     uint32
	child    ref
	created  bool
	deferred uint32 // rollouts waiting for the child's address
	// UCB terms kept up to date by refresh, so that selection over many
	// children costs a multiply-add each rather than a division and a
	// square root.
	q, inv float64 // value (wins/done), 1/sqrt(visits)
}

// pendingValue is a slot's value while none of its results are back.
const pendingValue = 0.5

// refresh recomputes the slot's UCB terms after visits, done or wins
// changed. Rollouts under way count in the exploration term only (as
// visits), not as losses: with the classic virtual loss a child whose
// process answered late looked lost for as long as it did, and a search
// over a busy machine starved the immediate win (its first results came
// back 200 rollouts late, by when a slower win had taken the visits).
// The sequential search has nothing under way at selection: done is
// visits there, and the formula the classic one.
func (s *slot) refresh() {
	s.inv = 1 / math.Sqrt(float64(s.visits))
	s.q = pendingValue
	if s.done > 0 {
		s.q = float64(s.wins) / float64(s.done)
	}
}

// addWins adds backpropagated results to slot i: wins of playouts.
func (n *node) addWins(i int, wins, playouts uint32) {
	n.slots[i].wins += wins
	n.slots[i].done += playouts
	n.slots[i].refresh()
}

// node is one tree node. Its state is never changed after creation; the rest
// is guarded by mu (only the owner's process touches it).
type node struct {
	mu         spinMutex
	state      State
	parent     ref
	parentSlot uint32
	root       bool
	epoch      uint32 // distributed: the phase the node belongs to
	stolen     bool   // distributed: a leaf another process gave to evaluate (no arena, no children)
	depth      uint32 // distributed: moves below the root
	winner     int
	toMove     int
	untried    []Move // expansion takes one at random; filled on first selection
	listed     bool   // untried has been filled
	slots      []slot
	visits     uint32
	// Backpropagation combining: results waiting to go to the parent.
	upWins, upN, upRollouts uint32
	dirty                   bool
}

func newNode(s State, parent ref, parentSlot uint32, root bool, rng *rand.Rand) *node {
	return &node{state: s, parent: parent, parentSlot: parentSlot, root: root, winner: s.Winner(), toMove: s.ToMove()}
}

// choose selects the slot a rollout follows — a new one, at random, while
// moves are untried (expansion), else the best by UCB — and charges it the virtual
// loss of playouts visits. The caller holds mu and has checked winner < 0.
func (n *node) choose(c float64, playouts uint32, rng *rand.Rand) (i int, expand bool) {
	if !n.listed {
		// Most leaves are never selected again: list moves only when needed.
		n.untried, n.listed = n.state.Moves(nil), true
	}
	if k := len(n.untried); k > 0 {
		j := rng.IntN(k)
		n.slots = append(n.slots, slot{move: n.untried[j]})
		n.untried[j] = n.untried[k-1]
		n.untried = n.untried[:k-1]
		i, expand = len(n.slots)-1, true
	} else {
		i = n.ucb(c)
	}
	n.slots[i].visits += playouts
	n.slots[i].refresh()
	n.visits += playouts
	return i, expand
}

// ucb returns the slot with the highest UCB score (the first on ties).
func (n *node) ucb(c float64) int {
	k := c * math.Sqrt(math.Log(float64(max(n.visits, 1))))
	best, bestScore := 0, math.Inf(-1)
	for i := range n.slots {
		s := &n.slots[i]
		if score := s.q + k*s.inv; score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// mostVisited returns the most visited slot, or −1 without children.
func (n *node) mostVisited() int {
	best := -1
	for i := range n.slots {
		if best < 0 || n.slots[i].visits > n.slots[best].visits {
			best = i
		}
	}
	return best
}

// evaluate plays the leaf's playouts and returns how many the player who
// moved into it won (its parent's player to move). A won position needs no
// playouts.
func evaluate(s State, winner, toMove, playouts int, seed uint64) uint32 {
	mover := 1 - toMove
	if winner >= 0 {
		if winner == mover {
			return uint32(playouts)
		}
		return 0
	}
	w0 := s.Simulate(playouts, seed)
	if mover == 0 {
		return uint32(w0)
	}
	return uint32(playouts - w0)
}

// result builds a Result from the root after a phase.
func (n *node) result(rollouts, playouts int) Result {
	r := Result{Rollouts: rollouts, Simulations: rollouts * playouts, Move: -1}
	for _, s := range n.slots {
		wr := 0.0
		if s.visits > 0 {
			wr = float64(s.wins) / float64(s.visits)
		}
		r.Children = append(r.Children, Child{Move: s.move, Visits: int(s.visits) / playouts, WinRate: wr})
	}
	if i := n.mostVisited(); i >= 0 {
		r.Move = n.slots[i].move
		r.MoveName = n.state.MoveName(r.Move)
	}
	return r
}

// seedOf derives independent seeds from a base seed and a stream number.
func seedOf(base, stream uint64) uint64 {
	x := base + stream*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
