package alloc_test

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/seriema-go/seriema/alloc"
)

// completions stands in for a dtutils.Transmitter: it reports the flush
// number below which every tagged operation has completed.
type completions struct{ n atomic.Uint64 }

func (c *completions) Completed() uint64 { return c.n.Load() }

func ExampleCircular() {
	reg := alloc.NewRegistry(0)
	defer reg.Close()
	zone, _ := alloc.NewZoneAllocator(reg, alloc.DefaultZoneConfig())
	ring, _ := alloc.NewCircular(zone, alloc.CircularConfig{
		UnitSize: 4096, InitialUnits: 2, MaxUnits: 2, Growth: alloc.Linear, Align: 8,
	})
	var qp completions
	for seq := uint64(0); seq < 2; seq++ {
		buf, _ := ring.Next()
		copy(buf.Bytes(), "payload")
		buf.Tag(&qp, seq) // an operation with flush number seq reads buf
	}
	_, err := ring.Next()
	fmt.Println("before completion:", errors.Is(err, alloc.ErrBusy))
	qp.n.Store(1) // the operation tagged 0 completed
	_, err = ring.Next()
	fmt.Println("after completion:", err)
	// Output:
	// before completion: true
	// after completion: <nil>
}

func ExampleRegistry_Resolve() {
	reg := alloc.NewRegistry(3)
	defer reg.Close()
	r, _ := reg.NewRegion(1<<16, alloc.RegionConfig{Name: "example"})
	loc, _ := r.Locator(128, 64)
	wire, _ := loc.MarshalBinary() // what a peer receives
	var got alloc.Locator
	_ = got.UnmarshalBinary(wire)
	b, err := reg.Resolve(got)
	fmt.Println(len(b), err)
	got.Key++ // a forged key is refused
	_, err = reg.Resolve(got)
	fmt.Println(errors.Is(err, alloc.ErrBadKey))
	// Output:
	// 64 <nil>
	// true
}

func ExampleGeneral() {
	reg := alloc.NewRegistry(0)
	defer reg.Close()
	zone, _ := alloc.NewZoneAllocator(reg, alloc.DefaultZoneConfig())
	g, _ := alloc.NewGeneral(zone, alloc.GeneralConfig{ChunkSize: 1 << 20, Fit: alloc.BestFit})
	a, _ := g.Alloc(1000)
	fmt.Println(a.Len(), alloc.SizeClass(1000))
	_ = g.Free(a)
	b, _ := g.Alloc(900) // reuses a's block
	fmt.Println(b.Offset() == a.Offset())
	// Output:
	// 1000 1024
	// true
}
