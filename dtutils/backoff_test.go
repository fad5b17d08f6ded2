package dtutils

import "testing"

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
