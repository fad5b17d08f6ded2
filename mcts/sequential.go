package mcts

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Sequential searches from root on the calling goroutine, with the policy of
// the distributed search and no fabric at all: the baseline of the scaling
// figure. It returns the most visited child of the root after cfg.Budget
// rollouts (fewer if cfg.MoveTime runs out first), each evaluated by
// cfg.Playouts playouts.
func Sequential(ctx context.Context, root State, cfg Config) (Result, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return Result{}, err
	}
	if root.Winner() >= 0 {
		return Result{}, ErrGameOver
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	start := time.Now()
	playouts := uint32(cfg.Playouts)
	arena := []*node{newNode(root.Clone(), ref{}, 0, true, rng)}
	type step struct {
		n    *node
		slot int
	}
	var path []step
	var deadline time.Time
	if cfg.MoveTime > 0 {
		deadline = start.Add(cfg.MoveTime)
	}
	done := 0
	for ; done < cfg.Budget; done++ {
		if done%64 == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			if done > 0 && !deadline.IsZero() && time.Now().After(deadline) {
				break
			}
		}
		path = path[:0]
		n := arena[0]
		var wins uint32 // for the player to move at the last node of path
		for {
			if n.winner >= 0 {
				wins = evaluate(n.state, n.winner, n.toMove, cfg.Playouts, 0)
				break
			}
			i, expand := n.choose(cfg.C, playouts, rng)
			path = append(path, step{n, i})
			if !expand {
				n = arena[n.slots[i].child.idx]
				continue
			}
			s := n.state.Clone()
			if err := s.Play(n.slots[i].move); err != nil {
				return Result{}, fmt.Errorf("mcts: the game refused its own move: %w", err)
			}
			child := newNode(s, ref{idx: uint32(len(path) - 1)}, uint32(i), false, rng)
			n.slots[i].child, n.slots[i].created = ref{idx: uint32(len(arena))}, true
			arena = append(arena, child)
			wins = evaluate(s, child.winner, child.toMove, cfg.Playouts, rng.Uint64())
			break
		}
		for k := len(path) - 1; k >= 0; k-- {
			path[k].n.addWins(path[k].slot, wins, playouts)
			wins = playouts - wins
		}
	}
	res := arena[0].result(done, cfg.Playouts)
	res.Elapsed = time.Since(start)
	return res, nil
}
