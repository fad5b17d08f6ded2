package mcts

import (
	"sync"
	"testing"
)

// TestArenaLockFreeLookups hammers an arena the way the threads of one
// process do: one adds nodes (past several chunks, so the directory grows
// under the readers) while others look up every index named so far and
// indexes not yet named; then a newer epoch empties it. Run under -race.
func TestArenaLockFreeLookups(t *testing.T) {
	const total = 3*arenaChunkLen + 17
	var ar arena
	nodes := make([]*node, total)
	for i := range nodes {
		nodes[i] = &node{depth: uint32(i)}
	}
	var named sync.Map // idx -> struct{}: handed out by add, as a ref would be
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan string, 8)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				named.Range(func(k, _ any) bool {
					i := k.(uint32)
					if n := ar.get(1, i); n != nodes[i] {
						select {
						case errs <- "a named node was not found, or another was":
						default:
						}
						return false
					}
					return true
				})
				if n := ar.get(1, total+5); n != nil {
					select {
					case errs <- "an index never added found a node":
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < total; i++ {
		idx, ok := ar.add(1, nodes[i])
		if !ok || idx != uint32(i) {
			t.Fatalf("add %d: index %d, ok %v", i, idx, ok)
		}
		named.Store(idx, struct{}{})
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}

	count := 0
	ar.each(func(idx uint32, n *node) {
		if n != nodes[idx] {
			t.Errorf("each: index %d holds the wrong node", idx)
		}
		count++
	})
	if count != total {
		t.Errorf("each saw %d nodes, want %d", count, total)
	}
	// A call of a newer phase empties the arena; the older phase's calls
	// then find nothing, not even the newer phase's node of the same
	// index, and its late nodes are refused.
	if n := ar.get(2, 0); n != nil {
		t.Errorf("epoch 2 found node 0 of epoch 1")
	}
	if idx, ok := ar.add(2, nodes[1]); !ok || idx != 0 || ar.get(2, 0) != nodes[1] {
		t.Errorf("epoch 2's first node: index %d, ok %v", idx, ok)
	}
	if n := ar.get(1, 0); n != nil {
		t.Errorf("a stale lookup (epoch 1) found a node after epoch 2 began")
	}
	if _, ok := ar.add(1, nodes[0]); ok {
		t.Errorf("a node of a finished epoch was added")
	}
}

// each calls f with every node of the current epoch, in order (tests).
func (ar *arena) each(f func(idx uint32, n *node)) {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	g := ar.cur.Load()
	if g == nil {
		return
	}
	dir := *g.dir.Load()
	for i := uint32(0); i < g.n; i++ {
		f(i, dir[i/arenaChunkLen][i%arenaChunkLen].Load())
	}
}
