package alloc

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/seriema-go/seriema/internal/jobtest"
	"github.com/seriema-go/seriema/numa"
)

// The test binary re-executes itself as a child that maps a region by its
// inherited descriptor (fd 3).
const childEnv = "SERIEMA_ALLOC_TEST_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(childMain(v))
	}
	jobtest.Main(m)
}

// childMain checks the parent's pattern and writes the reverse one.
func childMain(arg string) int {
	size, _ := strconv.Atoi(arg)
	mem, err := MapShared(3, size)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := range mem {
		if mem[i] != byte(i*7) {
			fmt.Fprintf(os.Stderr, "byte %d = %d, want %d\n", i, mem[i], byte(i*7))
			return 3
		}
	}
	for i := range mem {
		mem[i] = byte(255 - i*7)
	}
	return 0
}

type tracker struct{ done atomic.Uint64 }

func (t *tracker) Completed() uint64 { return t.done.Load() }

func newZone(t testing.TB, super, chunk int) (*Registry, *ZoneAllocator) {
	t.Helper()
	reg := NewRegistry(1)
	z, err := NewZoneAllocator(reg, ZoneConfig{SuperchunkSize: super, ChunkSize: chunk, Region: RegionConfig{Ladder: []Rung{Small}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg, z
}

func TestRegionSharedWithChild(t *testing.T) {
	reg := NewRegistry(0)
	defer reg.Close()
	const size = 1 << 20
	r, err := reg.NewRegion(size, RegionConfig{Name: "child-test"})
	if err != nil {
		t.Fatal(err)
	}
	mem := r.Bytes()[:size]
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	// The child gets a duplicate: an os.File made on r.FD() itself would
	// close the region's descriptor when collected, and the region's Close
	// would then close whatever file had reused the number (once it was
	// this binary's coverage profile).
	dup, err := unix.Dup(r.FD())
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "region")
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(size))
	cmd.ExtraFiles = []*os.File{f}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v: %s", err, stderr.String())
	}
	for i := range mem {
		if mem[i] != byte(255-i*7) {
			t.Fatalf("parent sees byte %d = %d after child wrote %d", i, mem[i], byte(255-i*7))
		}
	}
}

