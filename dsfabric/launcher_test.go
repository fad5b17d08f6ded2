package dsfabric

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// launcherEnv lists every variable detectLaunch reads; clearLaunchEnv
// empties them for one test (an empty variable counts as unset), so that
// the test's own launcher (mpirun in CI, say) does not leak in.
var launcherEnv = []string{EnvRank, EnvSize, EnvCoord, EnvToken,
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid",
	"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_ID",
	"PMI_RANK", "PMI_SIZE", "PMI_JOBID"}

func clearLaunchEnv(t *testing.T) {
	for _, k := range launcherEnv {
		t.Setenv(k, "")
	}
}

// TestDetectLaunch (docs/design.md §5): the launcher's variables are
// checked before anything is dialled: a rank must lie in [0, size), a tcp
// coordinator needs a job token, and the directory of a launcher's unix
// coordinator must be private to the user.
func TestDetectLaunch(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string // "" accepts
	}{
		{"child", map[string]string{EnvRank: "1", EnvSize: "2", EnvCoord: "unix:/nowhere", EnvToken: "t"}, ""},
		{"rank equal to size", map[string]string{EnvRank: "2", EnvSize: "2", EnvCoord: "unix:/nowhere", EnvToken: "t"}, `SERIEMA_RANK="2"`},
		{"negative rank", map[string]string{EnvRank: "-1", EnvSize: "2", EnvCoord: "unix:/nowhere", EnvToken: "t"}, `SERIEMA_RANK="-1"`},
		{"size zero", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "0"}, `PMI_SIZE="0"`},
		{"mpirun rank past size", map[string]string{"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_MCA_ess_base_jobid": "7"}, "OMPI_COMM_WORLD_RANK"},
		{"tcp coordinator without a token", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", EnvCoord: "127.0.0.1:7000"}, "set " + EnvToken},
		{"tcp coordinator with a token", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", EnvCoord: "127.0.0.1:7000", EnvToken: "s"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			clearLaunchEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			l, err := detectLaunch(0)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBootstrap) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %+v, %v; want ErrBootstrap naming %q", l, err, c.want)
			}
		})
	}
}

// TestLauncherDirPrivate (docs/design.md §5, security): under a launcher
// without SERIEMA_COORD the coordinator is a unix socket in
// $TMPDIR/seriema-UID; a directory of that name that others can enter is
// refused, not used.
func TestLauncherDirPrivate(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	clearLaunchEnv(t)
	t.Setenv("SLURM_PROCID", "0")
	t.Setenv("SLURM_NTASKS", "2")
	t.Setenv("SLURM_JOB_ID", "42")
	l, err := detectLaunch(0)
	if err != nil {
		t.Fatalf("a fresh private directory: %v", err)
	}
	dir := filepath.Join(tmp, fmt.Sprintf("seriema-%d", os.Getuid()))
	if want := "unix:" + filepath.Join(dir, "job-42.sock"); l.coord != want {
		t.Fatalf("coordinator %q, want %q", l.coord, want)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := detectLaunch(0); !errors.Is(err, ErrBootstrap) || !strings.Contains(err.Error(), "accessible to other users") {
		t.Fatalf("a directory others can enter: %v, want a refusal", err)
	}
}

// TestNames (docs/design.md §5, naming): thread IDs run from 0 to
// size × threads − 1; a rank or thread index out of range has no name.
func TestNames(t *testing.T) {
	n := Names{Size: 2, ThreadsPerProcess: 3, Machines: []string{"a", "a"}}
	if id, err := n.Thread(1, 2); err != nil || id != 5 || n.Rank(id) != 1 || n.ThreadRank(id) != 2 {
		t.Fatalf("Thread(1, 2) = %d, %v", id, err)
	}
	for _, c := range [][2]int{{1, 3}, {2, 0}, {-1, 0}, {0, -1}} {
		if id, err := n.Thread(c[0], c[1]); !errors.Is(err, ErrBadThread) {
			t.Errorf("Thread(%d, %d) = %d, %v; want ErrBadThread", c[0], c[1], id, err)
		}
	}
	if !n.Valid(5) || n.Valid(6) {
		t.Fatalf("Valid(5) %v, Valid(6) %v in a job of 6 threads", n.Valid(5), n.Valid(6))
	}
	// Machines are numbered in order of first appearance, whatever their
	// host names sort as; ranks of one host share its number.
	m := Names{Size: 5, ThreadsPerProcess: 1, Machines: []string{"z", "b", "z", "a", "b"}}
	for rank, want := range []int{0, 1, 0, 2, 1} {
		if got := m.Machine(rank); got != want {
			t.Errorf("Machine(%d) of hosts %v = %d, want %d", rank, m.Machines, got, want)
		}
	}
	if !m.SameMachine(0, 2) || m.SameMachine(0, 1) {
		t.Errorf("SameMachine(0, 2) %v, SameMachine(0, 1) %v of hosts %v", m.SameMachine(0, 2), m.SameMachine(0, 1), m.Machines)
	}
}
