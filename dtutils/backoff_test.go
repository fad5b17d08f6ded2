package dtutils

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// A loop that calls Wait only while !Sleepy must never reach the sleeping
// phase: one timer sleep costs about a millisecond on Linux.
func TestBackoffNeverSleepsBeforeSleepy(t *testing.T) {
	var b Backoff
	rounds := 0
	for !b.Sleepy() {
		b.Wait()
		rounds++
	}
	if rounds != spinRounds+yieldRounds || b.sleeps != 0 {
		t.Fatalf("%d rounds and %d timer sleeps before Sleepy; want %d and 0", rounds, b.sleeps, spinRounds+yieldRounds)
	}
	b.Wait()
	if b.sleeps != 1 {
		t.Fatalf("Wait after Sleepy did not sleep")
	}
	b.Reset()
	if b.Sleepy() {
		t.Fatal("Reset did not restart the spinning phase")
	}
}

// A waiter that starts sleeping on timers says so once, through Idle: the
// tcp engine then watches the socket instead of waiting for polls that now
// come a millisecond apart.
func TestBackoffIdleOnceWhenSleeping(t *testing.T) {
	calls := 0
	b := Backoff{Idle: func() { calls++ }}
	for !b.Sleepy() {
		b.Wait()
	}
	if calls != 0 {
		t.Fatalf("Idle called %d times while still spinning or yielding", calls)
	}
	b.Wait()
	b.Wait()
	if calls != 1 {
		t.Fatalf("Idle called %d times over two timer sleeps, want 1", calls)
	}
	b.Reset()
	for !b.Sleepy() {
		b.Wait()
	}
	b.Wait()
	if calls != 2 {
		t.Fatalf("after Reset, a new sleeping phase called Idle %d times in all, want 2", calls)
	}
	h := HotWait{Idle: func() { calls++ }} // no hot phase: straight to its Backoff
	for i := 0; i <= spinRounds+yieldRounds; i++ {
		h.Wait()
	}
	if calls != 3 {
		t.Fatalf("HotWait did not pass Idle on to its sleeping phase")
	}
}

// TestHotWaitSpinsBeforeSleeping (§4.1's waiting discipline): within its
// Spin a HotWait keeps polling — it never reaches the sleeping phase, which
// on these machines costs a millisecond per timer sleep.
//
// Spinning is told from yielding with one P: a goroutine that counts runs
// only when the waiter yields.
func TestHotWaitSpinsBeforeSleeping(t *testing.T) {
	slept := 0
	w := HotWait{Spin: time.Hour, Yield: time.Hour, Idle: func() { slept++ }}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				ran.Add(1)
				runtime.Gosched()
			}
		}
	}()
	runtime.Gosched() // let it start
	before := ran.Load()
	for i := 0; i < 1000; i++ {
		w.Wait()
	}
	yielded := ran.Load() - before
	close(stop)
	if slept != 0 || w.b.sleeps != 0 {
		t.Fatalf("HotWait slept (%d timer sleeps) within its spin phase", w.b.sleeps)
	}
	if yielded > 100 {
		t.Fatalf("HotWait yielded the processor within its spin phase (another goroutine ran %d times during 1000 waits): it must spin first", yielded)
	}
	// And once Spin has passed it yields.
	y := HotWait{Spin: 0, Yield: time.Hour}
	before = ran.Load()
	stop2 := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop2:
				return
			default:
				ran.Add(1)
				runtime.Gosched()
			}
		}
	}()
	for i := 0; i < 100; i++ {
		y.Wait()
	}
	close(stop2)
	if ran.Load()-before < 50 {
		t.Fatalf("HotWait past its spin phase did not yield (another goroutine ran %d times during 100 waits)", ran.Load()-before)
	}
}

// TestCQWaiterWokenByDoorbell: a completion-queue waiter past its hot phase
// sleeps on the doorbell; a completion pushed then wakes it at once, not
// at its context's deadline.
func TestCQWaiterWokenByDoorbell(t *testing.T) {
	acct := &sqAccount{max: 16}
	q := newMemCQ(acct)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan error, 1)
	go func() {
		var c [1]Completion
		_, err := q.Wait(ctx, c[:])
		got <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for q.sleepers.Load() == 0 { // the waiter announced that it sleeps
		if time.Now().After(deadline) {
			t.Fatal("the waiter never went to sleep on the doorbell")
		}
		time.Sleep(time.Millisecond)
	}
	q.push(Completion{WRID: 7})
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		cancel()
		t.Fatal("a waiter asleep on the doorbell was not woken by a completion within 5 s: push must ring when a waiter sleeps")
	}
}

// TestReceiveSlotsAtLeastTwo: a shared receive queue of one slot cannot
// tell full from empty (the ring's cell sequence numbers coincide), so a
// second receive would overwrite the first; it is refused.
func TestReceiveSlotsAtLeastTwo(t *testing.T) {
	c := DefaultProcessConfig(0)
	c.ReceiveSlots = 1
	if err := c.VerifyConfig(); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("ReceiveSlots 1: %v, want ErrBadConfig", err)
	}
	c.ReceiveSlots = 2
	if err := c.VerifyConfig(); err != nil {
		t.Fatal(err)
	}
}