// hugePagesFree reads the free count of a hugepage size from sysfs.
func hugePagesFree(kb int) int {
	b, err := os.ReadFile(fmt.Sprintf("/sys/kernel/mm/hugepages/hugepages-%dkB/free_hugepages", kb))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func TestHugepageLadderMatchesKernel(t *testing.T) {
	reg := NewRegistry(0)
	defer reg.Close()

	// A region smaller than a huge page never takes a hugetlb rung.
	small, err := reg.NewRegion(64<<10, RegionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if small.Rung() != Small {
		t.Errorf("64 KiB region got rung %v, want %v", small.Rung(), Small)
	}

	free2M := hugePagesFree(2048)
	want := Small
	if free2M > 0 {
		want = Huge2M
	} else if shmemTHPAdvisable() {
		want = THP
	}
	r, err := reg.NewRegion(2<<20, RegionConfig{Ladder: []Rung{Huge2M, THP, Small}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2 MiB region: rung %v (free 2 MiB pages before: %d, shmem THP advisable: %v)", r.Rung(), free2M, shmemTHPAdvisable())
	if r.Rung() != want {
		t.Errorf("2 MiB region got rung %v, want %v", r.Rung(), want)
	}
	r.Bytes()[0] = 1 // fault a page in so smaps has it
	ps, thp, err := KernelPageSize(r.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	switch r.Rung() {
	case Huge2M:
		if ps != 2<<20 {
			t.Errorf("rung %v but kernel page size %d", r.Rung(), ps)
		}
	case THP:
		if ps != 4<<10 {
			t.Errorf("THP rung but KernelPageSize %d", ps)
		}
		t.Logf("THP bytes mapped: %d (the kernel may fall back page by page)", thp)
	case Small:
		if ps != 4<<10 || thp != 0 {
			t.Errorf("4 KiB rung but kernel page size %d, %d THP bytes", ps, thp)
		}
	}
	stats := reg.Stats()
	if stats[r.Rung()].Regions < 1 || stats[r.Rung()].Bytes < 2<<20 {
		t.Errorf("stats do not count the region: %+v", stats)
	}
	// A ladder of hugetlb rungs alone fails clearly when no pages are free.
	if hugePagesFree(1048576) == 0 {
		_, err := reg.NewRegion(1<<30, RegionConfig{Ladder: []Rung{Huge1G}})
		if !errors.Is(err, ErrNoMemory) || !strings.Contains(err.Error(), "hugetlb-1GiB") {
			t.Errorf("1 GiB hugetlb without reserved pages: %v", err)
		}
	}
}

func TestRegionBindNode0(t *testing.T) {
	reg := NewRegistry(0)
	defer reg.Close()
	r, err := reg.NewRegion(1<<20, RegionConfig{Bind: true, Node: 0})
	if err != nil {
		t.Fatal(err)
	}
	r.Bytes()[0] = 1
	if !r.Bound() {
		t.Log("kernel without NUMA: binding ignored")
		return
	}
	if _, err := reg.NewRegion(1<<20, RegionConfig{Bind: true, Node: 999}); !errors.Is(err, numa.ErrNoSuchNode) {
		t.Errorf("binding to node 999: %v, want numa.ErrNoSuchNode", err)
	}
}

// resident counts the pages of mem in memory.
func resident(t *testing.T, mem []byte) int {
	t.Helper()
	n, err := Resident(mem)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRegionPopulate: a region made with Populate has every page in memory
// before its first use (MADV_POPULATE_WRITE, or a write to each page where
// the kernel lacks it); one made without has none until touched.
func TestRegionPopulate(t *testing.T) {
	reg := NewRegistry(0)
	defer reg.Close()
	const size, pages = 1 << 20, 256
	lazy, err := reg.NewRegion(size, RegionConfig{Ladder: []Rung{Small}})
	if err != nil {
		t.Fatal(err)
	}
	if n := resident(t, lazy.Bytes()); n != 0 {
		t.Fatalf("a fresh region without Populate has %d of %d pages in memory", n, pages)
	}
	full, err := reg.NewRegion(size, RegionConfig{Ladder: []Rung{Small}, Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := resident(t, full.Bytes()); n != pages {
		t.Fatalf("a region made with Populate has %d of %d pages in memory", n, pages)
	}
	if !bytes.Equal(full.Bytes(), make([]byte, size)) {
		t.Fatal("a populated region is not zero")
	}
	touchPages(lazy.Bytes(), 4096) // the fallback for kernels before 5.14
	if n := resident(t, lazy.Bytes()); n != pages {
		t.Fatalf("touchPages left %d of %d pages out of memory", pages-n, pages)
	}
}

// TestMapResident: a second mapping of a region's memory (a peer's, as the
// shm transport maps it) gets the pages another mapping faulted in without
// faulting them itself, up to the limit, and no page that was not in memory.
func TestMapResident(t *testing.T) {
	const pages = 64
	fd, owner, err := mapMemfd("alloc-test", 0, pages*4096)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	defer Unmap(owner)
	in := func(p int) bool { return p < 10 || p >= 20 && p < 30 } // what the owner touched
	for p := 0; p < pages; p++ {
		if in(p) {
			owner[p*4096] = byte(p)
		}
	}
	peer := func() []byte {
		m, err := MapShared(fd, pages*4096)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Unmap(m) })
		return m
	}
	// faults writes the owner's pages through m (as a one-sided write does:
	// a read fault would map 16 neighbours at once, a write fault one page)
	// and counts this thread's minor faults meanwhile.
	faults := func(m []byte) int64 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var before, after unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &before)
		for p := 0; p < pages; p++ {
			if in(p) {
				m[p*4096+1] = byte(p)
			}
		}
		unix.Getrusage(unix.RUSAGE_THREAD, &after)
		for p := 0; p < pages; p++ {
			if in(p) && owner[p*4096+1] != byte(p) {
				t.Fatalf("page %d: the owner reads %d where the second mapping wrote %d", p, owner[p*4096+1], p)
			}
		}
		return after.Minflt - before.Minflt
	}
	if n := faults(peer()); n < 15 {
		t.Fatalf("control: touching 20 pages of a fresh mapping took %d faults; cannot tell mapped from not", n)
	}
	m := peer()
	n, err := MapResident(m, 1<<30)
	if errors.Is(err, unix.EINVAL) {
		t.Skipf("no MADV_POPULATE_WRITE: %v", err)
	}
	if err != nil || n != 20*4096 {
		t.Fatalf("MapResident = %d, %v; want the 20 pages in memory (%d bytes)", n, err, 20*4096)
	}
	if f := faults(m); f > 3 {
		t.Errorf("touching the 20 mapped pages took %d faults", f)
	}
	if r := resident(t, m[10*4096:20*4096]); r != 0 {
		t.Errorf("%d pages that were not in memory are now", r)
	}
	if r := resident(t, m[30*4096:]); r != 0 {
		t.Errorf("%d pages past the last touched one are now in memory", r)
	}
	if n, err := MapResident(peer(), 5*4096); err != nil || n != 5*4096 {
		t.Errorf("MapResident with a 5-page limit = %d, %v", n, err)
	}
	if n, err := MapResident(peer(), 0); err != nil || n != 0 {
		t.Errorf("MapResident with no limit = %d, %v; want nothing mapped", n, err)
	}
}

// TestPopulate: Populate brings in exactly the pages spanning the bytes it
// is given (an unaligned range included), keeps their bytes, and a second
// mapping of the memory then finds them in memory (MapResident's case).
func TestPopulate(t *testing.T) {
	const pages = 16
	fd, mem, err := mapMemfd("alloc-test", 0, pages*4096)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	defer Unmap(mem)
	mem[2*4096+7] = 42 // page 2 in memory, with a byte to keep
	if err := Populate(mem[3*4096-5 : 6*4096+1]); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no MADV_POPULATE_WRITE: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for p := 0; p < pages; p++ {
		want := 0
		if p >= 2 && p <= 6 { // 2 touched; 2…6 span the range
			want = 1
		}
		if r := resident(t, mem[p*4096:(p+1)*4096]); r != want {
			t.Errorf("page %d: %d resident, want %d", p, r, want)
		}
	}
	if mem[2*4096+7] != 42 {
		t.Errorf("Populate changed a byte: %d, want 42", mem[2*4096+7])
	}
	peer, err := MapShared(fd, pages*4096)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(peer)
	if n, err := MapResident(peer, len(peer)); err != nil || n != 5*4096 {
		t.Errorf("MapResident after Populate = %d, %v; want the 5 populated pages", n, err)
	}
	if err := Populate(nil); err != nil {
		t.Errorf("Populate(nil) = %v", err)
	}
}

func TestBadSizes(t *testing.T) {
	reg, z := newZone(t, 8<<20, 1<<20)
	for _, n := range []int{0, -1} {
		if _, err := reg.NewRegion(n, RegionConfig{}); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("NewRegion(%d) = %v", n, err)
		}
		if _, err := z.Alloc(n); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("zone Alloc(%d) = %v", n, err)
		}
	}
	if _, err := reg.NewRegion(1<<50, RegionConfig{}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("NewRegion(1<<50) = %v", err)
	}
	lc, err := NewLinearCircular(z, CircularConfig{UnitSize: 4096, InitialUnits: 1, MaxUnits: 2, Align: 8})
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]error{0: ErrInvalidSize, -5: ErrInvalidSize, 4097: ErrTooLarge} {
		if _, err := lc.Alloc(n); !errors.Is(err, want) {
			t.Errorf("LinearCircular.Alloc(%d) = %v, want %v", n, err, want)
		}
	}
	g, _ := NewGeneral(z, GeneralConfig{ChunkSize: 1 << 20, MaxBytes: 4 << 20})
	for n, want := range map[int]error{0: ErrInvalidSize, -1: ErrInvalidSize, 1 << 50: ErrTooLarge, 5 << 20: ErrExhausted} {
		if _, err := g.Alloc(n); !errors.Is(err, want) {
			t.Errorf("General.Alloc(%d) = %v, want %v", n, err, want)
		}
	}
	for _, c := range []CircularConfig{{}, {UnitSize: 100, InitialUnits: 1, MaxUnits: 1, Align: 8}, {UnitSize: 64, InitialUnits: 2, MaxUnits: 1, Align: 8},
		{UnitSize: 64, MaxUnits: 1, Align: 8}, {UnitSize: 64, InitialUnits: 1, MaxUnits: 1, Align: 8, Growth: Exponential + 1}} {
		if _, err := NewCircular(z, c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("NewCircular(%+v) = %v", c, err)
		}
	}
	for _, c := range []ZoneConfig{
		{SuperchunkSize: 3 << 20, ChunkSize: 2 << 20}, // not a multiple
		{SuperchunkSize: 3 << 20, ChunkSize: 3 << 20}, // not a power of two
		{SuperchunkSize: 4 << 20, ChunkSize: 2 << 20, MaxBytes: -1},
	} {
		if _, err := NewZoneAllocator(reg, c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("bad zone config %+v accepted: %v", c, err)
		}
	}
	zb, _ := NewZoneAllocator(reg, ZoneConfig{SuperchunkSize: 4 << 20, ChunkSize: 1 << 20, MaxBytes: 2 << 20, Region: RegionConfig{Ladder: []Rung{Small}}})
	if _, err := zb.Alloc(3 << 20); !errors.Is(err, ErrExhausted) {
		t.Errorf("zone past MaxBytes: %v", err)
	}
}

// span is [start, end) of a region's bytes.
type span struct {
	region   uint32
	start, n int
}

// TestZoneMemoryIsZero: what the zone hands out is zero, from the bump
// pointer and from dedicated regions (riutils clears only the chunks it
// recycles and relies on this).
func TestZoneMemoryIsZero(t *testing.T) {
	_, z := newZone(t, 1<<20, 64<<10)
	for _, size := range []int{64 << 10, 3 * 64 << 10, 1 << 20, 3 << 20} {
		m, err := z.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range m.Bytes() {
			if c != 0 {
				t.Fatalf("%d-byte allocation: byte %d is %#x", size, i, c)
			}
		}
		clear(m.Bytes()[:1]) // and it is writable
	}
}

func TestZoneConcurrentNoOverlap(t *testing.T) {
	_, z := newZone(t, 16<<20, 64<<10)
	const workers, per = 8, 200
	var mu sync.Mutex
	var spans []span
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				size := (1 + (i+w)%3) * (64 << 10) // 1 to 3 chunks
				if i%50 == 49 {
					size = 20 << 20 // above a superchunk: dedicated region
				}
				m, err := z.Alloc(size)
				if err != nil {
					t.Error(err)
					return
				}
				b := m.Bytes()
				b[0], b[len(b)-1] = byte(w), byte(w) // touch both ends under -race
				mu.Lock()
				spans = append(spans, span{m.Region().ID(), m.Offset(), m.Len()})
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].region != spans[j].region {
			return spans[i].region < spans[j].region
		}
		return spans[i].start < spans[j].start
	})
	for i := 1; i < len(spans); i++ {
		a, b := spans[i-1], spans[i]
		if a.region == b.region && a.start+a.n > b.start {
			t.Fatalf("overlap: %+v and %+v", a, b)
		}
	}
	if len(spans) != workers*per {
		t.Fatalf("%d allocations, want %d", len(spans), workers*per)
	}
	if s := z.Stats(); s.Superchunks < 2 || s.LargeBytes == 0 {
		t.Errorf("expected several superchunks and large regions: %+v", s)
	}
}

