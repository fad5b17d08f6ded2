package alloc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/seriema-go/seriema/numa"
	"golang.org/x/sys/unix"
)

// Rung is one step of the page-size ladder a region is created with.
type Rung int

const (
	// Huge1G: hugetlb memfd with 1 GiB pages (needs pages reserved in
	// /sys/kernel/mm/hugepages/hugepages-1048576kB).
	Huge1G Rung = iota
	// Huge2M: hugetlb memfd with 2 MiB pages (vm.nr_hugepages).
	Huge2M
	// THP: ordinary memfd with MADV_HUGEPAGE, used only when the kernel's
	// shmem THP setting lets madvise have an effect.
	THP
	// Small: ordinary memfd, 4 KiB pages.
	Small
	numRungs
)

// DefaultLadder is tried in order when RegionConfig.Ladder is nil.
var DefaultLadder = []Rung{Huge1G, Huge2M, THP, Small}

// PageSize returns the rung's page size in bytes (2 MiB for THP, which is the
// size the kernel tries to use; it may still fall back page by page).
func (r Rung) PageSize() int {
	switch r {
	case Huge1G:
		return 1 << 30
	case Huge2M, THP:
		return 2 << 20
	}
	return 4 << 10
}

func (r Rung) String() string {
	switch r {
	case Huge1G:
		return "hugetlb-1GiB"
	case Huge2M:
		return "hugetlb-2MiB"
	case THP:
		return "thp"
	case Small:
		return "4KiB"
	}
	return fmt.Sprintf("Rung(%d)", int(r))
}

// RegionConfig says how to create a region. The zero value is usable: default
// ladder, no NUMA binding.
type RegionConfig struct {
	// Name shows in /proc/PID/maps as "memfd:seriema-NAME"; for debugging only.
	Name string
	// Ladder lists the rungs to try, in order; nil means DefaultLadder. A
	// hugetlb rung is skipped for regions smaller than one of its pages, so
	// small regions never pin a whole huge page.
	Ladder []Rung
	// Bind asks for the region's pages to come from NUMA node Node (mbind,
	// MPOL_BIND). On kernels without NUMA the request is ignored and
	// Region.Bound reports false.
	Bind bool
	// Node is the NUMA node used when Bind is set.
	Node int
	// Populate faults every page of the region in when it is created, as
	// an RDMA registration pins them, so that its first use pays no page
	// faults (about 12 µs a 4 KiB page on a VM, more than the copy into
	// it). For buffers sized to what they will hold, made before the work
	// that uses them; regions filled lazily (a zone's superchunks) should
	// leave it off. Default false.
	Populate bool
}

// DefaultRegionConfig returns the defaults: the default ladder, no binding.
func DefaultRegionConfig() RegionConfig {
	return RegionConfig{Ladder: append([]Rung(nil), DefaultLadder...)}
}

// VerifyConfig checks c: known rungs, a node number when Bind is set.
func (c RegionConfig) VerifyConfig() error {
	for _, r := range c.Ladder {
		if r < 0 || r >= numRungs {
			return fmt.Errorf("%w: unknown rung %d in Ladder", ErrBadConfig, int(r))
		}
	}
	if c.Bind && c.Node < 0 {
		return fmt.Errorf("%w: Node %d", ErrBadConfig, c.Node)
	}
	return nil
}

// Region is a shareable mapping of a memfd: the unit of registration. Peers
// on the same machine map it through its file descriptor (passed over a unix
// socket or to a child process); peers elsewhere reach it through a Locator
// checked by the transport. Create regions with Registry.NewRegion.
type Region struct {
	id    uint32
	key   uint64
	reg   *Registry
	fd    int
	mem   []byte
	size  int // requested size; len(mem) may be larger (rounded to the page)
	rung  Rung
	bound bool

	closeOnce sync.Once
}

// ID returns the region's ID, unique within its registry (never 0).
func (r *Region) ID() uint32 { return r.id }

// Key returns the region's random 64-bit access key.
func (r *Region) Key() uint64 { return r.key }

// FD returns the memfd backing the region; it stays owned by the region,
// which closes it. To hand it to another owner (an os.File, a child's
// ExtraFiles), duplicate it first: an os.File closes its descriptor when
// it is collected.
func (r *Region) FD() int { return r.fd }

