package mcts_test

import (
	"context"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
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

// BenchmarkSearchHandover: back-to-back searches of 64 rollouts each on
// one process of two worker threads, which hold both of this 2-core
// machine's Ps, so an op is mostly the handover between searches: the
// result to the caller and the caller's next request to the root's
// thread. The rollouts' own share is the phase time, reported as
// phase-ns/op; the rest of ns/op is the handover.
func BenchmarkSearchHandover(b *testing.B) {
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Seed = 64, 1
	d, err := mcts.Start(context.Background(), hexgame.Game{}, cfg, dsfabric.Config{Procs: 1, ThreadsPerProcess: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	s, _ := hexgame.New(11)
	var phase time.Duration
	b.ReportAllocs()
	for b.Loop() {
		r, err := d.Search(context.Background(), s)
		if err != nil {
			b.Fatal(err)
		}
		phase += r.Elapsed
	}
	b.ReportMetric(float64(phase)/float64(b.N), "phase-ns/op")
}
