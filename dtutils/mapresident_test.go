package dtutils

import (
	"context"
	"runtime"
	"testing"

	"github.com/seriema-go/seriema/alloc"
	"golang.org/x/sys/unix"
)

// firstWrite makes a populated region of size bytes in p's process, uses
// it from a once (an 8-byte signaled write: the shm transport maps the
// region in then), then writes all of it from a's populated source with
// one signaled write and returns the minor page faults the writing thread
// took in that second write. (Pages mapped in by MADV_POPULATE_WRITE count
// as the thread's faults too, so the first use is left out.)
func firstWrite(t testing.TB, a, p side, srcReg *alloc.Region, size int) int64 {
	t.Helper()
	dst, err := p.proc.Registry().NewRegion(size, alloc.RegionConfig{Name: "first-write", Populate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.proc.Registry().Release(dst)
	write := func(n int) {
		src, err := srcReg.Memory(0, n)
		if err != nil {
			t.Fatal(err)
		}
		loc, err := dst.Locator(0, n)
		if err != nil {
			t.Fatal(err)
		}
		if c := post(t, a.qp, WorkRequest{Op: OpWrite, Local: src, Remote: loc}); c.Status != StatusSuccess {
			t.Fatalf("write: %v", c.Status)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	write(8)
	var before, after unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &before)
	write(size)
	unix.Getrusage(unix.RUSAGE_THREAD, &after)
	if b := dst.Bytes(); b[0] != 1 || b[size-1] != 1 {
		t.Fatalf("the region holds %d…%d after the write, want 1…1", b[0], b[size-1])
	}
	return after.Minflt - before.Minflt
}

// TestSHMMapResident: one-sided writes into a peer's region that its owner
// populated (a registered buffer, as a shuffle endpoint's) take no page
// fault a page in the writer, who maps the region's resident pages in when
// it first uses it; with SHMConfig.MapResident negative they take one a
// page, which is what this test would see without the mapping.
func TestSHMMapResident(t *testing.T) {
	const size = 1 << 20 // 256 pages
	for _, c := range []struct {
		name  string
		limit int64
		ok    func(int64) bool
	}{
		{"default", 0, func(n int64) bool { return n < 32 }},
		{"off", -1, func(n int64) bool { return n >= 200 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, p := connectPair(t, shmPair(SHMConfig{MapResident: c.limit}), nil)
			srcReg, err := a.proc.Registry().NewRegion(size, alloc.RegionConfig{Name: "src", Populate: true})
			if err != nil {
				t.Fatal(err)
			}
			for i := range srcReg.Bytes() {
				srcReg.Bytes()[i] = 1
			}
			firstWrite(t, a, p, srcReg, 4096) // the peer's receive side mapped, the thread warm
			if n := firstWrite(t, a, p, srcReg, size); !c.ok(n) {
				t.Errorf("writing 256 pages of a fresh populated region took %d page faults", n)
			}
		})
	}
}

// BenchmarkSHMFirstWrite: a 2 MiB write into a peer's freshly made,
// populated region, its first use (mapped here on the way), with and
// without SHMConfig.MapResident; region creation is outside the timer.
func BenchmarkSHMFirstWrite(b *testing.B) {
	const size = 2 << 20
	for _, c := range []struct {
		name  string
		limit int64
	}{{"mapresident", 0}, {"faulting", -1}} {
		b.Run(c.name, func(b *testing.B) {
			a, p := connectPair(b, shmPair(SHMConfig{MapResident: c.limit}), nil)
			srcReg, err := a.proc.Registry().NewRegion(size, alloc.RegionConfig{Name: "src", Populate: true})
			if err != nil {
				b.Fatal(err)
			}
			src, _ := srcReg.Memory(0, size)
			var cs [1]Completion
			b.ReportAllocs()
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dst, err := p.proc.Registry().NewRegion(size, alloc.RegionConfig{Name: "first-write", Populate: true})
				if err != nil {
					b.Fatal(err)
				}
				loc, _ := dst.Locator(0, size)
				b.StartTimer()
				if err := a.qp.Post(WorkRequest{Op: OpWrite, Signaled: true, Local: src, Remote: loc}); err != nil {
					b.Fatal(err)
				}
				if _, err := a.qp.CQ().Wait(context.Background(), cs[:]); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				p.proc.Registry().Release(dst)
				b.StartTimer()
			}
		})
	}
}
