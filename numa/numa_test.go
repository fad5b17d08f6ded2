package numa

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeSysfs writes devices/system/node/nodeN/{cpulist,distance} under a temp
// root and returns the root.
func fakeSysfs(t *testing.T, cpulists []string, distances []string) string {
	t.Helper()
	root := t.TempDir()
	for i, cl := range cpulists {
		dir := filepath.Join(root, "devices", "system", "node", fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "cpulist"), []byte(cl+"\n"), 0o644)
		if distances != nil {
			os.WriteFile(filepath.Join(dir, "distance"), []byte(distances[i]+"\n"), 0o644)
		}
	}
	// Files the kernel also puts there; they must be ignored.
	os.WriteFile(filepath.Join(root, "devices", "system", "node", "possible"), []byte("0-3\n"), 0o644)
	os.WriteFile(filepath.Join(root, "devices", "system", "node", "online"), []byte("0-3\n"), 0o644)
	return root
}

func TestParseCPUList(t *testing.T) {
	cases := []struct {
		in   string
		want []int
	}{
		{"", nil},
		{"0", []int{0}},
		{"0-3", []int{0, 1, 2, 3}},
		{"0-7,16-23", []int{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}},
		{" 5 , 1-2 \n", []int{1, 2, 5}},
		{"3,1,3,2-3", []int{1, 2, 3}}, // unsorted and overlapping
	}
	for _, c := range cases {
		got, err := ParseCPUList(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"a", "1-", "-1", "3-1", "1,,2", "1-2-3", "99999999"} {
		if _, err := ParseCPUList(bad); !errors.Is(err, ErrBadCPUList) {
			t.Errorf("ParseCPUList(%q) error = %v; want ErrBadCPUList", bad, err)
		}
	}
	if s := FormatCPUList([]int{16, 0, 1, 2, 3, 8}); s != "0-3,8,16" {
		t.Errorf("FormatCPUList = %q", s)
	}
}

func TestLoadFakeTrees(t *testing.T) {
	t.Run("1 node", func(t *testing.T) {
		topo, err := Load(fakeSysfs(t, []string{"0-3"}, []string{"10"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(topo.Nodes) != 1 || !reflect.DeepEqual(topo.Nodes[0].CPUs, []int{0, 1, 2, 3}) {
			t.Fatalf("got %+v", topo)
		}
	})
	t.Run("2 nodes interleaved", func(t *testing.T) {
		// Hyperthread siblings numbered after all cores, as on many Xeons.
		topo, err := Load(fakeSysfs(t, []string{"0-7,16-23", "8-15,24-31"}, []string{"10 21", "21 10"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(topo.Nodes) != 2 || len(topo.Nodes[1].CPUs) != 16 || topo.Nodes[1].CPUs[8] != 24 {
			t.Fatalf("got %+v", topo)
		}
		if d, _ := topo.Distance(0, 1); d != 21 {
			t.Errorf("distance 0→1 = %d, want 21", d)
		}
		if n, _ := topo.NodeOfCPU(20); n != 0 {
			t.Errorf("CPU 20 on node %d, want 0", n)
		}
	})
	t.Run("4 nodes with a memory-only node", func(t *testing.T) {
		topo, err := Load(fakeSysfs(t,
			[]string{"0,2,4,6", "1,3,5,7", "", "8-9"},
			[]string{"10 20 30 40", "20 10 20 30", "30 20 10 20", "40 30 20 10"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(topo.Nodes) != 4 || len(topo.Nodes[2].CPUs) != 0 {
			t.Fatalf("got %+v", topo)
		}
		if d, _ := topo.Distance(3, 0); d != 40 {
			t.Errorf("distance 3→0 = %d", d)
		}
		// Spread skips the memory-only node and wraps around.
		var got [][2]int
		for i := 0; i < 7; i++ {
			cpu, node, err := topo.Place(Spread, i)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, [2]int{cpu, node})
		}
		want := [][2]int{{0, 0}, {1, 1}, {8, 3}, {2, 0}, {3, 1}, {9, 3}, {4, 0}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("spread placement = %v, want %v", got, want)
		}
		// Fill uses node 0 entirely first.
		for i, want := range []int{0, 2, 4, 6, 1} {
			if cpu, _, _ := topo.Place(Fill, i); cpu != want {
				t.Errorf("fill worker %d → CPU %d, want %d", i, cpu, want)
			}
		}
		if cpu, _, _ := topo.Place(Fill, 10); cpu != 0 { // 10 CPUs: wraps
			t.Errorf("fill worker 10 → CPU %d, want 0 (wrap)", cpu)
		}
		if _, err := topo.Node(7); !errors.Is(err, ErrNoSuchNode) {
			t.Errorf("Node(7) error = %v", err)
		}
		r := topo.Restrict([]int{1, 8})
		if cpu, _, _ := r.Place(Fill, 1); cpu != 8 {
			t.Errorf("restricted fill worker 1 → %d, want 8", cpu)
		}
	})
	t.Run("bad trees", func(t *testing.T) {
		if _, err := Load(fakeSysfs(t, []string{"0-x"}, nil)); !errors.Is(err, ErrBadCPUList) {
			t.Errorf("bad cpulist: %v", err)
		}
		if _, err := Load(fakeSysfs(t, []string{"0", "1"}, []string{"10", "10 20"})); err == nil {
			t.Errorf("distance rows of the wrong width accepted")
		}
	})
	t.Run("no NUMA in kernel", func(t *testing.T) {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "devices", "system", "cpu"), 0o755)
		os.WriteFile(filepath.Join(root, "devices", "system", "cpu", "online"), []byte("0-5\n"), 0o644)
		topo, err := Load(root)
		if err != nil || len(topo.Nodes) != 1 || len(topo.Nodes[0].CPUs) != 6 {
			t.Fatalf("got %+v, %v", topo, err)
		}
	})
	t.Run("no NUMA and no online list", func(t *testing.T) {
		topo, err := Load(t.TempDir())
		if err != nil || len(topo.Nodes) != 1 || len(topo.Nodes[0].CPUs) != runtime.NumCPU() || topo.Nodes[0].CPUs[runtime.NumCPU()-1] != runtime.NumCPU()-1 {
			t.Fatalf("got %+v, %v; want one node of CPUs 0…%d", topo, err, runtime.NumCPU()-1)
		}
	})
	t.Run("directories that are not nodes", func(t *testing.T) {
		root := fakeSysfs(t, []string{"0-1"}, []string{"10"})
		for _, d := range []string{"node-1", "node_x", "nodes"} {
			dir := filepath.Join(root, "devices", "system", "node", d)
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "cpulist"), []byte("2-3\n"), 0o644)
		}
		topo, err := Load(root)
		if err != nil || len(topo.Nodes) != 1 || topo.Nodes[0].ID != 0 {
			t.Fatalf("got %+v, %v; want node 0 alone", topo, err)
		}
	})
	if _, _, err := topo0(t).Place(Policy(9), 0); !errors.Is(err, ErrBadArgument) {
		t.Errorf("unknown policy: %v, want ErrBadArgument", err)
	}
	if _, _, err := topo0(t).Place(Fill, -1); !errors.Is(err, ErrBadArgument) {
		t.Errorf("negative worker index: %v, want ErrBadArgument", err)
	}
	if _, err := ParsePolicy("scatter"); !errors.Is(err, ErrBadArgument) {
		t.Errorf("ParsePolicy(scatter): %v, want ErrBadArgument", err)
	}
	if p, err := ParsePolicy("Spread"); err != nil || p != Spread || p.String() != "spread" {
		t.Errorf("ParsePolicy: %v %v", p, err)
	}
}

func topo0(t *testing.T) *Topology {
	topo, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestLoadRealMachine(t *testing.T) {
	topo := topo0(t)
	if len(topo.CPUs()) == 0 {
		t.Fatal("machine topology has no CPUs")
	}
}

func TestPinChangesAffinity(t *testing.T) {
	done := make(chan error)
	go func() {
		orig, err := Affinity()
		if err != nil {
			done <- err
			return
		}
		target := orig[len(orig)-1]
		if err := Pin(target); err != nil {
			done <- err
			return
		}
		got, err := Affinity()
		if err == nil && !reflect.DeepEqual(got, []int{target}) {
			err = fmt.Errorf("after Pin(%d) affinity is %v", target, got)
		}
		// The scheduler must actually run us there.
		if err == nil {
			var cpu uint32
			if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e == 0 && int(cpu) != target {
				err = fmt.Errorf("pinned to CPU %d but running on %d", target, cpu)
			}
		}
		if e := Unpin(orig); err == nil && e != nil {
			err = e
		}
		if back, _ := Affinity(); err == nil && !reflect.DeepEqual(back, orig) {
			err = fmt.Errorf("Unpin left affinity %v, want %v", back, orig)
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := Pin(); !errors.Is(err, ErrNoCPUs) {
		t.Errorf("Pin() = %v, want ErrNoCPUs", err)
	}
	if err := Pin(1 << 20); !errors.Is(err, ErrBadArgument) {
		if err == nil {
			runtime.UnlockOSThread()
		}
		t.Errorf("Pin(huge CPU): %v, want ErrBadArgument", err)
	}
}

func TestBind(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	err = Bind(mem, 0, Strict)
	if errors.Is(err, ErrUnsupported) {
		t.Skip("kernel built without NUMA: mbind returns ENOSYS")
	}
	if err != nil {
		t.Fatalf("Bind to node 0: %v", err)
	}
	mem[0] = 1 // touching a strictly bound page on an existing node works
	if err := Bind(mem, 0, Preferred); err != nil {
		t.Fatalf("Bind preferred: %v", err)
	}
	topo := topo0(t)
	missing := topo.Nodes[len(topo.Nodes)-1].ID + 1
	err = Bind(mem, missing, Strict)
	if !errors.Is(err, ErrNoSuchNode) {
		t.Fatalf("Bind to missing node %d = %v, want ErrNoSuchNode", missing, err)
	}
	t.Logf("missing node error reads: %v", err)
	if err := Bind(mem, -1, Strict); !errors.Is(err, ErrNoSuchNode) {
		t.Errorf("Bind(-1) = %v", err)
	}
}
