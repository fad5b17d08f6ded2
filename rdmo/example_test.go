package rdmo_test

import (
	"context"
	"fmt"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/rdmo"
)

// A target process serves a slotted page; an initiator appends tuples to
// it with one RDMO each (here over loop: both processes are in this one).
func Example() {
	fabric := dtutils.NewLoopFabric()
	target, _ := dtutils.NewProcess(dtutils.DefaultProcessConfig(0))
	defer target.Close()
	initiator, _ := dtutils.NewProcess(dtutils.DefaultProcessConfig(1))
	defer initiator.Close()
	qa, _ := fabric.NewProvider(initiator).NewQueuePair()
	qb, _ := fabric.NewProvider(target).NewQueuePair()
	qa.Connect(qb.Endpoint())
	qb.Connect(qa.Endpoint())

	// The owner: an engine, the built-in types, a page over its memory.
	engine, _ := rdmo.NewEngine(target, rdmo.EngineConfig{})
	rdmo.RegisterBuiltins(engine)
	region, _ := target.Registry().NewRegion(4096, alloc.RegionConfig{Name: "page"})
	mem, _ := region.Memory(0, 4096)
	rdmo.InitSlottedPage(mem.Bytes(), 8)
	page, _ := engine.Create(rdmo.SlottedPageType, mem)

	// The initiator, holding the capability.
	client, _ := rdmo.NewClient(initiator, rdmo.ClientConfig{}, qa)
	defer client.Close()
	ctx := context.Background()
	for _, t := range []string{"alpha", "beta"} {
		slot, code, err := client.SlottedAppend(ctx, page, []byte(t))
		fmt.Println(slot, code, err)
	}
	for _, t := range rdmo.SlottedTuples(mem.Bytes()) {
		fmt.Printf("%s\n", t)
	}

	// After revocation the capability is refused.
	engine.Revoke(page)
	_, code, err := client.SlottedAppend(ctx, page, []byte("gamma"))
	fmt.Println(code, err)
	// Output:
	// 0 ok <nil>
	// 1 ok <nil>
	// alpha
	// beta
	// rdmo: unknown or revoked capability rdmo: unknown or revoked capability
}

// Direct mode: processes on one machine that trust each other let the
// initiator run lock-free methods itself on the mapped instance. The first
// RDMO on a capability asks the engine where the instance lies; the rest
// send nothing (Stats), and revocation still reaches them.
func Example_direct() {
	fabric := dtutils.NewLoopFabric() // shm between two processes works the same
	target, _ := dtutils.NewProcess(dtutils.DefaultProcessConfig(0))
	defer target.Close()
	initiator, _ := dtutils.NewProcess(dtutils.DefaultProcessConfig(1))
	defer initiator.Close()
	qa, _ := fabric.NewProvider(initiator).NewQueuePair()
	qb, _ := fabric.NewProvider(target).NewQueuePair()
	qa.Connect(qb.Endpoint())
	qb.Connect(qa.Endpoint())

	engine, _ := rdmo.NewEngine(target, rdmo.EngineConfig{Direct: true})
	rdmo.RegisterBuiltins(engine)
	region, _ := target.Registry().NewRegion(4096, alloc.RegionConfig{Name: "sums"})
	mem, _ := region.Memory(0, 4096)
	rdmo.InitAccumulator(mem.Bytes(), []uint64{0, 1}, 2)
	sums, _ := engine.Create(rdmo.AccumulatorType, mem)

	client, _ := rdmo.NewClient(initiator, rdmo.ClientConfig{Direct: true}, qa)
	defer client.Close()
	rdmo.RegisterBuiltins(client) // the client runs the same method bodies
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		client.ScatterAndAccumulate(ctx, sums, []rdmo.KeyDelta{{Key: 0, Delta: 1}, {Key: 1, Delta: 2}})
	}
	fmt.Printf("%v %+v\n", rdmo.Accumulators(mem.Bytes()), client.Stats())
	engine.Revoke(sums)
	_, _, err := client.ScatterAndAccumulate(ctx, sums, []rdmo.KeyDelta{{Key: 0, Delta: 1}})
	fmt.Println(err)
	// Output:
	// [10 20] {Engine:1 Direct:10}
	// rdmo: unknown or revoked capability
}
