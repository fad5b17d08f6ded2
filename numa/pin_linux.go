package numa

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Pin locks the calling goroutine to its OS thread and restricts that thread
// to cpus. The goroutine stays locked afterwards (a worker keeps its thread for
// life); call Unpin to release it. On error the goroutine is left unlocked.
func Pin(cpus ...int) error {
	if len(cpus) == 0 {
		return fmt.Errorf("numa: pin: %w", ErrNoCPUs)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return fmt.Errorf("%w: pin: CPU %d out of range", ErrBadArgument, c)
		}
		set.Set(c)
	}
	runtime.LockOSThread()
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("numa: pin to CPUs %s: %w", FormatCPUList(cpus), err)
	}
	return nil
}

// Unpin widens the calling thread's affinity back to allowed (typically the
// process's original mask from Affinity) and unlocks the goroutine from it.
func Unpin(allowed []int) error {
	defer runtime.UnlockOSThread()
	var set unix.CPUSet
	for _, c := range allowed {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("numa: unpin: %w", err)
	}
	return nil
}

// Affinity returns the CPUs the calling thread may run on.
func Affinity() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("numa: sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