func TestCircularRecyclingAfterCompletion(t *testing.T) {
	_, z := newZone(t, 8<<20, 64<<10)
	c, err := NewCircular(z, CircularConfig{UnitSize: 4096, InitialUnits: 2, MaxUnits: 4, Growth: Linear, Align: 8})
	if err != nil {
		t.Fatal(err)
	}
	var tr tracker
	seen := map[int]uint64{} // offset → seq of the op that used it
	var seq uint64
	for i := 0; i < 4; i++ {
		m, err := c.Next()
		if err != nil {
			t.Fatalf("Next %d: %v", i, err)
		}
		seq++
		m.Tag(&tr, seq)
		if _, dup := seen[m.Offset()]; dup {
			t.Fatalf("unit at %d reused before its op (seq %d) completed", m.Offset(), seen[m.Offset()])
		}
		seen[m.Offset()] = seq
	}
	if c.Units() != 4 {
		t.Fatalf("ring has %d units, want growth to 4", c.Units())
	}
	// Nothing completed, ring at maximum: busy, without blocking.
	if _, err := c.Next(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Next with every unit in flight = %v, want ErrBusy", err)
	}
	// Complete ops with seq ≤ 2: the two units tagged 1 and 2 come back, and
	// only those, in ring order.
	tr.done.Store(3)
	got := map[int]bool{}
	for i := 0; i < 2; i++ {
		m, err := c.Next()
		if err != nil {
			t.Fatalf("after completion: %v", err)
		}
		if s := seen[m.Offset()]; s > 2 {
			t.Fatalf("unit tagged %d reused while only seq < 3 completed", s)
		}
		got[m.Offset()] = true
		seq++
		m.Tag(&tr, seq)
		seen[m.Offset()] = seq
	}
	if len(got) != 2 {
		t.Fatalf("reused units %v, want 2 distinct", got)
	}
	if _, err := c.Next(); !errors.Is(err, ErrBusy) {
		t.Fatalf("third reuse should be busy: %v", err)
	}
	// A unit handed out but neither tagged nor Done blocks the ring when the
	// cursor comes back to it (rings are strictly ordered, as in the paper).
	tr.done.Store(1 << 40)
	var pending Memory
	for i := 0; i < 4; i++ {
		m, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			pending = m
			continue
		}
		m.Done()
	}
	if _, err := c.Next(); !errors.Is(err, ErrBusy) {
		t.Fatalf("unit handed out and not yet tagged was reused: %v", err)
	}
	pending.Done()
	m, err := c.Next()
	if err != nil || m.Offset() != pending.Offset() {
		t.Fatalf("after Done the held unit comes back: offset %d (want %d), %v", m.Offset(), pending.Offset(), err)
	}
}

