package mcts

import (
	"math/rand/v2"
	"testing"
)

// TestRolloutsUnderWayAreNotLosses: selection counts a child's rollouts
// under way in its exploration term only. The traced case of a loaded
// 2×1 search: the immediate win has 16 of 16 playouts back and two
// rollouts (32 playouts) still on their way from a slow process, beside a
// slower win with 960 of 1000. Counting the 32 as losses (virtual loss)
// made the win look like 16/48 and the search passed it by; by the
// results that came back it is the best child, and UCB must choose it.
func TestRolloutsUnderWayAreNotLosses(t *testing.T) {
	n := &node{listed: true, winner: -1}
	n.slots = []slot{
		{move: 1, visits: 1000, done: 1000, wins: 960, created: true},
		{move: 2, visits: 48, done: 16, wins: 16, created: true},
	}
	for i := range n.slots {
		n.slots[i].refresh()
		n.visits += n.slots[i].visits
	}
	if q := n.slots[1].q; q != 1 {
		t.Fatalf("value of 16 wins of 16 returned playouts, 32 under way: %v, want 1", q)
	}
	if i, expand := n.choose(1.0, 16, rand.New(rand.NewPCG(1, 2))); expand || n.slots[i].move != 2 {
		t.Fatalf("chose move %d (expand %v), want the win whose results came back, move 2", n.slots[i].move, expand)
	}
	// Nothing back yet: a neutral value, not a loss.
	s := slot{visits: 32}
	s.refresh()
	if s.q != pendingValue {
		t.Fatalf("value with no result back: %v, want %v", s.q, pendingValue)
	}
}
