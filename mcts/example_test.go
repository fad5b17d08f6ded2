package mcts_test

import (
	"context"
	"fmt"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/mcts"
	"github.com/seriema-go/seriema/mcts/hexgame"
)

// The sequential search on the empty 3×3 board finds the centre.
func ExampleSequential() {
	s, _ := hexgame.New(3)
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Seed = 3000, 11
	r, err := mcts.Sequential(context.Background(), s, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.MoveName, r.Rollouts, r.Simulations)
	// Output: b2 3000 48000
}

// A distributed search in one process with two worker threads (more
// processes: set Procs; every process runs the same code, and ranks other
// than 0 call Serve).
func ExampleStart() {
	cfg := mcts.DefaultConfig()
	cfg.Budget, cfg.Seed = 2000, 3
	d, err := mcts.Start(context.Background(), hexgame.Game{}, cfg, dsfabric.Config{Procs: 1, ThreadsPerProcess: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := hexgame.New(4)
	r, err := d.Search(context.Background(), s)
	if err != nil {
		fmt.Println(err)
	}
	stats, err := d.Close()
	fmt.Println(r.Rollouts, len(stats), err)
	// Output: 2000 2 <nil>
}
