package mcts

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/seriema-go/seriema/dsfabric"
)

// stubState is a position nobody plays: the actions below never need one.
type stubState struct{}

func (stubState) ToMove() int                             { return 0 }
func (stubState) Winner() int                             { return -1 }
func (stubState) Moves(dst []Move) []Move                 { return dst }
func (stubState) Clone() State                            { return stubState{} }
func (stubState) Play(Move) error                         { return nil }
func (stubState) Simulate(n int, seed uint64) int         { return 0 }
func (stubState) AppendBinary(dst []byte) ([]byte, error) { return dst, nil }
func (stubState) MoveName(Move) string                    { return "-" }
func (stubState) String() string                          { return "stub" }

// TestActionsNamingNothing (bad input between processes): a call that
// decodes but names what is not there — a slot past a node's children,
// more wins than playouts, a thief in this process or outside the job, an
// evaluation for a parent outside the job — changes nothing, sends
// nothing and does not panic; a well-formed one beside them still counts.
func TestActionsNamingNothing(t *testing.T) {
	d := &Distributed{all: 4, threads: 2, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for i := range 2 {
		d.workers = append(d.workers, &worker{d: d, id: dsfabric.ThreadID(i), rng: rand.New(rand.NewPCG(1, uint64(i)))})
	}
	w := d.workers[0]
	const e = 1
	n := &node{state: stubState{}, parent: ref{owner: 2, idx: 7}, winner: -1, slots: make([]slot, 2)}
	at, ok := w.add(0, e, n)
	if !ok {
		t.Fatal("the arena refused a node")
	}
	bad := []action{
		createdCall(e, at.idx, 2, ref{owner: 1, idx: 0}),
		backpropCall(e, at.idx, 2, 1, 1, 1),
		backpropCall(e, at.idx, 0, 3, 2, 1),
		stealCall(e, 1), // a thread of this process
		stealCall(e, 4), // no thread of the job
		evalCall(e, ref{owner: 4, idx: 0}, 0, stubState{}),
	}
	for _, a := range bad {
		a.owner = 0
		w.do(&a)
	}
	for i, s := range n.slots {
		if s != (slot{}) {
			t.Errorf("slot %d changed by calls naming nothing: %+v", i, s)
		}
	}
	if n.upN != 0 || n.dirty || len(w.dirty) != 0 || len(w.todo) != 0 || len(w.sims) != 0 {
		t.Errorf("calls naming nothing left work: up %d, dirty %v/%d, todo %d, sims %d", n.upN, n.dirty, len(w.dirty), len(w.todo), len(w.sims))
	}
	ok1 := backpropCall(e, at.idx, 1, 1, 2, 1)
	ok1.owner = 0
	w.do(&ok1)
	if s := n.slots[1]; s.wins != 1 || s.done != 2 || n.upN != 2 || !n.dirty {
		t.Errorf("a well-formed backprop after them: slot %+v, up %d, dirty %v", s, n.upN, n.dirty)
	}
}

// TestBusyNodePostponed: an action on a node another thread of the
// process holds (descend, created, backprop) is neither waited for nor
// lost: it is put off to the thread's next round, counts as no work
// (so the thread's idle accounting and back-off see a wait), and is done
// there once the node is free.
func TestBusyNodePostponed(t *testing.T) {
	d := &Distributed{all: 2, threads: 2, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.cfg.Playouts, d.cfg.C = 1, 1
	for i := range 2 {
		d.workers = append(d.workers, &worker{d: d, id: dsfabric.ThreadID(i), rng: rand.New(rand.NewPCG(1, uint64(i)))})
	}
	w := d.workers[0]
	const e = 1
	n := &node{state: stubState{}, parent: ref{owner: 1, idx: 7}, winner: -1, listed: true, slots: make([]slot, 2)}
	at, ok := w.add(0, e, n)
	if !ok {
		t.Fatal("the arena refused a node")
	}
	acts := []action{
		backpropCall(e, at.idx, 0, 1, 2, 1),
		createdCall(e, at.idx, 1, ref{owner: 1, idx: 0}),
		descendCall(e, at.idx, 3),
	}
	n.mu.Lock() // another thread holds the node
	for i := range acts {
		acts[i].owner = 0
		a := acts[i]
		if w.do(&a) {
			t.Errorf("%s on a held node counted as work done", kindNames[a.kind])
		}
	}
	if len(w.later) != len(acts) {
		t.Fatalf("%d actions postponed, want %d", len(w.later), len(acts))
	}
	for i, s := range n.slots {
		if s != (slot{}) {
			t.Errorf("slot %d changed while its node was held: %+v", i, s)
		}
	}
	if n.visits != 0 || n.upN != 0 || n.dirty {
		t.Errorf("node changed while held: visits %d, up %d, dirty %v", n.visits, n.upN, n.dirty)
	}
	n.mu.Unlock()
	w.resume()
	if len(w.later) != 0 || len(w.todo) != len(acts) {
		t.Fatalf("after resume: todo %d, later %d; want %d, 0", len(w.todo), len(w.later), len(acts))
	}
	w.runTodo()
	if len(w.later) != 0 {
		t.Errorf("%d actions postponed again with the node free", len(w.later))
	}
	if s := n.slots[0]; s.wins != 1 || s.done != 2 || n.upN != 2 || !n.dirty {
		t.Errorf("the postponed backprop: slot %+v, up %d, dirty %v", s, n.upN, n.dirty)
	}
	if s := n.slots[1]; !s.created || s.child != (ref{owner: 1, idx: 0}) {
		t.Errorf("the postponed created: slot %+v", s)
	}
	if n.visits != 3 {
		t.Errorf("the postponed descend of 3 rollouts: node visits %d", n.visits)
	}
}
