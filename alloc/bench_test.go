package alloc

import "testing"

func BenchmarkZoneChunk(b *testing.B) {
	_, z := newZone(b, 1<<30, 4<<10)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%(1<<18) == (1<<18)-1 { // stay inside the mapped superchunk budget
			b.StopTimer()
			z.Close()
			_, z = newZone(b, 1<<30, 4<<10)
			b.StartTimer()
		}
		if _, err := z.Chunk(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCircularNext(b *testing.B) {
	_, z := newZone(b, 8<<20, 64<<10)
	c, _ := NewCircular(z, CircularConfig{UnitSize: 4096, InitialUnits: 64, MaxUnits: 64, Align: 8})
	var tr tracker
	b.ReportAllocs()
	b.SetBytes(4096)
	for i := 0; i < b.N; i++ {
		m, err := c.Next()
		if err != nil {
			b.Fatal(err)
		}
		m.Tag(&tr, uint64(i))
		tr.done.Store(uint64(i + 1))
	}
}

func BenchmarkLinearCircularAlloc(b *testing.B) {
	_, z := newZone(b, 8<<20, 64<<10)
	lc, _ := NewLinearCircular(z, CircularConfig{UnitSize: 64 << 10, InitialUnits: 8, MaxUnits: 8, Align: 8})
	var tr tracker
	b.ReportAllocs()
	b.SetBytes(64)
	for i := 0; i < b.N; i++ {
		m, err := lc.Alloc(64)
		if err != nil {
			b.Fatal(err)
		}
		m.Tag(&tr, uint64(i))
		tr.done.Store(uint64(i + 1))
	}
}

func BenchmarkGeneralAllocFree(b *testing.B) {
	_, z := newZone(b, 8<<20, 64<<10)
	g, _ := NewGeneral(z, DefaultGeneralConfig())
	var held [16]Memory
	for i := range held {
		held[i], _ = g.Alloc(100 + i*64)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		k := i % len(held)
		if err := g.Free(held[k]); err != nil {
			b.Fatal(err)
		}
		m, err := g.Alloc(100 + k*64)
		if err != nil {
			b.Fatal(err)
		}
		held[k] = m
	}
}

// BenchmarkSecondMapping: a second mapping of 2 MiB of resident shared
// memory (a peer's populated region, as the shm transport maps it), made
// writable page by page: by MapResident in one madvise, or by a write to
// each page, which faults it. The mapping and unmapping are in the loop.
func BenchmarkSecondMapping(b *testing.B) {
	const size = 2 << 20
	fd, owner, err := mapMemfd("alloc-bench", 0, size)
	if err != nil {
		b.Fatal(err)
	}
	defer Unmap(owner)
	if err := populate(owner, 4096); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		mapIn func(m []byte)
	}{
		{"mapresident", func(m []byte) {
			if n, err := MapResident(m, size); err != nil || n != size {
				b.Fatalf("MapResident = %d, %v", n, err)
			}
		}},
		{"faulting", func(m []byte) { touchPages(m, 4096) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				m, err := MapShared(fd, size)
				if err != nil {
					b.Fatal(err)
				}
				c.mapIn(m)
				Unmap(m)
			}
		})
	}
}
