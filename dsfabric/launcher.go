package dsfabric

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Environment variables of the bootstrap (docs/design.md §5).
const (
	EnvRank  = "SERIEMA_RANK"      // set by the self-launcher in children
	EnvSize  = "SERIEMA_SIZE"      // set by the self-launcher in children
	EnvCoord = "SERIEMA_COORD"     // coordinator: "unix:/path" or "host:port"
	EnvToken = "SERIEMA_JOB_TOKEN" // per-job secret authenticating hellos
	// EnvListen is the tcp transport's listen address when Config.Listen is
	// empty ("10.0.0.5:0", ":7000"); see Config.Listen.
	EnvListen = "SERIEMA_LISTEN"
)

// launch says how this process was started.
type launch struct {
	kind       string // "self" (root of a self-launch), "child", "mpirun", "srun", "pmi"
	rank, size int
	coord      string // "unix:/path" or "host:port"
	token      string
	ownDir     string // directory to remove at the end (self-launch root)
}

// detectLaunch reads the launcher's environment. procs is Config.Procs.
func detectLaunch(procs int) (launch, error) {
	getInt := func(rk, sk string) (int, int, bool, error) {
		r, s := os.Getenv(rk), os.Getenv(sk)
		if r == "" && s == "" {
			return 0, 0, false, nil
		}
		ri, err1 := strconv.Atoi(r)
		si, err2 := strconv.Atoi(s)
		if err1 != nil || err2 != nil || si < 1 || ri < 0 || ri >= si {
			return 0, 0, true, fmt.Errorf("%w: %s=%q %s=%q", ErrBootstrap, rk, r, sk, s)
		}
		return ri, si, true, nil
	}
	l := launch{coord: os.Getenv(EnvCoord), token: os.Getenv(EnvToken)}
	for _, v := range []struct{ kind, rank, size, job string }{
		{"child", EnvRank, EnvSize, ""},
		{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid"},
		{"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"},
		{"pmi", "PMI_RANK", "PMI_SIZE", "PMI_JOBID"},
	} {
		r, s, ok, err := getInt(v.rank, v.size)
		if err != nil {
			return l, err
		}
		if !ok {
			continue
		}
		l.kind, l.rank, l.size = v.kind, r, s
		if l.coord == "" {
			if v.kind == "child" {
				return l, fmt.Errorf("%w: %s is set but %s is not", ErrBootstrap, EnvRank, EnvCoord)
			}
			job := os.Getenv(v.job)
			if v.kind == "srun" && os.Getenv("SLURM_STEP_ID") != "" {
				job += "." + os.Getenv("SLURM_STEP_ID")
			}
			if job == "" {
				return l, fmt.Errorf("%w: under %s without %s, set %s (host:port of rank 0)", ErrBootstrap, v.kind, v.job, EnvCoord)
			}
			// Every rank on one machine: a unix socket named after the job
			// in a directory only this user can enter.
			dir, err := privateDir()
			if err != nil {
				return l, err
			}
			l.coord = "unix:" + filepath.Join(dir, "job-"+sanitize(job)+".sock")
			if l.token == "" {
				l.token = "job:" + job // the private directory is the protection
			}
		}
		if l.token == "" {
			return l, fmt.Errorf("%w: %s=%s is a tcp coordinator: set %s to the same secret in every rank", ErrBootstrap, EnvCoord, l.coord, EnvToken)
		}
		return l, nil
	}
	// No launcher: this process is rank 0 of a self-launched job.
	l.kind, l.rank, l.size = "self", 0, procs
	dir, err := os.MkdirTemp("", "seriema-job-")
	if err != nil {
		return l, fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	l.ownDir = dir
	l.coord = "unix:" + filepath.Join(dir, "coord.sock")
	var b [32]byte
	rand.Read(b[:])
	l.token = hex.EncodeToString(b[:])
	return l, nil
}

// privateDir returns $TMPDIR/seriema-UID, created with mode 0700, refusing
// one that another user owns or others can enter.
func privateDir() (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("seriema-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%w: %s is accessible to other users (mode %v)", ErrBootstrap, dir, fi.Mode().Perm())
	}
	return dir, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

// machineID identifies this machine: hostname and kernel boot ID.
func machineID() string {
	h, _ := os.Hostname()
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return h + "/" + strings.TrimSpace(string(b))
}
