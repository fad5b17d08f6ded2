package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const want = "hello one-sided, from thread 1 <nil>\nhello send-based, from thread 1 <nil>\n"

// rankFromEnv is this process's rank as its launcher set it ("" for the
// process that started a self-launched job).
func rankFromEnv() string {
	for _, v := range []string{"SERIEMA_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"} {
		if r := os.Getenv(v); r != "" {
			return r
		}
	}
	return ""
}

// TestHello runs the example as it is: two self-launched processes (this
// test binary is re-executed as rank 1), or the ranks mpirun started.
func TestHello(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if r := rankFromEnv(); r != "" && r != "0" {
		if out.Len() != 0 {
			t.Fatalf("rank %s printed %q", r, out.String())
		}
		return
	}
	if out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}

// TestHelloUnderMpirun: the same program, unchanged, as two ranks started
// by Open MPI's mpirun (the README's command, on one machine).
func TestHelloUnderMpirun(t *testing.T) {
	if rankFromEnv() != "" {
		t.Skip("a rank of another test's job")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun is not installed (Debian package openmpi-bin; .ci/run installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
		os.Args[0], "-test.run=^TestHello$", "-test.v")
	cmd.Env = append(os.Environ(), "OMPI_MCA_plm_rsh_agent=") // no ssh: both ranks are local
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	if strings.Count(string(out), "--- PASS: TestHello") != 2 {
		t.Fatalf("want both ranks to pass:\n%s", out)
	}
}
