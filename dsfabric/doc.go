// Package dsfabric will hold the distributed-system fabric of Seriema for Go
// (DESIGN.md §5): job bootstrap for self-launch, mpirun and srun; machine,
// process and thread names; workers pinned by placement policy; service
// threads; handler registration by name-derived IDs; the send-based
// ("no-setup") call primitives of the paper's Table 1; and Synchronizer.
//
// Not implemented yet: tracked by the DSfabric issue. Nothing in this
// package is usable today.
package dsfabric
