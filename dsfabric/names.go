package dsfabric

import "fmt"

// ThreadID names a worker thread anywhere in the job:
// rank × ThreadsPerProcess + thread rank (docs/design.md §5).
type ThreadID uint32

// Names converts between ThreadIDs, process ranks, thread ranks and
// machines. Every process of a job holds the same Names.
type Names struct {
	// Size is the number of processes.
	Size int
	// ThreadsPerProcess is the number of worker threads in each process.
	ThreadsPerProcess int
	// Machines holds, per rank, the identity of its machine (hostname and
	// boot ID); ranks with equal entries share memory.
	Machines []string
}

// Thread returns the ThreadID of thread t of process rank.
func (n Names) Thread(rank, t int) (ThreadID, error) {
	if rank < 0 || rank >= n.Size || t < 0 || t >= n.ThreadsPerProcess {
		return 0, fmt.Errorf("%w: rank %d thread %d in a job of %d×%d", ErrBadThread, rank, t, n.Size, n.ThreadsPerProcess)
	}
	return ThreadID(rank*n.ThreadsPerProcess + t), nil
}

// Rank returns the process rank of thread id. Rank and ThreadRank run on
// every send: they divide in 32 bits, a fraction of a 64-bit division's
// cycles on x86 (thread IDs are 32-bit, ThreadsPerProcess at most 4096).
func (n Names) Rank(id ThreadID) int { return int(uint32(id) / uint32(n.ThreadsPerProcess)) }

// ThreadRank returns the rank of thread id within its process.
func (n Names) ThreadRank(id ThreadID) int { return int(uint32(id) % uint32(n.ThreadsPerProcess)) }

// Threads returns the number of worker threads in the job.
func (n Names) Threads() int { return n.Size * n.ThreadsPerProcess }

// Valid reports whether id names a thread of the job.
func (n Names) Valid(id ThreadID) bool { return int(id) < n.Threads() }

// SameMachine reports whether ranks a and b run on one machine.
func (n Names) SameMachine(a, b int) bool { return n.Machines[a] == n.Machines[b] }

// Machine returns the machine index of rank: ranks on one machine share it,
// numbered in order of first appearance.
func (n Names) Machine(rank int) int {
	seen := map[string]int{}
	for r := 0; r <= rank; r++ {
		if _, ok := seen[n.Machines[r]]; !ok {
			seen[n.Machines[r]] = len(seen)
		}
	}
	return seen[n.Machines[rank]]
}
