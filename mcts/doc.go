// Package mcts is Monte-Carlo Tree Search over a Game interface: a
// sequential search, the baseline, and the tree-parallel distributed search
// of docs/design.md §7 (the paper's §5.3) over riutils Aggregators. The game
// holds no search and no communication code, and this package holds no
// game: Hex is adapted in package mcts/hexgame, Nim in mcts/nim.
//
// # Policy (both searches)
//
// A rollout descends from the root by UCB — a child's score is
// wins/done + C·sqrt(ln(parent visits)/visits), done being the playouts
// whose results came back and visits those plus the ones under way (the
// same number in the sequential search) — until it reaches a node
// with untried moves, expands one of them at random, evaluates the new leaf
// with Config.Playouts random playouts (16, as in the paper; a won position
// needs none) and backpropagates the result. A phase runs Config.Budget
// rollouts from the position to move; the most visited child is played.
//
//	s, _ := hexgame.New(11)
//	r, _ := mcts.Sequential(ctx, s, mcts.DefaultConfig())
//	fmt.Println(r.MoveName, r.SimulationsPerMs())
//
// # The distributed search
//
// Every process of the job calls Start with the same arguments; rank 0 then
// calls Search per move and Close at the end, the others Serve and Close:
//
//	d, err := mcts.Start(ctx, hexgame.Game{}, cfg, dsfabric.Config{Procs: 2})
//	if d.Rank() != 0 {
//		d.Serve(ctx)
//		d.Close()
//		return
//	}
//	r, err := d.Search(ctx, state)
//	stats, err := d.Close() // work per thread
//
// Each node is owned by a worker thread; only its owner's process touches
// it. Nodes up to Config.SpreadDepth (default 2) moves below the root are
// owned by a thread chosen uniformly at random among all threads of the
// job, deeper ones by a random thread of their parent's process, so that a
// rollout changes process at most that many times (SpreadDepth 0: every
// node uniformly, the paper's placement, with a change of process at
// nearly every level). The root is owned
// by thread 0, and the threads of rank 0 start the rollouts, at most
// Config.InFlight at once. A rollout at a node owned elsewhere continues as a
// call to the owner (descend); with the local shortcut (the default) a node
// of the same process is worked on directly under its mutex, with
// Config.NoShortcut every step is a call, as in the paper's "only remote
// calls" setting. Expansion sends the child's state with CallBuffer to the
// new child's owner (create), which tells the parent where the child lives
// (created). Rollouts that select a child whose notice is still on its way
// wait in the parent (deferred selection) and continue when it arrives.
// A thread makes up to 16 selections at a node under one hold of its
// mutex, and the rollouts among them that chose one created child go on to
// it as one descend with their count; threads start rollouts four at a
// time. Every rollout passes the root: taking its lock once per rollout
// kept 16 threads waiting for it (docs/benchmarks.md, "MCTS on 16 cores").
// Every new leaf is queued for evaluation on its node's thread (threads
// with empty queues take from their neighbours';
// a thread with nothing to do during a search asks a thread of another
// process for half of its process's queued leaves, steal/eval/gave, unless
// Config.NoSteal); its result climbs the tree by calls (backprop) to its
// parent's owner, and each node combines the results that reach it in one
// round of its owner's loop into one call to its parent. Virtual visits:
// selection charges a child its playouts at once and its results arrive
// later, so concurrent rollouts spread out; they do not count as losses
// (a child on a process that answers late would look lost and be starved).
// Threads idle between searches sleep on their process's doorbell, which a
// send-based wake call from rank 0 rings when a phase begins. Node and
// queue locks are held for well under a microsecond by threads that own
// their cores, so a waiter polls, then yields the core, then sleeps in
// growing steps; it never parks in a sync.Mutex, whose starvation mode
// made every unlock hand the processor away (lock.go). A process of one
// worker thread takes none of these locks: nobody else touches its nodes.
//
// Every call carries the phase's epoch: calls left over from an earlier move
// are dropped, and a thread's nodes are discarded when it first sees a newer
// epoch. So a Search whose context ends gives its phase up at once, its
// rollouts under way dropped where they arrive, and the next Search or
// Close does not wait for the budget. Handlers only decode and queue; the worker loop does the work and
// sends, so no handler ever waits for a full messenger.
//
// Calls go through one Aggregator per thread, in Config.Mode (trad or ovfl),
// flushed every round of the loop. The calls' byte formats are in wire.go
// and docs/wire.md.
//
// # Work accounting
//
// Result.Rollouts always equals the budget (every rollout comes back to the
// root), Result.Simulations is Rollouts × Playouts, and Stats gives each
// thread's playouts, evaluated leaves (and how many of them it stole),
// created nodes, started rollouts, received calls and the time it spent in
// playouts and waiting.
package mcts
