package mcts

import (
	"context"
	"testing"
)

// Audit exposes the distributed search's consistency audit to the external
// tests (which need package hexgame, which imports this package).
func Audit(d *Distributed, t *testing.T) { d.audit(t) }

// OpenedAtStart returns, for each worker thread of d's process, how many
// messengers it had set up when Start returned.
func OpenedAtStart(d *Distributed) []int64 {
	var n []int64
	for _, w := range d.workers {
		n = append(n, w.opened)
	}
	return n
}

// WithBeforeOpen returns c with f called by each worker thread, with the
// context it opens its messengers with, just before it does.
func WithBeforeOpen(c Config, f func(context.Context)) Config {
	c.beforeOpen = f
	return c
}
