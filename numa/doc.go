// Package numa describes the machine's NUMA topology and places threads and
// memory on it.
//
// It is the lowest layer of Seriema for Go: everything above it (registered
// memory in package alloc, workers in package dsfabric) asks numa where a
// worker should run and which zone its memory should come from. Nothing here
// is hard-coded: the topology is read from sysfs, and the sysfs root can be
// replaced (tests build fake trees with 1, 2 and 4 nodes).
//
// # Topology
//
//	topo, err := numa.Load("")          // "" means /sys
//	for _, n := range topo.Nodes {
//		fmt.Println(n.ID, n.CPUs, n.Distances)
//	}
//
// On kernels without NUMA support (no /sys/devices/system/node) Load reports a
// single node 0 holding every online CPU, so callers never need a special case.
//
// # Placement
//
// A Policy maps worker i to a CPU and a node:
//
//   - Fill fills the first zone before moving to the next one, which keeps
//     communicating workers close (the paper's default for small jobs);
//   - Spread deals workers round-robin over the zones, which maximises memory
//     bandwidth.
//
// Worker i's place:
//
//	cpu, node, err := topo.Place(numa.Spread, i)
//
// # Pinning and binding
//
// Pin locks the calling goroutine to its OS thread (runtime.LockOSThread) and
// restricts that thread to the given CPUs with sched_setaffinity. Bind applies
// an mbind(2) policy to a mapping so that its pages come from one node; it
// must run before the pages are first touched to have any effect.
//
// Errors are wrapped with %w around the sentinels in errors.go.
package numa
