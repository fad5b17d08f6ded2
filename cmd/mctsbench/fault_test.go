package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rankPID finds the process of the given rank among the children of the
// launcher (by the SERIEMA_RANK its self-launcher gave it).
func rankPID(launcher, rank int) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(launcher) {
			continue
		}
		env, _ := os.ReadFile(filepath.Join(d, "environ"))
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == "SERIEMA_RANK="+strconv.Itoa(rank) {
				pid, _ := strconv.Atoi(filepath.Base(d))
				return pid
			}
		}
	}
	return 0
}

// gone reports whether pid no longer runs (absent, or a zombie).
func gone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func shmNames(t *testing.T) map[string]bool {
	t.Helper()
	m := map[string]bool{}
	entries, err := os.ReadDir("/dev/shm")
	if err != nil {
		return m // no /dev/shm: nothing could be left there
	}
	for _, e := range entries {
		// Open MPI's shared-memory segments belong to the mpirun jobs
		// that tests of other packages run at the same time (go test runs
		// packages in parallel); a Seriema job makes none.
		if n := e.Name(); !strings.HasPrefix(n, "vader_segment.") && !strings.HasPrefix(n, "sm_segment.") {
			m[n] = true
		}
	}
	return m
}

// killRankDuring starts `mctsbench args` as a self-launched job, SIGKILLs
// rank victim once the job runs, and checks: the launcher exits non-zero
// naming the rank, promptly; every other rank is gone; nothing is left in
// /dev/shm.
func killRankDuring(t *testing.T, victim int, ready string, args ...string) {
	before := shmNames(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+strings.Join(args, " "))
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if ready != "" { // wait for the job to say it runs
		for sc.Scan() && !strings.Contains(sc.Text(), ready) {
		}
	}
	go func() { // keep draining
		for sc.Scan() {
		}
	}()
	launcher := cmd.Process.Pid
	victimPID := 0
	for start := time.Now(); victimPID == 0 && time.Since(start) < 30*time.Second; {
		time.Sleep(20 * time.Millisecond)
		victimPID = rankPID(launcher, victim)
	}
	var pids []int
	for r := 1; r < 3; r++ {
		if p := rankPID(launcher, r); p != 0 {
			pids = append(pids, p)
		}
	}
	if victimPID == 0 || len(pids) < 1 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("ranks not found (victim %d, others %v); stderr:\n%s", victimPID, pids, errb.String())
	}
	time.Sleep(500 * time.Millisecond) // let it work a little
	killed := time.Now()
	if err := syscall.Kill(victimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the launcher did not exit within 30 s of rank %d's death; stderr:\n%s", victim, errb.String())
	}
	took := time.Since(killed)
	t.Logf("launcher exited %v after rank %d was killed: %v", took.Round(time.Millisecond), victim, err)
	if err == nil {
		t.Errorf("the launcher exited 0 although rank %d died", victim)
	}
	if !strings.Contains(errb.String(), "rank "+strconv.Itoa(victim)) {
		t.Errorf("stderr does not name rank %d:\n%s", victim, errb.String())
	}
	if took > 10*time.Second {
		t.Errorf("noticing the death and exiting took %v", took)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range pids {
		for !gone(p) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !gone(p) {
			t.Errorf("rank process %d is still running", p)
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	for name := range shmNames(t) {
		if !before[name] {
			t.Errorf("left in /dev/shm: %s", name)
		}
	}
}

// TestSigkillDuringDemo (reliability): SIGKILL of rank 2 of a 3-process
// MCTS demo.
func TestSigkillDuringDemo(t *testing.T) {
	killRankDuring(t, 2, "Seriema for Go", "demo", "-procs", "3", "-visits", "100000000", "-quiet")
}

// TestSigkillDuringMicro (reliability): SIGKILL of the sending rank of a
// micro run.
func TestSigkillDuringMicro(t *testing.T) {
	killRankDuring(t, 1, "", "micro", "-mode", "write", "-sizes", "64", "-n", "2000000000", "-reps", "1", "-procs", "2")
}
