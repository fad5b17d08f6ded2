package jobtest

import (
	"flag"
	"os"
	"testing"
)

// Main runs the tests of a package whose test binary starts copies of
// itself, and exits. Under go test -cover it first sets GOCOVERDIR to the
// binary's coverage directory, so that the copies which end by os.Exit
// instead of running tests (peers, roles) write their counters where go
// test merges them into the package's profile; copies that run tests get
// the directory from RunArgs.
func Main(m *testing.M) {
	flag.Parse()
	if dir := coverDir(); dir != "" {
		os.Setenv("GOCOVERDIR", dir)
	}
	os.Exit(m.Run())
}

// coverDir is this process's -test.gocoverdir, "" when unset, not yet
// parsed, or the binary has no coverage.
func coverDir() string {
	if f := flag.Lookup("test.gocoverdir"); f != nil && testing.CoverMode() != "" {
		return f.Value.String()
	}
	return ""
}
