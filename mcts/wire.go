package mcts

import (
	"encoding/binary"
	"fmt"
)

// The calls of the distributed search (docs/wire.md, "mcts calls"). Every
// argument is a sequence of little-endian uint32 words; the first is the
// phase's epoch, so calls left over from an earlier move are recognised and
// dropped. The node a call works on is owned by the destination thread.
//
//	descend   epoch, node, count                 count rollouts select at node
//	create    epoch, parent owner, parent, slot, depth
//	                                             + buffer: the child's state
//	created   epoch, parent, slot, child owner, child
//	backprop  epoch, node, slot, wins, playouts, rollouts
//	steal     epoch, thief                       an idle thread asks for leaves
//	eval      epoch, parent owner, parent, slot  + buffer: a leaf's state,
//	                                             to evaluate for its owner
//	gave      epoch, count                       the answer to steal: count
//	                                             evals came before it
//	stop      epoch
//	stats     epoch, thread, then uint64 words: playouts, leaves, nodes,
//	          rollouts, calls received

// ErrMessage is wrapped by every malformed call.

const (
	kindDescend = iota
	kindCreate
	kindCreated
	kindBackprop
	kindStop
	kindStats
	kindSteal
	kindEval
	kindGave
	numKinds
)

var kindWords = [numKinds]int{kindDescend: 3, kindCreate: 5, kindCreated: 5, kindBackprop: 6, kindStop: 1, kindStats: 2 + 2*numStats, kindSteal: 2, kindEval: 4, kindGave: 2}

var kindNames = [numKinds]string{"descend", "create", "created", "backprop", "stop", "stats", "steal", "eval", "gave"}

// action is one decoded call, or one operation a thread does locally.
type action struct {
	kind  uint8
	owner uint32    // the thread owning the node worked on (not sent: the destination)
	w     [6]uint32 // the words of the call, w[0] the epoch
	stats [numStats]uint64
	state State // create
}

func (a *action) epoch() uint32 { return a.w[0] }

// The calls by kind: a constructor each, and the named words of the call
// (w[0] is always the epoch). They are the only code that knows the word
// positions of the table above.

func descendCall(epoch, node, count uint32) action {
	return action{kind: kindDescend, w: [6]uint32{epoch, node, count}}
}

// descend: count rollouts select at node.
func (a *action) descend() (node, count uint32) { return a.w[1], a.w[2] }

func createCall(epoch uint32, parent ref, slot, depth uint32, state State) action {
	return action{kind: kindCreate, w: [6]uint32{epoch, parent.owner, parent.idx, slot, depth}, state: state}
}

// create: make the child of parent's slot, depth moves below the root,
// from the state the call carries.
func (a *action) create() (parent ref, slot, depth uint32) {
	return ref{a.w[1], a.w[2]}, a.w[3], a.w[4]
}

func createdCall(epoch, parent, slot uint32, child ref) action {
	return action{kind: kindCreated, w: [6]uint32{epoch, parent, slot, child.owner, child.idx}}
}

// created: parent's slot now has child.
func (a *action) created() (parent, slot uint32, child ref) {
	return a.w[1], a.w[2], ref{a.w[3], a.w[4]}
}

func backpropCall(epoch, node, slot, wins, playouts, rollouts uint32) action {
	return action{kind: kindBackprop, w: [6]uint32{epoch, node, slot, wins, playouts, rollouts}}
}

// backprop: add wins of playouts (from rollouts rollouts) through node's slot.
func (a *action) backprop() (node, slot, wins, playouts, rollouts uint32) {
	return a.w[1], a.w[2], a.w[3], a.w[4], a.w[5]
}

func stealCall(epoch, thief uint32) action {
	return action{kind: kindSteal, w: [6]uint32{epoch, thief}}
}

// steal: thief has nothing to do and asks for leaves to evaluate.
func (a *action) steal() (thief uint32) { return a.w[1] }

func evalCall(epoch uint32, parent ref, slot uint32, state State) action {
	return action{kind: kindEval, w: [6]uint32{epoch, parent.owner, parent.idx, slot}, state: state}
}

// eval: evaluate the leaf with the state the call carries, child of
// parent's slot, and backpropagate to parent as its owner would.
func (a *action) eval() (parent ref, slot uint32) { return ref{a.w[1], a.w[2]}, a.w[3] }

func gaveCall(epoch, count uint32) action {
	return action{kind: kindGave, w: [6]uint32{epoch, count}}
}

// gave: the answer to a steal, after the count evals it sent.
func (a *action) gave() (count uint32) { return a.w[1] }

func stopCall(epoch uint32) action { return action{kind: kindStop, w: [6]uint32{epoch}} }

func statsCall(epoch, thread uint32, stats [numStats]uint64) action {
	return action{kind: kindStats, w: [6]uint32{epoch, thread}, stats: stats}
}

// statsFrom: the thread whose statistics the call carries.
func (a *action) statsFrom() uint32 { return a.w[1] }

// encode appends the call's argument bytes.
func (a *action) encode(dst []byte) []byte {
	n := kindWords[a.kind]
	if a.kind == kindStats {
		dst = binary.LittleEndian.AppendUint32(dst, a.w[0])
		dst = binary.LittleEndian.AppendUint32(dst, a.w[1])
		for _, v := range a.stats {
			dst = binary.LittleEndian.AppendUint64(dst, v)
		}
		return dst
	}
	for i := 0; i < n; i++ {
		dst = binary.LittleEndian.AppendUint32(dst, a.w[i])
	}
	return dst
}

// decode reads the arguments of a call of kind.
func decode(kind uint8, args []byte) (action, error) {
	a := action{kind: kind}
	if int(kind) >= numKinds {
		return a, fmt.Errorf("%w: kind %d", ErrMessage, kind)
	}
	if len(args) != 4*kindWords[kind] {
		return a, fmt.Errorf("%w: %s call of %d bytes (want %d)", ErrMessage, kindNames[kind], len(args), 4*kindWords[kind])
	}
	if kind == kindStats {
		a.w[0] = binary.LittleEndian.Uint32(args)
		a.w[1] = binary.LittleEndian.Uint32(args[4:])
		for i := range a.stats {
			a.stats[i] = binary.LittleEndian.Uint64(args[8+8*i:])
		}
		return a, nil
	}
	for i := 0; i < kindWords[kind]; i++ {
		a.w[i] = binary.LittleEndian.Uint32(args[4*i:])
	}
	return a, nil
}