// Bytes returns the whole mapping; its length is the requested size rounded
// up to the rung's page size.
func (r *Region) Bytes() []byte { return r.mem }

// Size returns the mapped size in bytes.
func (r *Region) Size() int { return len(r.mem) }

// Rung returns the rung of the ladder the kernel granted.
func (r *Region) Rung() Rung { return r.rung }

// Bound reports whether the region is bound to a NUMA node.
func (r *Region) Bound() bool { return r.bound }

// Span returns [off, off+n) of the region if key is the region's key and
// the range lies inside it: the checks Registry.Resolve makes of a
// locator, for a caller that holds the region already (a transport that
// caches it).
func (r *Region) Span(key, off, n uint64) ([]byte, bool) {
	if key != r.key || !checkRange(off, n, uint64(len(r.mem))) {
		return nil, false
	}
	return r.mem[off : off+n : off+n], true
}

// Locator returns the locator of [off, off+n) of the region.
func (r *Region) Locator(off, n int) (Locator, error) {
	if off < 0 || n < 0 || !checkRange(uint64(off), uint64(n), uint64(len(r.mem))) {
		return Locator{}, fmt.Errorf("%w: [%d,+%d) of region %d (%d bytes)", ErrOutOfRange, off, n, r.id, len(r.mem))
	}
	return Locator{RegionRef: RegionRef{Process: r.reg.process, Region: r.id}, Offset: uint64(off), Length: uint64(n), Key: r.key}, nil
}

// Memory returns a view of [off, off+n) of the region with no recycling state.
func (r *Region) Memory(off, n int) (Memory, error) {
	if off < 0 || n < 0 || !checkRange(uint64(off), uint64(n), uint64(len(r.mem))) {
		return Memory{}, fmt.Errorf("%w: [%d,+%d) of region %d (%d bytes)", ErrOutOfRange, off, n, r.id, len(r.mem))
	}
	return Memory{region: r, off: off, n: uint64(n)}, nil
}

// close unmaps and closes the memfd; further use of Bytes is invalid.
func (r *Region) close() error {
	var err error
	r.closeOnce.Do(func() {
		if e := unix.Munmap(r.mem); e != nil {
			err = fmt.Errorf("alloc: munmap region %d: %w", r.id, e)
		}
		if e := unix.Close(r.fd); e != nil && err == nil {
			err = fmt.Errorf("alloc: close region %d: %w", r.id, e)
		}
	})
	return err
}

// newMapping walks the ladder and returns a mapped memfd.
func newMapping(size int, cfg RegionConfig) (fd int, mem []byte, rung Rung, bound bool, err error) {
	ladder := cfg.Ladder
	if ladder == nil {
		ladder = DefaultLadder
	}
	name := "seriema"
	if cfg.Name != "" {
		name += "-" + cfg.Name
	}
	var tried []string
	for _, r := range ladder {
		if r < 0 || r >= numRungs {
			return -1, nil, 0, false, fmt.Errorf("%w: unknown rung %d in ladder", ErrBadConfig, r)
		}
		page := r.PageSize()
		if (r == Huge1G || r == Huge2M || r == THP) && size < page {
			continue
		}
		if r == THP && !shmemTHPAdvisable() {
			tried = append(tried, "thp: kernel shmem_enabled forbids madvise")
			continue
		}
		flags := unix.MFD_CLOEXEC
		switch r {
		case Huge1G:
			flags |= unix.MFD_HUGETLB | unix.MFD_HUGE_1GB
		case Huge2M:
			flags |= unix.MFD_HUGETLB | unix.MFD_HUGE_2MB
		}
		mapped := (size + page - 1) / page * page
		fd, mem, err := mapMemfd(name, flags, mapped)
		if err != nil {
			tried = append(tried, r.String()+": "+err.Error())
			continue
		}
		if r == THP {
			if err := unix.Madvise(mem, unix.MADV_HUGEPAGE); err != nil {
				unix.Munmap(mem)
				unix.Close(fd)
				tried = append(tried, "thp: "+err.Error())
				continue
			}
		}
		if cfg.Bind {
			switch err := numa.Bind(mem, cfg.Node, numa.Strict); {
			case err == nil:
				bound = true
			case errors.Is(err, numa.ErrUnsupported):
			default:
				unix.Munmap(mem)
				unix.Close(fd)
				return -1, nil, 0, false, fmt.Errorf("alloc: binding region to node %d: %w", cfg.Node, err)
			}
		}
		if cfg.Populate {
			if err := populate(mem, r.PageSize()); err != nil {
				unix.Munmap(mem)
				unix.Close(fd)
				return -1, nil, 0, false, fmt.Errorf("alloc: populating a region of %d bytes: %w", len(mem), err)
			}
		}
		return fd, mem, r, bound, nil
	}
	return -1, nil, 0, false, fmt.Errorf("%w: %d bytes: no rung of the ladder worked (%s)", ErrNoMemory, size, strings.Join(tried, "; "))
}

