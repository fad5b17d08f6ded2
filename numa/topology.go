package numa

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// Node is one NUMA zone.
type Node struct {
	// ID is the kernel's node number (the N of /sys/devices/system/node/nodeN).
	ID int
	// CPUs lists the node's CPUs in increasing order; a memory-only node has none.
	CPUs []int
	// Distances holds the kernel's relative distances from this node to every
	// node of the topology, indexed like Topology.Nodes (10 means local).
	// It is nil when the kernel did not report them.
	Distances []int
}

// Topology is the set of NUMA nodes of a machine, ordered by node ID.
type Topology struct {
	Nodes []Node
}

// Load reads the topology under root ("" means "/sys"), which is where the
// kernel's sysfs is mounted; tests pass a directory holding a fake tree
// (devices/system/node/nodeN/{cpulist,distance}).
//
// Without devices/system/node (a kernel built without NUMA) the result is one
// node 0 holding the CPUs of devices/system/cpu/online, or, if that is missing
// too, CPUs 0…runtime.NumCPU()-1.
func Load(root string) (*Topology, error) {
	if root == "" {
		root = "/sys"
	}
	dir := filepath.Join(root, "devices", "system", "node")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return singleNode(root)
	}
	if err != nil {
		return nil, fmt.Errorf("numa: reading %s: %w", dir, err)
	}
	t := &Topology{}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "node")
		if !ok {
			continue
		}
		id, err := strconv.Atoi(name)
		if err != nil || id < 0 {
			continue // e.g. "node_whatever"; not a node directory
		}
		n := Node{ID: id}
		if n.CPUs, err = readCPUList(filepath.Join(dir, e.Name(), "cpulist")); err != nil {
			return nil, err
		}
		if n.Distances, err = readDistances(filepath.Join(dir, e.Name(), "distance")); err != nil {
			return nil, err
		}
		t.Nodes = append(t.Nodes, n)
	}
	if len(t.Nodes) == 0 {
		return singleNode(root)
	}
	sort.Slice(t.Nodes, func(i, j int) bool { return t.Nodes[i].ID < t.Nodes[j].ID })
	for _, n := range t.Nodes {
		if n.Distances != nil && len(n.Distances) != len(t.Nodes) {
			return nil, fmt.Errorf("numa: node %d reports %d distances for %d nodes", n.ID, len(n.Distances), len(t.Nodes))
		}
	}
	return t, nil
}

func singleNode(root string) (*Topology, error) {
	cpus, err := readCPUList(filepath.Join(root, "devices", "system", "cpu", "online"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if len(cpus) == 0 {
		for i := 0; i < runtime.NumCPU(); i++ {
			cpus = append(cpus, i)
		}
	}
	return &Topology{Nodes: []Node{{ID: 0, CPUs: cpus, Distances: []int{10}}}}, nil
}

func readCPUList(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("numa: %w", err)
	}
	cpus, err := ParseCPUList(string(b))
	if err != nil {
		return nil, fmt.Errorf("numa: %s: %w", path, err)
	}
	return cpus, nil
}

func readDistances(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("numa: %w", err)
	}
	var d []int
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("numa: %s: bad distance %q", path, f)
		}
		d = append(d, v)
	}
	return d, nil
}

// Node returns the node with the given ID.
func (t *Topology) Node(id int) (Node, error) {
	for _, n := range t.Nodes {
		if n.ID == id {
			return n, nil
		}
	}
	return Node{}, fmt.Errorf("%w: node %d (topology has %s)", ErrNoSuchNode, id, t.nodeIDs())
}

// NodeOfCPU returns the ID of the node holding cpu.
func (t *Topology) NodeOfCPU(cpu int) (int, error) {
	for _, n := range t.Nodes {
		for _, c := range n.CPUs {
			if c == cpu {
				return n.ID, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: CPU %d is on no node", ErrNoSuchNode, cpu)
}

// Distance returns the kernel's distance between nodes a and b, or 0 when
// the kernel did not report distances.
func (t *Topology) Distance(a, b int) (int, error) {
	ia, ib := t.index(a), t.index(b)
	if ia < 0 || ib < 0 {
		return 0, fmt.Errorf("%w: distance %d→%d (topology has %s)", ErrNoSuchNode, a, b, t.nodeIDs())
	}
	if t.Nodes[ia].Distances == nil {
		return 0, nil
	}
	return t.Nodes[ia].Distances[ib], nil
}

// CPUs returns every CPU of the topology in node order.
func (t *Topology) CPUs() []int {
	var all []int
	for _, n := range t.Nodes {
		all = append(all, n.CPUs...)
	}
	return all
}

// Restrict returns a copy holding only the CPUs in allowed (for example the
// process's affinity mask under a container's cpuset). Nodes left without
// CPUs stay, since they may still hold memory.
func (t *Topology) Restrict(allowed []int) *Topology {
	ok := make(map[int]bool, len(allowed))
	for _, c := range allowed {
		ok[c] = true
	}
	r := &Topology{Nodes: make([]Node, len(t.Nodes))}
	for i, n := range t.Nodes {
		r.Nodes[i] = Node{ID: n.ID, Distances: n.Distances}
		for _, c := range n.CPUs {
			if ok[c] {
				r.Nodes[i].CPUs = append(r.Nodes[i].CPUs, c)
			}
		}
	}
	return r
}

func (t *Topology) index(id int) int {
	for i, n := range t.Nodes {
		if n.ID == id {
			return i
		}
	}
	return -1
}

func (t *Topology) nodeIDs() string {
	ids := make([]string, len(t.Nodes))
	for i, n := range t.Nodes {
		ids[i] = strconv.Itoa(n.ID)
	}
	return "nodes " + strings.Join(ids, ",")
}
