package dsfabric

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/internal/jobtest"
)

// TestSecurityDefaults (reliability, security rules): a self-launched job's
// coordinator is a unix socket of mode 0600 in a directory of mode 0700
// (not a network port), every shared region is a memfd (nothing in
// /dev/shm), and the tcp transport listens on loopback unless told
// otherwise.
func TestSecurityDefaults(t *testing.T) {
	shmBefore, _ := os.ReadDir("/dev/shm")
	f, err := Start(context.Background(), Config{Procs: 2, Args: jobtest.RunArgs(t), Logger: quiet, BootstrapTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Rank() == 0 {
		network, path := splitCoord(f.launch.coord)
		if network != "unix" {
			t.Fatalf("coordinator on %s %s, want a unix socket", network, path)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("coordinator socket mode %v, want 0600", st.Mode().Perm())
		}
		dir, err := os.Stat(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if dir.Mode().Perm() != 0o700 {
			t.Errorf("coordinator directory mode %v, want 0700", dir.Mode().Perm())
		}
	}
	r, err := f.Process().Registry().NewRegion(1<<20, alloc.RegionConfig{Name: "security-test"})
	if err != nil {
		t.Fatal(err)
	}
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(r.FD()))
	if err != nil || !strings.HasPrefix(link, "/memfd:") {
		t.Errorf("a region's file is %q (%v), want a memfd", link, err)
	}
	shmAfter, _ := os.ReadDir("/dev/shm")
	if len(shmAfter) > len(shmBefore) {
		t.Errorf("/dev/shm grew from %d to %d entries", len(shmBefore), len(shmAfter))
	}
	if l := dtutils.DefaultTCPConfig().Listen; !strings.HasPrefix(l, "127.0.0.1:") {
		t.Errorf("the tcp transport listens on %q by default, want loopback", l)
	}
	if err := f.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
}