func TestCircularExponentialGrowth(t *testing.T) {
	_, z := newZone(t, 8<<20, 64<<10)
	c, err := NewCircular(z, CircularConfig{UnitSize: 1024, InitialUnits: 1, MaxUnits: 6, Growth: Exponential, Align: 8})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for i := 0; i < 6; i++ {
		if _, err := c.Next(); err != nil { // never tagged nor done: stays in flight
			t.Fatal(err)
		}
		sizes = append(sizes, c.Units())
	}
	if fmt.Sprint(sizes) != "[1 2 4 4 6 6]" {
		t.Errorf("ring sizes %v, want [1 2 4 4 6 6] (doubling capped at 6)", sizes)
	}
	if _, err := c.Next(); !errors.Is(err, ErrBusy) {
		t.Errorf("past MaxUnits: %v", err)
	}
}

// TestCircularPopulate: a ring with Populate has its units' pages in memory
// once they are taken from the source, at creation and at growth; without
// it, none until written.
func TestCircularPopulate(t *testing.T) {
	for _, populate := range []bool{false, true} {
		t.Run(fmt.Sprintf("populate=%v", populate), func(t *testing.T) {
			_, z := newZone(t, 8<<20, 64<<10)
			c, err := NewCircular(z, CircularConfig{UnitSize: 64 << 10, InitialUnits: 2, MaxUnits: 4, Growth: Linear, Align: 8, Populate: populate})
			if err != nil {
				t.Fatal(err)
			}
			var units []Memory
			for i := 0; i < 4; i++ { // never tagged nor done: the ring grows to 4
				m, err := c.Next()
				if err != nil {
					t.Fatal(err)
				}
				units = append(units, m)
			}
			if c.Units() != 4 {
				t.Fatalf("%d units, want 4 (grown)", c.Units())
			}
			for i, m := range units {
				want := 0
				if populate {
					want = len(m.Bytes()) / 4096
				}
				if n, err := Resident(m.Bytes()); errors.Is(err, errors.ErrUnsupported) {
					t.Skip(err)
				} else if err != nil || n != want {
					t.Errorf("unit %d: %d of %d pages in memory (%v), want %d", i, n, len(m.Bytes())/4096, err, want)
				}
			}
		})
	}
}

