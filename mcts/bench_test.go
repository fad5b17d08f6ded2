package mcts_test

import (
	"context"
	"testing"

	"github.com/seriema-go/seriema/mcts"
	"github.com/seriema-go/seriema/mcts/hexgame"
)

// BenchmarkSequential11 is one sequential search of 2000 rollouts from the
// empty 11×11 board per op; simulations/ms is the figure of the scaling
// table's "seq" row.
func BenchmarkSequential11(b *testing.B) {
	s, _ := hexgame.New(11)
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Seed = 2000, 1
	b.ReportAllocs()
	sims := 0
	var el float64
	for b.Loop() {
		r, err := mcts.Sequential(context.Background(), s, cfg)
		if err != nil {
			b.Fatal(err)
		}
		sims += r.Simulations
		el += max(float64(r.Elapsed)/1e6, 1e-9)
	}
	b.ReportMetric(float64(sims)/el, "simulations/ms")
}
