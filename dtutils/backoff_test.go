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
