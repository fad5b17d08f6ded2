// Package alloc provides registered memory: shareable regions, the locators
// that name them across the job, and the allocators of the Seriema paper
// (§4.2) built on them.
//
// # Regions
//
// A Region is a memfd mapping. Another process on the machine maps the same
// pages from its file descriptor (passed with SCM_RIGHTS by dtutils' shm
// transport, or inherited by a child: MapShared), so a "one-sided write" is a
// plain store. Regions are created by a Registry, one per process, which
// gives each an ID and a random 64-bit key and later resolves Locators,
// checking process, key and bounds on every remote access.
//
// The kernel is asked for pages down a ladder — 1 GiB hugetlb, 2 MiB hugetlb,
// transparent huge pages (MADV_HUGEPAGE, only where the shmem THP setting
// honours it), 4 KiB — and the rung obtained is reported by Region.Rung and
// counted in Registry.Stats. hugetlb rungs need reserved pages
// (vm.nr_hugepages); without them the ladder falls through, which is normal
// on laptops and CI machines.
//
//	reg := alloc.NewRegistry(rank)
//	r, err := reg.NewRegion(4<<20, alloc.RegionConfig{Bind: true, Node: 0})
//	loc, _ := r.Locator(0, 4096) // send loc to a peer
//
// # Allocators
//
//   - ZoneAllocator (the paper's RDMAAllocator), one per NUMA zone: maps 1 GiB
//     superchunks lazily and hands out 2 MiB chunks with a lock-free bump
//     pointer. Concurrent.
//   - Circular: a ring of fixed units, each reused only when the operations
//     that last read it have completed, growing linearly or exponentially
//     up to a maximum when every unit is in flight. One per sending thread.
//   - LinearCircular: the same ring, but hands out segments of any size inside
//     a unit, so nothing is wasted on small buffers.
//   - General: size classes with first- or best-fit placement, Free and
//     coalescing. Concurrent.
//
// # Recycling tags
//
// Recycling follows the paper's §4.1: after posting an operation that reads a
// Memory, the sender tags it with (queue pair, flush number) — Memory.Tag
// with an alloc.Tracker, implemented by dtutils.Transmitter. A unit is free
// again once every tag's tracker reports a completed number above the tag:
// one atomic store on the transmitter frees many buffers at once.
//
//	ring, _ := alloc.NewCircular(zone, alloc.DefaultCircularConfig())
//	buf, err := ring.Next()        // ErrBusy: every unit still in flight
//	n := copy(buf.Bytes(), payload)
//	seq := tx.Write(qp, buf, n)    // dtutils (next layer)
//	buf.Tag(tx, seq)
//
// Every error wraps a sentinel of errors.go; wire formats are in docs/wire.md.
package alloc
