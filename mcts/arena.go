package mcts

import (
	"sync/atomic"
)

// arena holds the nodes a thread owns in the current epoch (phase).
//
// Every level of every rollout looks a node up, and within a process any
// thread may look up any thread's nodes (shortcut calls), so lookups take
// no lock: under a mutex the arena's lock word moved between the cores at
// every level (1×2 profile: lookup 6 % of the samples, most of it the lock).
// Adding a node and starting a newer epoch take mu; a node is published by
// one atomic store after it is complete, and a lookup of a slot not yet
// published (or of an older epoch) finds nil, as a stale call should.
type arena struct {
	mu   spinMutex
	solo soloLocks // a process of one worker thread: nobody to exclude
	cur  atomic.Pointer[arenaEpoch]
}

// arenaEpoch is one epoch's nodes: a directory of fixed chunks. Growing
// replaces the directory (chunks never move), so a reader holding an old
// directory still finds every node it could name.
type arenaEpoch struct {
	epoch uint32
	dir   atomic.Pointer[[]*arenaChunk]
	n     uint32 // nodes added; under arena.mu
}

const arenaChunkLen = 1024

type arenaChunk [arenaChunkLen]atomic.Pointer[node]

// get returns node idx of epoch e; nil if e is not the arena's epoch or
// idx was never added in it. A newer epoch e resets the arena first (the
// first call of a phase to reach this thread's nodes may be a lookup).
func (ar *arena) get(e, idx uint32) *node {
	g := ar.cur.Load()
	if g == nil || g.epoch < e {
		g = ar.begin(e)
	}
	if g.epoch != e { // a stale call: its phase is over
		return nil
	}
	dir := *g.dir.Load()
	c := idx / arenaChunkLen
	if int(c) >= len(dir) {
		return nil
	}
	return dir[c][idx%arenaChunkLen].Load()
}

// begin makes e the arena's epoch unless it already has e or a newer one,
// and returns the epoch it has.
func (ar *arena) begin(e uint32) *arenaEpoch {
	ar.solo.lock(&ar.mu)
	defer ar.solo.unlock(&ar.mu)
	return ar.beginLocked(e)
}

func (ar *arena) beginLocked(e uint32) *arenaEpoch {
	g := ar.cur.Load()
	if g == nil || g.epoch < e {
		g = &arenaEpoch{epoch: e}
		g.dir.Store(new([]*arenaChunk))
		ar.cur.Store(g)
	}
	return g
}

// add puts n into epoch e and returns its index; false if the arena has
// moved on to a newer epoch (n belongs to a finished phase).
func (ar *arena) add(e uint32, n *node) (uint32, bool) {
	ar.solo.lock(&ar.mu)
	defer ar.solo.unlock(&ar.mu)
	g := ar.beginLocked(e)
	if g.epoch != e {
		return 0, false
	}
	idx := g.n
	dir := *g.dir.Load()
	if c := int(idx / arenaChunkLen); c == len(dir) {
		// In place when capacity allows: readers of the old directory
		// never index past its length.
		dir = append(dir, new(arenaChunk))
		g.dir.Store(&dir)
	}
	dir[idx/arenaChunkLen][idx%arenaChunkLen].Store(n)
	g.n++
	return idx, true
}