// populate faults mem's pages in for writing: MADV_POPULATE_WRITE (Linux
// 5.14), else a write to each page (the region is fresh, so its bytes are
// zero and stay so).
func populate(mem []byte, page int) error {
	err := Populate(mem)
	if err == nil || !errors.Is(err, errors.ErrUnsupported) {
		return err // nil; or ENOMEM, EFAULT: the pages are not there to be had
	}
	touchPages(mem, page)
	return nil
}

// touchPages writes a zero into each page of mem, which faults it in.
func touchPages(mem []byte, page int) {
	for i := 0; i < len(mem); i += page {
		mem[i] = 0
	}
}

func mapMemfd(name string, flags, size int) (int, []byte, error) {
	fd, err := unix.MemfdCreate(name, flags)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("ftruncate: %w", err)
	}
	// hugetlbfs reserves the pages here, so a shortage shows as ENOMEM now
	// rather than as SIGBUS on first touch.
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("mmap: %w", err)
	}
	return fd, mem, nil
}

// shmemTHPAdvisable reports whether MADV_HUGEPAGE on shared memory can give
// huge pages (/sys/kernel/mm/transparent_hugepage/shmem_enabled is one of
// always, within_size, advise or force).
func shmemTHPAdvisable() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
	if err != nil {
		return false
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return false
	}
	switch s[i+1 : j] {
	case "always", "within_size", "advise", "force":
		return true
	}
	return false
}

// MapShared maps size bytes of a region's memfd received from another
// process (SCM_RIGHTS or an inherited descriptor). The caller owns fd and the
// mapping (release with Unmap).
func MapShared(fd, size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: map %d bytes", ErrInvalidSize, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping fd %d (%d bytes): %v", ErrNoMemory, fd, size, err)
	}
	return mem, nil
}

// Unmap releases a mapping made by MapShared.
func Unmap(mem []byte) error {
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("alloc: munmap: %w", err)
	}
	return nil
}

// Resident returns how many of the 4 KiB pages spanning b are in memory
// (mincore(2)); for a region's memory, whether its pages were faulted in
// (Populate) or not yet touched. A diagnostic, like KernelPageSize.
func Resident(b []byte) (int, error) {
	vec, _, err := residency(b)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n, nil
}

// residency returns mincore(2)'s vector for the 4 KiB pages spanning b
// (bit 0: in memory) and b's offset into its first page.
func residency(b []byte) ([]byte, int, error) {
	if len(b) == 0 {
		return nil, 0, fmt.Errorf("%w: empty mapping", ErrInvalidSize)
	}
	start := uintptr(unsafe.Pointer(&b[0]))
	off := start % 4096
	vec := make([]byte, (int(off)+len(b)+4095)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, start-off, off+uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return nil, 0, fmt.Errorf("alloc: mincore: %w", e)
	}
	return vec, int(off), nil
}

