package mcts

import (
	"sync/atomic"
	"syscall"
	"time"
)

// spinMutex is a mutual-exclusion lock for the search's short critical
// sections (a node's statistics, a leaf queue, an arena's directory). Its
// zero value is unlocked.
//
// Worker threads are locked OS threads, about one per core, and what they
// hold these locks for takes well under a microsecond. A sync.Mutex waiter
// that finds the lock taken spins briefly and then parks: its thread sleeps
// on a futex and the unlocker pays a futex wake-up, tens of microseconds
// between them, while the lock was free again long before. Worse, a waiter
// parked for over a millisecond (its holder lost the core) puts the mutex
// in starvation mode, where every Unlock hands the processor to the waiter
// and the unlocking worker waits to be scheduled again: in a 1×2 search on
// two cores that cost each worker 9 % of its time (execution trace,
// scheduler latency at Unlock).
//
// So Lock polls (a load while the lock is held, so waiters do not steal the
// line from the holder), then yields the core to other threads (the holder
// may be waiting for this very core), then sleeps for growing intervals up
// to lockMaxSleep: a waiter whose holder lost its core costs one wake-up per
// interval, never a busy core. Unlock is one store and wakes nobody.
type spinMutex struct{ state atomic.Uint32 }

const (
	// lockSpins is how many times Lock polls before it yields: a few
	// microseconds.
	lockSpins = 1000
	// lockYields is how many times Lock then yields the core (sched_yield,
	// under a microsecond each when no other thread wants the core) before
	// it sleeps.
	lockYields = 64
	// lockMaxSleep bounds a sleeping waiter's interval between tries.
	lockMaxSleep = 100 * time.Microsecond
)

// TryLock locks m if it is unlocked and reports whether it did.
func (m *spinMutex) TryLock() bool {
	return m.state.Load() == 0 && m.state.CompareAndSwap(0, 1)
}

// Lock locks m, waiting as the type's comment says.
func (m *spinMutex) Lock() {
	for range lockSpins {
		if m.TryLock() {
			return
		}
	}
	for range lockYields {
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		if m.TryLock() {
			return
		}
	}
	for d := time.Microsecond; ; d = min(2*d, lockMaxSleep) {
		time.Sleep(d)
		if m.TryLock() {
			return
		}
	}
}

// Unlock unlocks m. Unlocking an unlocked spinMutex is a run-time error, as
// it is for sync.Mutex.
func (m *spinMutex) Unlock() {
	if m.state.Swap(0) != 1 {
		panic("mcts: unlock of an unlocked spinMutex")
	}
}

// soloLocks skips the spinMutexes of a process that has one worker
// thread (1×1, and each process of 2×1), where nobody could contend for
// them: that thread alone touches its nodes, leaf queue and arena
// (handlers only queue; the search's result is read by the root's thread).
// The two locked instructions of each Lock and Unlock were 4 % of a 1×1
// search (profile: TryLock's compare-and-swap 0.16 s, Unlock's swap 0.04 s
// of 5.2 s). The zero value locks.
type soloLocks bool

func (s soloLocks) lock(m *spinMutex) {
	if !s {
		m.Lock()
	}
}

// tryLock locks m if it is free (always, in a process of one thread) and
// reports whether it did.
func (s soloLocks) tryLock(m *spinMutex) bool {
	return bool(s) || m.TryLock()
}

func (s soloLocks) unlock(m *spinMutex) {
	if !s {
		m.Unlock()
	}
}
