package jobtest

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestRunArgs(t *testing.T) {
	t.Run("sub/name.(x)", func(t *testing.T) {
		args := RunArgs(t)
		run := strings.TrimPrefix(args[0], "-test.run=")
		if run == args[0] {
			t.Fatalf("first argument %q is not -test.run", args[0])
		}
		// go test splits the pattern at slashes and matches each level
		// against one element of the name.
		levels := strings.Split(run, "/")
		names := []string{"TestRunArgs", "sub", "name.(x)"}
		if len(levels) != len(names) {
			t.Fatalf("pattern %q has %d levels, want %d", run, len(levels), len(names))
		}
		for i, l := range levels {
			re := regexp.MustCompile(l)
			if !re.MatchString(names[i]) || re.MatchString(names[i]+"2") || re.MatchString("x"+names[i]) {
				t.Errorf("level %d pattern %q does not select exactly %q", i, l, names[i])
			}
		}
	})
	t.Run("coverage", func(t *testing.T) {
		args := RunArgs(t)
		dir := coverDir()
		want := dir != ""
		if got := slices.Contains(args, "-test.gocoverdir="+dir); got != want {
			t.Errorf("args %q: passing the coverage directory %q is %v, want %v (cover mode %q)", args, dir, got, want, testing.CoverMode())
		}
	})
}