func TestLinearCircularSegments(t *testing.T) {
	_, z := newZone(t, 8<<20, 64<<10)
	lc, err := NewLinearCircular(z, CircularConfig{UnitSize: 256, InitialUnits: 2, MaxUnits: 2, Align: 8})
	if err != nil {
		t.Fatal(err)
	}
	var tr tracker
	var segs []Memory
	for i := 0; i < 6; i++ { // 6 × 80 B (rounded to 80) → 3 per unit, 2 units
		m, err := lc.Alloc(77)
		if err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
		if m.Offset()%8 != 0 || m.Len() != 77 {
			t.Fatalf("segment %d at %d len %d", i, m.Offset(), m.Len())
		}
		segs = append(segs, m)
	}
	for i := 1; i < 3; i++ {
		if segs[i].Offset()-segs[i-1].Offset() != 80 || segs[i].Region() != segs[0].Region() {
			t.Fatalf("segments not packed: %d then %d", segs[i-1].Offset(), segs[i].Offset())
		}
	}
	if _, err := lc.Alloc(77); !errors.Is(err, ErrBusy) {
		t.Fatalf("both units full and untagged: %v", err)
	}
	// First unit: tag two segments, leave the third untagged → not reusable.
	segs[0].Tag(&tr, 1)
	segs[1].Tag(&tr, 2)
	tr.done.Store(10)
	if _, err := lc.Alloc(77); !errors.Is(err, ErrBusy) {
		t.Fatalf("unit reused while one segment was never tagged: %v", err)
	}
	segs[2].Tag(&tr, 12) // tagged with a seq not yet completed
	if _, err := lc.Alloc(77); !errors.Is(err, ErrBusy) {
		t.Fatalf("unit reused before its last tag completed: %v", err)
	}
	tr.done.Store(13)
	m, err := lc.Alloc(77)
	if err != nil {
		t.Fatalf("unit should be reusable: %v", err)
	}
	if m.Offset() != segs[0].Offset() {
		t.Errorf("reused segment at %d, want the first unit's start %d", m.Offset(), segs[0].Offset())
	}
}

