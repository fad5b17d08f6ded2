package main

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"time"
)

// The join of mctsbench shuffle: a TPC-H Q3/Q4-shaped query over two
// generated tables, in two shuffle stages (both opened before the clock
// starts, as a plan's operators are).
//
//	SELECT o_priority, SUM(l_price * (100 - l_discount))
//	FROM orders JOIN lineitem ON o_orderkey = l_orderkey
//	WHERE o_date < cutoff GROUP BY o_priority
//
// Process r generates the orders whose key is r mod P and the line items
// whose number is r mod P (each line item names a random order), so both
// tables must move: stage 1 repartitions both on the order key (hash), each
// process joins its share, stage 2 repartitions the partial sums on the
// group key, and each process owns the final sums of its groups. Rank 0
// checks them against the same query run in one process over all the
// data.

const (
	joinPriorities = 5
	joinCutoff     = 1 << 31 // about half of the orders
	joinOrder      = 'O'
	joinLine       = 'L'
)

func mix(x uint64) uint64 {
	x ^= x >> 31
	x *= 0x9e3779b97f4a7c15
	x ^= x >> 29
	return x
}

// order returns order k's priority and date.
func order(k uint64) (priority uint8, date uint32) {
	h := mix(k + 1)
	return uint8(h % joinPriorities), uint32(h >> 32)
}

// lineItem returns line item i's order, price and discount.
func lineItem(i, orders uint64) (orderkey uint64, price uint32, discount uint8) {
	h := mix(i ^ 0x5bd1e995)
	return h % orders, uint32(h>>20) % 100000, uint8(h>>40) % 11
}

// joinRows runs fn over process rank's rows of thread th: orders, then
// line items, as records (tag, key, fields) with their destination process.
func joinRows(o shuffleOpts, rank, th int, fn func(rec []byte, dest int) error) error {
	total := uint64(o.orders * o.procs)
	step := uint64(o.procs * o.threads)
	var rec [16]byte
	dest := func(key uint64) int { return int(mix(key^0xabcdef) % uint64(o.procs)) }
	for k := uint64(rank + o.procs*th); k < total; k += step {
		p, d := order(k)
		rec[0], rec[1] = joinOrder, p
		binary.LittleEndian.PutUint64(rec[2:], k)
		binary.LittleEndian.PutUint32(rec[10:], d)
		if err := fn(rec[:14], dest(k)); err != nil {
			return err
		}
	}
	for i := uint64(rank + o.procs*th); i < 4*total; i += step {
		k, price, disc := lineItem(i, total)
		rec[0], rec[1] = joinLine, disc
		binary.LittleEndian.PutUint64(rec[2:], k)
		binary.LittleEndian.PutUint32(rec[10:], price)
		if err := fn(rec[:14], dest(k)); err != nil {
			return err
		}
	}
	return nil
}

// joinSide is what one receiving thread collected in stage 1.
type joinSide struct {
	orders []uint64 // qualifying orders (date before the cutoff): key<<8 | priority
	lines  []joinLineItem
}

// joinLineItem is a received line item as the join keeps it: its order
// and price × (100 − discount), 8 bytes where the record has 14 (keys fit:
// -orders × -procs < 2³², checked by the command).
type joinLineItem struct{ key, value uint32 }

// runJoin runs the query over x and returns this process's group sums.
func runJoin(ctx context.Context, x exchanger, rank int, o shuffleOpts) shuffleReport {
	start := time.Now()
	sides := make([]joinSide, x.receivers())
	// Room for a receiver's expected share and a quarter more: growing
	// the slices as records came was a fifth of the query's CPU time
	// (growslice's copies and clears), the same for every impl.
	total := uint64(o.orders * o.procs)
	for k := range sides {
		share := int(total)/(o.procs*len(sides)) + 1
		sides[k].orders = make([]uint64, 0, share*5/8) // about half qualify
		sides[k].lines = make([]joinLineItem, 0, 4*share*5/4)
	}
	err := x.run(ctx, 0, stage{
		emit: func(th int, send func([]byte, int) error) error { return joinRows(o, rank, th, send) },
		consume: func(k int, rec []byte) {
			if len(rec) != 14 {
				return
			}
			if rec[0] == joinOrder {
				if binary.LittleEndian.Uint32(rec[10:]) < joinCutoff {
					sides[k].orders = append(sides[k].orders, binary.LittleEndian.Uint64(rec[2:])<<8|uint64(rec[1]))
				}
				return
			}
			v := binary.LittleEndian.Uint32(rec[10:]) * uint32(100-min(rec[1], 100))
			sides[k].lines = append(sides[k].lines, joinLineItem{uint32(binary.LittleEndian.Uint64(rec[2:])), v})
		},
	})
	if err != nil {
		return shuffleReport{Err: err.Error()}
	}
	// The local join: this process's qualifying orders against its line
	// items (the receiving threads split both; join across all of them).
	// Order keys are dense (0 … orders×P), so the build side is an array
	// indexed by key (priority + 1; 0: no qualifying order) rather than a
	// hash table: the query's cost is then the shuffles', which is what it
	// measures.
	orders := make([]uint8, total)
	for _, s := range sides {
		for _, e := range s.orders {
			if k := e >> 8; k < total {
				orders[k] = uint8(e) + 1
			}
		}
	}
	var partial [joinPriorities]uint64
	for _, s := range sides {
		for _, l := range s.lines {
			if k := uint64(l.key); k < total && orders[k] != 0 {
				partial[orders[k]-1] += uint64(l.value)
			}
		}
	}
	// Stage 2: the partial sums to the owner of each group.
	var mu sync.Mutex
	final := make([]uint64, joinPriorities)
	err = x.run(ctx, 1, stage{
		emit: func(th int, send func([]byte, int) error) error {
			if th != 0 {
				return nil
			}
			var rec [9]byte
			for p, v := range partial {
				rec[0] = byte(p)
				binary.LittleEndian.PutUint64(rec[1:], v)
				if err := send(rec[:], p%o.procs); err != nil {
					return err
				}
			}
			return nil
		},
		consume: func(k int, rec []byte) {
			if len(rec) == 9 && int(rec[0]) < joinPriorities {
				mu.Lock()
				final[rec[0]] += binary.LittleEndian.Uint64(rec[1:])
				mu.Unlock()
			}
		},
	})
	if err != nil {
		return shuffleReport{Err: err.Error()}
	}
	return shuffleReport{Seconds: time.Since(start).Seconds(), Groups: final}
}

// joinChecked compares the groups every process owns with the query run
// in this one process over every process's rows.
func joinChecked(all []shuffleReport, o shuffleOpts) bool {
	want := joinWant(o)
	got := make([]uint64, joinPriorities)
	for _, r := range all {
		if len(r.Groups) != joinPriorities {
			return false
		}
		for p, v := range r.Groups {
			if p%o.procs != r.Rank && v != 0 {
				return false // a group outside this process's share
			}
			got[p] += v
		}
	}
	return slices.Equal(got, want[:])
}

// joinWant runs the query in this one process over every process's rows.
func joinWant(o shuffleOpts) [joinPriorities]uint64 {
	total := uint64(o.orders * o.procs)
	var want [joinPriorities]uint64
	for i := uint64(0); i < 4*total; i++ {
		k, price, disc := lineItem(i, total)
		if p, d := order(k); d < joinCutoff {
			want[p] += uint64(price) * uint64(100-disc)
		}
	}
	return want
}
