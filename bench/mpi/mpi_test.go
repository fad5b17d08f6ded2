// Package mpi holds the MPI peer of mctsbench shuffle (csrc/shuffle.c), built
// with mpicc and run under mpirun; this test builds and runs it.
package mpi

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestShufflePeer builds csrc/shuffle.c with mpicc and runs both patterns on
// two ranks under mpirun: one JSON line each, in mctsbench shuffle's
// format, with every record delivered (ok); and with a received byte
// flipped (SHUFFLE_MPI_CORRUPT), ok must be false: the peer reads what
// arrives, as our receivers do.
func TestShufflePeer(t *testing.T) {
	mpicc, err := exec.LookPath("mpicc")
	if err != nil {
		t.Skip("mpicc is not installed (Debian package libopenmpi-dev; .ci/run installs it)")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun is not installed (Debian package openmpi-bin; .ci/run installs it)")
	}
	bin := filepath.Join(t.TempDir(), "shuffle-mpi")
	if out, err := exec.Command(mpicc, "-O2", "-Wall", "-o", bin, filepath.Join("csrc", "shuffle.c")).CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	for _, c := range []struct {
		pattern string
		reps    int
		args    []string
		corrupt bool
	}{{"repartition", 1, nil, false}, {"broadcast", 3, []string{"3"}, false}, {"repartition", 1, nil, true}, {"broadcast", 1, nil, true}} {
		pattern := c.pattern
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		args := append([]string{"--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "SHUFFLE_MPI_CORRUPT", bin, pattern, "4", "100"}, c.args...)
		cmd := exec.CommandContext(ctx, mpirun, args...)
		corrupt := "SHUFFLE_MPI_CORRUPT=0"
		if c.corrupt {
			corrupt = "SHUFFLE_MPI_CORRUPT=1"
		}
		cmd.Env = append(os.Environ(), corrupt)
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", pattern, err)
		}
		var r struct {
			Pattern, Impl string
			Procs         int
			Bytes         int64
			GBPerSPerProc float64 `json:"gb_per_s_per_proc"`
			OK            bool
			Reps          int
			Min, Max      float64
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &r); err != nil {
			t.Fatalf("%s: %v in %q", pattern, err, out)
		}
		if r.Pattern != pattern || r.Impl != "mpi" || r.Procs != 2 || r.Bytes != 4<<20 || r.GBPerSPerProc <= 0 || r.OK == c.corrupt ||
			r.Reps != c.reps || r.Min > r.GBPerSPerProc || r.GBPerSPerProc > r.Max {
			t.Errorf("%s (corrupt %v): %+v", pattern, c.corrupt, r)
		}
	}
}
