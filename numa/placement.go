package numa

import (
	"fmt"
	"strings"
)

// Policy decides which CPU worker i runs on.
type Policy int

const (
	// Fill uses every CPU of the first node with CPUs before the next node.
	Fill Policy = iota
	// Spread deals workers round-robin over the nodes that have CPUs.
	Spread
)

// String returns "fill" or "spread".
func (p Policy) String() string {
	switch p {
	case Fill:
		return "fill"
	case Spread:
		return "spread"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy parses "fill" or "spread" (case-insensitive).
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(s) {
	case "fill":
		return Fill, nil
	case "spread":
		return Spread, nil
	}
	return 0, fmt.Errorf("%w: unknown placement policy %q (want fill or spread)", ErrBadArgument, s)
}

// Place maps worker i (i ≥ 0) to a CPU and the node holding it. When there are
// more workers than CPUs the mapping wraps around, so workers share CPUs
// rather than fail.
func (t *Topology) Place(p Policy, i int) (cpu, node int, err error) {
	if i < 0 {
		return 0, 0, fmt.Errorf("%w: negative worker index %d", ErrBadArgument, i)
	}
	var withCPUs []Node
	total := 0
	for _, n := range t.Nodes {
		if len(n.CPUs) > 0 {
			withCPUs = append(withCPUs, n)
			total += len(n.CPUs)
		}
	}
	if total == 0 {
		return 0, 0, ErrNoCPUs
	}
	switch p {
	case Fill:
		k := i % total
		for _, n := range withCPUs {
			if k < len(n.CPUs) {
				return n.CPUs[k], n.ID, nil
			}
			k -= len(n.CPUs)
		}
	case Spread:
		n := withCPUs[i%len(withCPUs)]
		return n.CPUs[(i/len(withCPUs))%len(n.CPUs)], n.ID, nil
	default:
		return 0, 0, fmt.Errorf("%w: unknown placement policy %v", ErrBadArgument, p)
	}
	panic("unreachable")
}
