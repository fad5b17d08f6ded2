package mcts

import "sync"

// spinMutex is a sync.Mutex whose Lock tries a while before it blocks.
//
// Worker threads are locked OS threads, about one per core, and what they
// hold a node's or a queue's lock for takes well under a microsecond. A
// sync.Mutex waiter that finds the lock taken spins briefly and then parks:
// its thread sleeps on a futex and the unlocker pays a futex wake-up, tens
// of microseconds between them, while the lock was free again long before.
// Polling TryLock (a load while the lock is held, so waiters do not steal
// the line from the holder) bridges that; after lockSpins tries the waiter
// blocks as before, so a holder that lost its core costs a waiter no more
// than it did.
type spinMutex struct{ sync.Mutex }

// lockSpins is how many times Lock tries before it blocks: a few
// microseconds.
const lockSpins = 1000

// Lock locks m.
func (m *spinMutex) Lock() {
	for range lockSpins {
		if m.TryLock() {
			return
		}
	}
	m.Mutex.Lock()
}
