package mcts

import (
	"testing"

	"github.com/seriema-go/seriema/dsfabric"
)

// audit checks, for every node of this process whose children are in this
// process too, that visit counts agree parent-to-children after a phase:
// a node's visits are the sum of its slots', and a slot's visits are its
// child's plus the one evaluation that created it (a won child is evaluated
// on every visit instead). With Config.SpreadDepth, every node deeper than
// it must live in its parent's process (this one).
func (d *Distributed) audit(t *testing.T) {
	t.Helper()
	playouts := uint32(d.cfg.Playouts)
	byRef := map[ref]*node{}
	for _, w := range d.workers {
		w.arena.each(func(i uint32, n *node) {
			byRef[ref{uint32(w.id), i}] = n
		})
	}
	for at, n := range byRef {
		n.mu.Lock()
		if s := d.cfg.SpreadDepth; s > 0 && n.depth > uint32(s) && d.local(dsfabric.ThreadID(n.parent.owner)) == nil {
			t.Errorf("node %v, %d moves deep (SpreadDepth %d), has its parent in another process (thread %d)", at, n.depth, s, n.parent.owner)
		}
		var sum uint32
		for _, s := range n.slots {
			sum += s.visits
			if s.wins > s.visits {
				t.Errorf("node %v: slot %d won %d of %d playouts", at, s.move, s.wins, s.visits)
			}
			if s.deferred != 0 {
				t.Errorf("node %v: slot %d still has %d deferred rollouts after the phase", at, s.move, s.deferred)
			}
			if !s.created {
				continue // its creation notice may still be on its way
			}
			c, ok := byRef[s.child]
			if !ok {
				continue // in another process
			}
			c.mu.Lock()
			want := c.visits + playouts
			if c.winner >= 0 {
				want = s.visits
			}
			c.mu.Unlock()
			if s.visits != want {
				t.Errorf("node %v: slot %d has %d visits, its child %v %d", at, s.move, s.visits, s.child, c.visits)
			}
		}
		if sum != n.visits {
			t.Errorf("node %v: %d visits, its slots %d", at, n.visits, sum)
		}
		n.mu.Unlock()
	}
}