func TestGeneralFreeAndReuse(t *testing.T) {
	for _, fit := range []Fit{FirstFit, BestFit} {
		t.Run(fmt.Sprint(fit), func(t *testing.T) {
			_, z := newZone(t, 8<<20, 64<<10)
			g, err := NewGeneral(z, GeneralConfig{ChunkSize: 64 << 10, Fit: fit})
			if err != nil {
				t.Fatal(err)
			}
			a, _ := g.Alloc(1000) // class 1024
			b, _ := g.Alloc(100)  // class 128
			c, _ := g.Alloc(3000) // class 3072
			d, _ := g.Alloc(100)
			for _, m := range []Memory{a, b, c, d} {
				if m.Offset()%64 != 0 {
					t.Fatalf("block at %d not 64-aligned", m.Offset())
				}
			}
			if err := g.Free(a); err != nil {
				t.Fatal(err)
			}
			if err := g.Free(c); err != nil {
				t.Fatal(err)
			}
			if err := g.Free(a); !errors.Is(err, ErrNotAllocated) {
				t.Fatalf("double free = %v", err)
			}
			if err := g.Free(Memory{}); !errors.Is(err, ErrNotAllocated) {
				t.Fatalf("free of zero memory = %v", err)
			}
			// Holes: a (1024 B) and c (3072 B). A 900 B request goes to a
			// under both fits (first: lowest; best: smallest).
			e, _ := g.Alloc(900)
			if e.Offset() != a.Offset() {
				t.Errorf("900 B went to %d, want a's hole at %d", e.Offset(), a.Offset())
			}
			// 2000 B fits only c's hole among the holes under best fit; first
			// fit also takes it as the lowest large enough.
			f, _ := g.Alloc(2000)
			if f.Offset() != c.Offset() {
				t.Errorf("2000 B went to %d, want c's hole at %d", f.Offset(), c.Offset())
			}
			for _, m := range []Memory{b, d, e, f} {
				if err := g.Free(m); err != nil {
					t.Fatal(err)
				}
			}
			if s := g.Stats(); s.Blocks != 0 || s.InUseBytes != 0 || s.FreeRuns != 1 {
				t.Errorf("after freeing everything: %+v (want one coalesced run)", s)
			}
			big, err := g.Alloc(200 << 10) // above ChunkSize: own chunk
			if err != nil || big.Len() != 200<<10 {
				t.Fatalf("large block: %v", err)
			}
			if err := g.Free(big); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestGeneralBestFitDiffers(t *testing.T) {
	_, z := newZone(t, 8<<20, 64<<10)
	for _, fit := range []Fit{FirstFit, BestFit} {
		g, _ := NewGeneral(z, GeneralConfig{ChunkSize: 64 << 10, Fit: fit})
		big, _ := g.Alloc(4096)
		g.Alloc(64)
		small, _ := g.Alloc(128)
		g.Alloc(64)
		g.Free(big)
		g.Free(small)
		m, _ := g.Alloc(100)
		want := big.Offset()
		if fit == BestFit {
			want = small.Offset()
		}
		if m.Offset() != want {
			t.Errorf("%v: 100 B at %d, want %d", fit, m.Offset(), want)
		}
	}
}

func TestGeneralConcurrent(t *testing.T) {
	_, z := newZone(t, 16<<20, 64<<10)
	g, _ := NewGeneral(z, DefaultGeneralConfig())
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var held []Memory
			for i := 0; i < 500; i++ {
				m, err := g.Alloc(1 + (i*37+w)%5000)
				if err != nil {
					t.Error(err)
					return
				}
				b := m.Bytes()
				for j := range b {
					b[j] = byte(w)
				}
				held = append(held, m)
				if i%3 == 0 {
					h := held[0]
					for _, x := range h.Bytes() {
						if x != byte(w) {
							t.Errorf("worker %d: block overwritten by another", w)
							return
						}
					}
					g.Free(h)
					held = held[1:]
				}
			}
			for _, h := range held {
				g.Free(h)
			}
		}(w)
	}
	wg.Wait()
	if s := g.Stats(); s.Blocks != 0 {
		t.Errorf("blocks left: %+v", s)
	}
}

func TestSizeClass(t *testing.T) {
	prev := 0
	for n := 1; n < 1<<20; n += 1 + n/17 {
		c := SizeClass(n)
		if c < n || c%64 != 0 || c < prev || (n > 256 && float64(c) > 1.25*float64(n)+64) {
			t.Fatalf("SizeClass(%d) = %d", n, c)
		}
		prev = c
	}
}

func TestRegistryResolve(t *testing.T) {
	reg := NewRegistry(7)
	defer reg.Close()
	r, _ := reg.NewRegion(8192, RegionConfig{})
	loc, err := r.Locator(100, 50)
	if err != nil {
		t.Fatal(err)
	}
	b, err := reg.Resolve(loc)
	if err != nil || len(b) != 50 || &b[0] != &r.Bytes()[100] {
		t.Fatalf("Resolve = %d bytes, %v", len(b), err)
	}
	if cap(b) != 50 {
		t.Errorf("resolved slice can grow past the locator: cap %d", cap(b))
	}
	bad := func(mut func(*Locator), want error) {
		l := loc
		mut(&l)
		if _, err := reg.Resolve(l); !errors.Is(err, want) {
			t.Errorf("Resolve(%v) = %v, want %v", l, err, want)
		}
	}
	bad(func(l *Locator) { l.Key ^= 1 }, ErrBadKey)
	bad(func(l *Locator) { l.Process = 8 }, ErrWrongProcess)
	bad(func(l *Locator) { l.Region = 99 }, ErrUnknownRegion)
	bad(func(l *Locator) { l.Offset = 8192 - 10 }, ErrOutOfRange)
	bad(func(l *Locator) { l.Length = 1 << 63; l.Offset = 1 << 63 }, ErrOutOfRange)
	if strings.Contains(loc.String(), strconv.FormatUint(loc.Key, 10)) {
		t.Error("Locator.String leaks the key")
	}
	if err := reg.Release(r); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Resolve(loc); !errors.Is(err, ErrUnknownRegion) {
		t.Errorf("released region still resolves: %v", err)
	}
	if err := reg.Release(r); !errors.Is(err, ErrUnknownRegion) {
		t.Errorf("double release: %v", err)
	}
	reg.Close()
	if r, err := reg.NewRegion(4096, RegionConfig{}); !errors.Is(err, ErrClosed) {
		if r != nil {
			reg.Release(r)
		}
		t.Errorf("NewRegion on a closed registry: %v, want ErrClosed", err)
	}
}

func TestLocatorRoundTrip(t *testing.T) {
	l := Locator{RegionRef: RegionRef{Process: 3, Region: 9}, Offset: 1 << 40, Length: 4096, Key: 0xdeadbeefcafef00d}
	b, _ := l.MarshalBinary()
	if len(b) != LocatorSize {
		t.Fatalf("encoded %d bytes", len(b))
	}
	// Pin the little-endian layout of docs/wire.md.
	if b[0] != 3 || b[4] != 9 || b[8+5] != 1 || b[24] != 0x0d || b[31] != 0xde {
		t.Fatalf("layout changed: % x", b)
	}
	var got Locator
	if err := got.UnmarshalBinary(b); err != nil || got != l {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if err := got.UnmarshalBinary(b[:31]); !errors.Is(err, ErrBadLocator) {
		t.Errorf("short input: %v", err)
	}
	sub, err := l.Sub(10, 20)
	if err != nil || sub.Offset != l.Offset+10 || sub.Length != 20 {
		t.Errorf("Sub: %+v %v", sub, err)
	}
	if _, err := l.Sub(4000, 200); !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), "[4000,+200) of a 4096-byte locator") {
		t.Errorf("Sub out of range: %v", err)
	}
	// A length whose sum with the offset wraps past 2^64 is out of range
	// too, as is an offset past the end with a length of 0.
	for _, r := range [][2]uint64{{10, math.MaxUint64 - 5}, {4097, 0}, {4096, 1}} {
		if s, err := l.Sub(r[0], r[1]); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Sub(%d, %d) = %+v, %v; want ErrOutOfRange", r[0], r[1], s, err)
		}
	}
	if s, err := l.Sub(4096, 0); err != nil || s.Length != 0 {
		t.Errorf("Sub(4096, 0), the empty range at the end: %+v, %v", s, err)
	}
}

