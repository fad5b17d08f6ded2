// Package jobtest helps tests run jobs of self-launched processes: the test
// binary re-executes itself as the other ranks, which must run exactly the
// same (sub)test.
package jobtest

import (
	"regexp"
	"strings"
	"testing"
)

// RunArgs returns the test-binary arguments that select exactly t. Under
// go test -cover they also name the parent's coverage directory, so that
// the ranks' counters are merged into the package's profile: without it a
// rank's coverage is lost and go test -coverprofile misses whatever only
// the other ranks run.
func RunArgs(t testing.TB) []string {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	args := []string{"-test.run=" + strings.Join(parts, "/")}
	if dir := coverDir(); dir != "" {
		args = append(args, "-test.gocoverdir="+dir)
	}
	return args
}
