// Package mcts will hold the tree-parallel distributed Monte-Carlo Tree
// Search of DESIGN.md §7 (the paper's §5.3) over a Game interface, plus a
// sequential MCTS with the same policy as the baseline.
//
// Not implemented yet: tracked by the MCTS/Hex issue.
package mcts