// TestHotPathsInline checks that the calls a one-sided write makes per
// record are inlined: Locator.Sub's comment claimed it was while its cost
// was over the inliner's budget, and inlining it measured +13 % on the raw
// benchmark at 8 B (docs/benchmarks.md).
func TestHotPathsInline(t *testing.T) {
	out, err := exec.Command("go", "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, fn := range []string{"Locator.Sub", "Memory.Bytes", "Memory.Len", "Memory.Done", "(*unit).handout"} {
		if !regexp.MustCompile(`can inline ` + regexp.QuoteMeta(fn) + `(\s|$)`).Match(out) {
			t.Errorf("%s is no longer inlined", fn)
		}
	}
}

func FuzzLocatorDecode(f *testing.F) {
	good, _ := Locator{RegionRef: RegionRef{Process: 1, Region: 2}, Offset: 3, Length: 4, Key: 5}.MarshalBinary()
	f.Add(good)
	f.Add(make([]byte, LocatorSize))
	f.Add([]byte{1, 2, 3})
	f.Add(bytes.Repeat([]byte{0xff}, LocatorSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var l Locator
		if err := l.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrBadLocator) {
				t.Fatalf("error does not wrap ErrBadLocator: %v", err)
			}
			return
		}
		if len(b) != LocatorSize || l.Region == 0 || l.Offset+l.Length < l.Offset {
			t.Fatalf("accepted invalid locator %+v from %d bytes", l, len(b))
		}
		again, _ := l.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs: % x vs % x", again, b)
		}
	})
}

