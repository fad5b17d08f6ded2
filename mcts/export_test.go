package mcts

import "testing"

// Audit exposes the distributed search's consistency audit to the external
// tests (which need package hexgame, which imports this package).
func Audit(d *Distributed, t *testing.T) { d.audit(t) }
