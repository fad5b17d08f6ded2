package mcts

import (
	"context"
	"fmt"
	"time"

	"github.com/seriema-go/seriema/riutils"
)

// Config configures a search, sequential or distributed. DefaultConfig fills
// it; VerifyConfig checks it.
type Config struct {
	// Budget is the number of rollouts (tree visits) per move: a phase ends
	// when that many have been backpropagated to the root. Default 20000.
	Budget int
	// Playouts is the number of random playouts per evaluated leaf (the
	// paper's 16). A "simulation" is one playout. Default 16.
	Playouts int
	// C is the exploration constant of UCB: a child's score is
	// wins/visits + C·sqrt(ln(parent visits)/visits). Default 1.0.
	C float64
	// Seed seeds every random choice (each thread derives its own stream);
	// 0 picks one from the clock.
	Seed uint64
	// MoveTime bounds a move's search time: once it has passed (and at
	// least one rollout came back) no more rollouts start, and the search
	// returns when those under way are back, with fewer than Budget
	// rollouts. 0: no limit, Budget alone.
	MoveTime time.Duration

	// The fields below apply to the distributed search only.

	// Mode is the Aggregator mode of every worker thread: riutils.Trad or
	// riutils.Ovfl. Default Trad.
	Mode riutils.Mode
	// NoShortcut sends every node operation as a call through the
	// Aggregators, even to a node of the same process (the paper's
	// "only remote calls" setting); by default a thread works on a node
	// of its own process directly.
	NoShortcut bool
	// SpreadDepth places the nodes that many moves below the root (and
	// fewer) on worker threads chosen uniformly at random over the job,
	// and every deeper node on a random thread of its parent's process: a
	// rollout then crosses between processes at most SpreadDepth times on
	// its way down and back, where with every node placed uniformly (the
	// paper's placement, SpreadDepth 0) it crosses at nearly every level.
	// The spread levels keep the load even: their nodes are many (up to
	// 121² on an empty 11×11 board) and the search's visits spread over
	// them. Measured on 2×1 (docs/benchmarks.md, Fig. 3 notes): calls
	// between processes halved, simulations/ms 1.13×. Default 2.
	SpreadDepth int
	// NoSteal turns off work stealing between processes. By default a
	// worker thread with nothing to do during a search asks a thread of
	// another process for leaves to evaluate, and gets half of that
	// process's queued leaves with their states; it sends their results to
	// their parents as the owner would. Only the root's process starts
	// rollouts, and a process whose share of the tree has no leaf waiting
	// otherwise sits idle (2×1 on two cores: the second rank waited 15–30 %
	// of a search; stealing raised 2×1 / 1×1 from 1.535 to 1.635, medians
	// of twelve interleaved rounds, docs/benchmarks.md Fig. 3 notes).
	NoSteal bool
	// InFlight bounds the rollouts under way at once in a phase (started,
	// not yet backpropagated to the root): more keeps more threads busy,
	// fewer keeps the search closer to sequential. Default 8 per worker
	// thread of the job, times the number of processes.
	InFlight int
	// Progress, if set, is called on the root's thread (rank 0) about every
	// ProgressEvery during a phase with the rollouts done so far.
	Progress func(done, budget int)
	// ProgressEvery is the interval between Progress calls. Default 250 ms.
	ProgressEvery time.Duration
	// Messaging configures the one-sided messengers the search calls
	// through (chunk size, asynchronous bytes, logger). Default: its zero
	// value means riutils.DefaultConfig().
	Messaging riutils.Config

	// beforeOpen, when set (tests), is called by each worker thread with
	// the context it is about to open its messengers with.
	beforeOpen func(context.Context)
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Budget: 20000, Playouts: 16, C: 1.0, Mode: riutils.Trad, SpreadDepth: 2, ProgressEvery: 250 * time.Millisecond}
}

// VerifyConfig reports the first invalid field.
func (c Config) VerifyConfig() error {
	switch {
	case c.Budget < 1:
		return fmt.Errorf("%w: Budget %d (want ≥ 1)", ErrBadConfig, c.Budget)
	case c.Playouts < 1 || c.Playouts > 1<<16:
		return fmt.Errorf("%w: Playouts %d (want 1…65536)", ErrBadConfig, c.Playouts)
	case c.C < 0:
		return fmt.Errorf("%w: C %v (want ≥ 0)", ErrBadConfig, c.C)
	case c.Mode != riutils.Trad && c.Mode != riutils.Ovfl:
		return fmt.Errorf("%w: Mode %d", ErrBadConfig, c.Mode)
	case c.InFlight < 0:
		return fmt.Errorf("%w: InFlight %d", ErrBadConfig, c.InFlight)
	case c.SpreadDepth < 0:
		return fmt.Errorf("%w: SpreadDepth %d (want ≥ 0)", ErrBadConfig, c.SpreadDepth)
	case c.MoveTime < 0:
		return fmt.Errorf("%w: MoveTime %v (want ≥ 0)", ErrBadConfig, c.MoveTime)
	}
	return nil
}

// Result is the outcome of one move's search.
type Result struct {
	// Move is the most visited child of the root; MoveName writes it.
	Move     Move
	MoveName string
	// Rollouts is the number of rollouts backpropagated to the root (the
	// budget); Simulations the playouts behind them (Rollouts × Playouts).
	Rollouts, Simulations int
	// Elapsed is the search's wall time.
	Elapsed time.Duration
	// Children are the root's children, in the order they were expanded.
	Children []Child
}

// Child is one child of the root after a search.
type Child struct {
	Move Move
	// Visits counts rollouts through the child; WinRate is the share of
	// their playouts won by the player to move at the root.
	Visits  int
	WinRate float64
}

// VisitsPerMs and SimulationsPerMs are the search's global rates.
func (r Result) VisitsPerMs() float64 { return float64(r.Rollouts) / ms(r.Elapsed) }

// SimulationsPerMs is the number of playouts per millisecond.
func (r Result) SimulationsPerMs() float64 { return float64(r.Simulations) / ms(r.Elapsed) }

func ms(d time.Duration) float64 { return max(float64(d)/float64(time.Millisecond), 1e-9) }
