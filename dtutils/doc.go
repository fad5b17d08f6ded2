// Package dtutils will hold verbs-style data transfer (DESIGN.md §4): a
// Provider of reliable ordered QueuePairs with one-sided Write, WriteImm and
// Read, Send/Recv through a shared receive queue, FetchAdd and CompareSwap,
// CompletionQueue polling, and the Transmitter with wait-free selective
// signaling whose flush numbers recycle alloc's circular buffers. Transports:
// shm (memfd mappings), tcp (an engine applying remote operations after
// checking key and bounds) and loop (in-process).
//
// Not implemented yet: tracked by the DTutils issue.
package dtutils
