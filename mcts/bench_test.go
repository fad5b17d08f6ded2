package mcts

import (
	"context"
	"testing"
)

// BenchmarkSequential11 is one sequential search of 2000 rollouts from the
// empty 11×11 board per op; simulations/ms is the figure of the scaling
// table's "seq" row.
func BenchmarkSequential11(b *testing.B) {
	s, _ := NewHex(11)
	cfg := DefaultConfig()
	cfg.Budget, cfg.Seed = 2000, 1
	b.ReportAllocs()
	sims := 0
	var el float64
	for b.Loop() {
		r, err := Sequential(context.Background(), s, cfg)
		if err != nil {
			b.Fatal(err)
		}
		sims += r.Simulations
		el += ms(r.Elapsed)
	}
	b.ReportMetric(float64(sims)/el, "simulations/ms")
}