// TestHandoutSliceKeepsItsSlot: a slice of a segment settles the segment
// (Memory packs the slot beside the length), and a settled slice of one
// segment does not settle its neighbour.
// oneUnitRing is a linear-circular allocator of a single 256-byte unit,
// so that every reuse is of that unit.
func oneUnitRing(t *testing.T) *LinearCircular {
	t.Helper()
	_, z := newZone(t, 8<<20, 64<<10)
	lc, err := NewLinearCircular(z, CircularConfig{UnitSize: 256, InitialUnits: 1, MaxUnits: 1, Align: 8})
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

func TestHandoutSliceKeepsItsSlot(t *testing.T) {
	lc := oneUnitRing(t)
	a, _ := lc.Alloc(128)
	b, _ := lc.Alloc(128)
	sa, err := a.Slice(8, 16)
	if err != nil || sa.Len() != 16 || sa.Offset() != a.Offset()+8 {
		t.Fatalf("Slice = %d bytes at %d, %v", sa.Len(), sa.Offset(), err)
	}
	sa.Done()
	sa.Done() // twice is harmless
	if a.Reusable() {
		t.Fatal("unit reusable while segment b was neither tagged nor done")
	}
	sb, _ := b.Slice(0, 128)
	sb.Done()
	if !a.Reusable() {
		t.Fatal("unit not reusable after both segments were settled through slices")
	}
	if m, err := lc.Alloc(8); err != nil || m.Offset() != a.Offset() {
		t.Fatalf("reuse: %v at %d, want %d", err, m.Offset(), a.Offset())
	}
}

// TestUnitWaitsForItsLatestTag: segments of one unit tagged out of order
// (a later segment's operation numbered before an earlier one's) keep the
// unit until the highest of their operations has completed, whatever the
// order of the tags.
func TestUnitWaitsForItsLatestTag(t *testing.T) {
	lc := oneUnitRing(t)
	var tr tracker
	a, _ := lc.Alloc(128)
	b, _ := lc.Alloc(128)
	b.Tag(&tr, 9)
	a.Tag(&tr, 4) // older: must not lower the unit's tag
	tr.done.Store(5)
	if a.Reusable() {
		t.Fatal("unit reusable once operation 4 completed, though a segment of it waits for operation 9")
	}
	if _, err := lc.Alloc(8); !errors.Is(err, ErrBusy) {
		t.Fatalf("Alloc while operation 9 is in flight = %v, want ErrBusy", err)
	}
	tr.done.Store(10)
	if m, err := lc.Alloc(8); err != nil || m.Offset() != a.Offset() {
		t.Fatalf("after operation 9 completed: %v at %d, want the unit back at %d", err, m.Offset(), a.Offset())
	}
}

// TestUnitRecyclesIndefinitely: a ring of one unit reused a thousand times
// hands out segments each time; a unit's handout count restarts at each
// reuse, or its record of settled handouts would run out and the unit
// would never come back.
func TestUnitRecyclesIndefinitely(t *testing.T) {
	lc := oneUnitRing(t)
	var tr tracker
	tr.done.Store(1 << 40)
	for round := 0; round < 1000; round++ {
		for i := 0; i < 4; i++ { // 4 × 64 B: the whole unit
			m, err := lc.Alloc(64)
			if err != nil {
				t.Fatalf("round %d, segment %d: %v", round, i, err)
			}
			if i%2 == 0 {
				m.Done()
			} else {
				m.Tag(&tr, uint64(round))
			}
		}
	}
}

// TestCircularConfigLimits: the documented bounds of UnitSize.
func TestCircularConfigLimits(t *testing.T) {
	for _, c := range []CircularConfig{
		{UnitSize: 1 << 40, InitialUnits: 1, MaxUnits: 1, Align: 8},
		{UnitSize: 1 << 24, InitialUnits: 1, MaxUnits: 1, Align: 1},
	} {
		if err := c.VerifyConfig(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("UnitSize %d Align %d accepted: %v", c.UnitSize, c.Align, err)
		}
	}
	ok := CircularConfig{UnitSize: 1<<24 - 1, InitialUnits: 1, MaxUnits: 1, Align: 1}
	if err := ok.VerifyConfig(); err != nil {
		t.Errorf("largest unit refused: %v", err)
	}
}

// TestGeneralConfigVerify: every field's bound, and NewGeneral applies
// them.
func TestGeneralConfigVerify(t *testing.T) {
	if err := DefaultGeneralConfig().VerifyConfig(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []GeneralConfig{
		{},                                  // no chunk size
		{ChunkSize: 100},                    // not a multiple of 64
		{ChunkSize: 4096, Fit: BestFit + 1}, // no such fit
		{ChunkSize: 4096, MaxBytes: -1},
	} {
		if err := c.VerifyConfig(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want ErrBadConfig", c, err)
		}
		if _, err := NewGeneral(nil, c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("NewGeneral(%+v): %v, want ErrBadConfig", c, err)
		}
	}
}

func TestRegionConfigVerify(t *testing.T) {
	if err := DefaultRegionConfig().VerifyConfig(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []RegionConfig{{Ladder: []Rung{numRungs}}, {Ladder: []Rung{-1}}, {Bind: true, Node: -1}} {
		if err := c.VerifyConfig(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	g := NewRegistry(0)
	defer g.Close()
	if _, err := g.NewRegion(4096, RegionConfig{Ladder: []Rung{numRungs}}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("NewRegion with a bad ladder: %v", err)
	}
}

// TestOnRelease: a hook sees every released region's ID while its memory is
// still mapped and its locators no longer resolve; removed, it sees no more.
func TestOnRelease(t *testing.T) {
	g := NewRegistry(0)
	defer g.Close()
	var seen []uint32
	remove := g.OnRelease(func(id uint32) {
		r, _ := g.Lookup(id)
		if r != nil {
			t.Errorf("region %d still resolves in its release hook", id)
		}
		seen = append(seen, id)
	})
	a, err := g.NewRegion(4096, RegionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.NewRegion(4096, RegionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mem := a.Bytes()
	g.OnRelease(func(id uint32) {
		if id == a.ID() {
			mem[0] = 1 // still mapped: this would fault after the unmap
		}
	})
	if err := g.Release(a); err != nil {
		t.Fatal(err)
	}
	remove()
	if err := g.Release(b); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != a.ID() {
		t.Fatalf("hook saw %v, want [%d]", seen, a.ID())
	}
}

// TestRegionSpan: Span makes Resolve's checks of a key and a range.
func TestRegionSpan(t *testing.T) {
	reg := NewRegistry(7)
	defer reg.Close()
	r, _ := reg.NewRegion(8192, RegionConfig{})
	size := uint64(r.Size())
	if b, ok := r.Span(r.Key(), 100, 50); !ok || len(b) != 50 || cap(b) != 50 || &b[0] != &r.Bytes()[100] {
		t.Fatalf("Span = %d bytes (cap %d), %v", len(b), cap(b), ok)
	}
	if b, ok := r.Span(r.Key(), size, 0); !ok || len(b) != 0 {
		t.Fatalf("empty span at the end: %v", ok)
	}
	for _, c := range []struct {
		name        string
		key, off, n uint64
	}{
		{"wrong key", r.Key() ^ 1, 0, 8},
		{"past the end", r.Key(), size - 4, 8},
		{"offset past the end", r.Key(), size + 1, 0},
		{"wrapping length", r.Key(), 8, ^uint64(0)},
	} {
		if _, ok := r.Span(c.key, c.off, c.n); ok {
			t.Errorf("%s: accepted", c.name)
		}
	}
}
