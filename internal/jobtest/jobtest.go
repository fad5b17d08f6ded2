// Package jobtest helps tests run jobs of self-launched processes: the test
// binary re-executes itself as the other ranks, which must run exactly the
// same (sub)test.
package jobtest

import (
	"regexp"
	"strings"
	"testing"
)

// RunArgs returns the test-binary arguments that select exactly t.
func RunArgs(t testing.TB) []string {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return []string{"-test.run=" + strings.Join(parts, "/")}
}