// Populate faults in, for writing, the 4 KiB pages spanning mem, in one
// madvise (MADV_POPULATE_WRITE, Linux 5.14), without changing its bytes:
// memory about to be written, here or — for a shared region — by a peer
// that maps it later (MapResident then finds its pages resident), is then
// written without a fault a page. Before Linux 5.14 it faults nothing and
// returns an error wrapping errors.ErrUnsupported, which callers may
// ignore: the pages fault in on first touch as before.
func Populate(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	start := uintptr(unsafe.Pointer(&mem[0]))
	off := start % 4096
	// The raw call, as residency's mincore: the span starts at mem's page,
	// which may lie before mem itself.
	_, _, e := unix.Syscall(unix.SYS_MADVISE, start-off, (off+uintptr(len(mem))+4095)&^4095, unix.MADV_POPULATE_WRITE)
	runtime.KeepAlive(mem)
	if e != 0 {
		var err error = e
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("alloc: populating %d bytes: %w (%w)", len(mem), errors.ErrUnsupported, err)
		}
		return fmt.Errorf("alloc: populating %d bytes: %w", len(mem), err)
	}
	return nil
}

// MapResident maps into this process's page tables, for writing, the pages
// of mem (a shared mapping, MapShared) that are already in memory because
// another process faulted them in, up to limit bytes, lowest first, and
// returns how many bytes it mapped. Pages not in memory stay so: nothing
// is allocated. It is for a peer's region about to be written or read
// here — a buffer its owner made with RegionConfig.Populate, a ring in
// use — whose pages would otherwise each fault on first touch in this
// process too (about 10 µs a 4 KiB page on a VM, against well under 1 µs
// a page in one madvise). Needs MADV_POPULATE_WRITE (Linux 5.14); on older
// kernels it maps nothing and returns the error, which callers may ignore:
// the pages then fault in on first touch as before.
func MapResident(mem []byte, limit int) (int, error) {
	if limit <= 0 || len(mem) == 0 {
		return 0, nil
	}
	vec, off, err := residency(mem)
	if err != nil {
		return 0, err
	}
	if off != 0 {
		return 0, fmt.Errorf("%w: mapping at offset %d into a page", ErrInvalidSize, off)
	}
	done := 0
	for i := 0; i < len(vec) && done < limit; {
		if vec[i]&1 == 0 {
			i++
			continue
		}
		j := i
		for j < len(vec) && vec[j]&1 != 0 && done+(j-i+1)*4096 <= limit {
			j++
		}
		if j == i {
			break // the next page would pass the limit
		}
		run := mem[i*4096 : min(j*4096, len(mem))]
		if err := unix.Madvise(run, unix.MADV_POPULATE_WRITE); err != nil {
			return done, fmt.Errorf("alloc: mapping resident pages: %w", err)
		}
		done += len(run)
		i = j
	}
	return done, nil
}

// KernelPageSize reads /proc/self/smaps and returns the page size the kernel
// uses for the mapping holding b, and how many bytes of it are mapped with
// PMD-sized transparent huge pages. It lets tests and diagnostics check that
// the reported rung is what the kernel really gave.
func KernelPageSize(b []byte) (pageSize int, thpBytes int, err error) {
	if len(b) == 0 {
		return 0, 0, fmt.Errorf("%w: empty mapping", ErrInvalidSize)
	}
	addr := uint64(uintptr(unsafe.Pointer(&b[0])))
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, 0, fmt.Errorf("alloc: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	inside := false
	for sc.Scan() {
		line := sc.Text()
		if lo, rest, ok := strings.Cut(line, "-"); ok && !strings.Contains(lo, ":") && !strings.Contains(lo, " ") {
			hi, _, _ := strings.Cut(rest, " ")
			a, e1 := strconv.ParseUint(lo, 16, 64)
			z, e2 := strconv.ParseUint(hi, 16, 64)
			if e1 == nil && e2 == nil {
				if inside {
					break
				}
				inside = addr >= a && addr < z
				continue
			}
		}
		if !inside {
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.Atoi(fields[0])
		switch key {
		case "KernelPageSize":
			pageSize = n << 10
		case "ShmemPmdMapped", "FilePmdMapped", "AnonHugePages":
			thpBytes += n << 10
		}
	}
	if pageSize == 0 {
		return 0, 0, fmt.Errorf("alloc: mapping at %#x not found in /proc/self/smaps", addr)
	}
	return pageSize, thpBytes, sc.Err()
}

// discardMapping undoes mapMemfd on an error path.
func discardMapping(fd int, mem []byte) {
	unix.Munmap(mem)
	unix.Close(fd)
}
