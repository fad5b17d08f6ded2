package mcts

import (
	"sync"
	"testing"
	"time"
)

// TestSpinMutexExclusion hammers one spinMutex from more goroutines than
// there are cores, so that waiters go through every stage of Lock (polling,
// yielding, sleeping). The counter is a plain int: under -race a lock that
// let two holders in, or that failed to order one holder's writes before the
// next one's reads, is reported; without -race the count comes up short.
func TestSpinMutexExclusion(t *testing.T) {
	const goroutines, rounds = 8, 2000
	var m spinMutex
	count := 0
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				m.Lock()
				v := count
				if (g+i)%500 == 0 {
					time.Sleep(50 * time.Microsecond) // a holder that loses its core
				}
				count = v + 1
				m.Unlock()
			}
		}()
	}
	wg.Wait()
	if count != goroutines*rounds {
		t.Fatalf("count %d after %d locked increments", count, goroutines*rounds)
	}
}

// TestSpinMutexSleepingWaiter holds the lock long past the polling and
// yielding stages: the waiter must get it once it is released, and not
// before.
func TestSpinMutexSleepingWaiter(t *testing.T) {
	var m spinMutex
	m.Lock()
	if m.TryLock() {
		t.Fatal("TryLock succeeded on a held lock")
	}
	got := make(chan time.Time)
	go func() {
		m.Lock()
		at := time.Now()
		m.Unlock()
		got <- at
	}()
	time.Sleep(20 * time.Millisecond)
	released := time.Now()
	m.Unlock()
	select {
	case at := <-got:
		if at.Before(released) {
			t.Fatalf("the waiter got the lock %v before it was released", released.Sub(at))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the released lock")
	}
	if !m.TryLock() {
		t.Fatal("TryLock failed on a lock its last holder released")
	}
}

// TestSpinMutexUnlockUnlocked: like sync.Mutex, unlocking an unlocked lock
// is a bug worth a panic, not a silent corruption of the next holder's
// exclusion.
func TestSpinMutexUnlockUnlocked(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of an unlocked spinMutex did not panic")
		}
	}()
	var m spinMutex
	m.Unlock()
}

// TestSoloLocks: a process of several worker threads takes the locks
// (soloLocks false, the zero value); one of a single worker thread takes
// none, and leaves them unlocked for nobody.
func TestSoloLocks(t *testing.T) {
	var m spinMutex
	var shared soloLocks
	shared.lock(&m)
	if m.TryLock() {
		t.Fatal("the zero soloLocks did not take the lock")
	}
	shared.unlock(&m)
	if !m.TryLock() {
		t.Fatal("the zero soloLocks did not release the lock")
	}
	m.Unlock()
	solo := soloLocks(true)
	solo.lock(&m)
	if !m.TryLock() {
		t.Fatal("a solo process took a lock")
	}
	m.Unlock()
	solo.unlock(&m) // must not panic: it never locked
}
