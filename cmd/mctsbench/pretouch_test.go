package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// preTouchEnv makes the test binary a fresh process that pre-touches the
// MiB it names, then reports the page faults of growing its heap.
const preTouchEnv = "SERIEMA_TEST_PRETOUCH"

// preTouchGrow is what the child allocates and keeps after pre-touching:
// 64-byte objects, as small as a search's nodes and states.
const preTouchGrow = 40 << 20

func preTouchChild(env string) int {
	mib, err := strconv.Atoi(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	debug.SetGCPercent(searchGCPercent)
	preTouchHeap(mib)
	keep := make([]*[64]byte, 0, preTouchGrow/64)
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for range cap(keep) {
		keep = append(keep, new([64]byte))
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	fmt.Println(after.Minflt - before.Minflt)
	return 0
}

// TestPreTouchHeap: a process that pre-touched its heap grows it by 40 MiB
// of small objects with under a third of the page faults a process that
// did not takes (6 970 against 290–1570 here); each is a fresh process,
// the test binary run again.
func TestPreTouchHeap(t *testing.T) {
	if raceEnabled {
		// The detector's shadow memory faults in on first use whatever
		// the heap did; make test runs this without it.
		t.Skip("page faults are the race detector's own under -race")
	}
	faults := func(mib int) int64 {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), preTouchEnv+"="+strconv.Itoa(mib), "GOGC=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child with -pretouch %d: %v", mib, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatalf("child with -pretouch %d printed %q", mib, out)
		}
		return n
	}
	cold, warm := faults(0), faults(demoPreTouch)
	t.Logf("page faults growing the heap by %d MiB: %d cold, %d after pre-touching %d MiB", preTouchGrow>>20, cold, warm, demoPreTouch)
	// 6 970 here: the kernel faults the heap in by more than a page at a
	// time, but every new span of small objects is written on its own.
	if cold < 1000 {
		t.Fatalf("a cold heap took %d faults: the measure does not see them", cold)
	}
	// Not a tighter bound: the runtime's scavenger returns some of the
	// freed pages to the OS while the child allocates (290–1570 faults
	// over ten runs here).
	if warm*3 > cold {
		t.Errorf("pre-touched heap: %d faults, want under a third of the cold heap's %d", warm, cold)
	}
}

// TestPreTouchFlag: -pretouch below 0 is refused by demo and scale with a
// message naming it (rather than read as none, or passed on to every
// search process), and 0, none, runs.
func TestPreTouchFlag(t *testing.T) {
	short := []string{"-seq", "-board", "4", "-visits", "200", "-moves", "1"}
	for _, args := range [][]string{
		append(append([]string{"demo"}, short...), "-pretouch", "-1"),
		{"scale", "-configs", "seq", "-pretouch", "-1"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, nil, &out, &errb); code == 0 || !strings.Contains(errb.String(), "-pretouch") {
			t.Errorf("%v: exit %d, %q; want a refusal naming -pretouch", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(append(append([]string{"demo"}, short...), "-pretouch", "0"), nil, &out, &errb); code != 0 {
		t.Errorf("demo -pretouch 0: exit %d: %s", code, errb.String())
	}
}
