package numa_test

import (
	"fmt"

	"github.com/seriema-go/seriema/numa"
)

func ExampleTopology_Place() {
	// A two-socket machine: even CPUs on node 0, odd ones on node 1.
	topo := &numa.Topology{Nodes: []numa.Node{
		{ID: 0, CPUs: []int{0, 2, 4, 6}},
		{ID: 1, CPUs: []int{1, 3, 5, 7}},
	}}
	for i := 0; i < 4; i++ {
		fc, fn, _ := topo.Place(numa.Fill, i)
		sc, sn, _ := topo.Place(numa.Spread, i)
		fmt.Printf("worker %d: fill cpu %d node %d, spread cpu %d node %d\n", i, fc, fn, sc, sn)
	}
	// Output:
	// worker 0: fill cpu 0 node 0, spread cpu 0 node 0
	// worker 1: fill cpu 2 node 0, spread cpu 1 node 1
	// worker 2: fill cpu 4 node 0, spread cpu 2 node 0
	// worker 3: fill cpu 6 node 0, spread cpu 3 node 1
}

func ExampleParseCPUList() {
	cpus, _ := numa.ParseCPUList("0-3,16-17")
	fmt.Println(cpus, numa.FormatCPUList(cpus))
	// Output: [0 1 2 3 16 17] 0-3,16-17
}
