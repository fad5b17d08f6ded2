package alloc

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// Registry owns the registered regions of one process: it hands out region
// IDs and keys and resolves locators (checking process, key and bounds) for
// the transports that serve remote operations. One per process; nothing in
// this package is global.
type Registry struct {
	process uint32
	nextID  atomic.Uint32
	regions *xsync.MapOf[uint32, *Region]
	closed  atomic.Bool
	byRung  [numRungs]struct{ regions, bytes atomic.Int64 }

	hookMu   sync.Mutex
	hooks    map[int]func(id uint32)
	nextHook int
}

// NewRegistry returns an empty registry for the process with the given rank.
func NewRegistry(process uint32) *Registry {
	return &Registry{process: process, regions: xsync.NewMapOf[uint32, *Region]()}
}

// Process returns the process rank the registry was created for.
func (g *Registry) Process() uint32 { return g.process }

// NewRegion creates and registers a region of at least size bytes.
func (g *Registry) NewRegion(size int, cfg RegionConfig) (*Region, error) {
	if g.closed.Load() {
		return nil, ErrClosed
	}
	if size <= 0 {
		return nil, fmt.Errorf("%w: region of %d bytes", ErrInvalidSize, size)
	}
	if uint64(size) > 1<<46 {
		return nil, fmt.Errorf("%w: region of %d bytes", ErrTooLarge, size)
	}
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	fd, mem, rung, bound, err := newMapping(size, cfg)
	if err != nil {
		return nil, err
	}
	var kb [8]byte
	if _, err := rand.Read(kb[:]); err != nil {
		discardMapping(fd, mem)
		return nil, fmt.Errorf("alloc: region key: %w", err)
	}
	id := g.nextID.Add(1)
	if id == 0 {
		discardMapping(fd, mem)
		return nil, fmt.Errorf("%w: region IDs wrapped around", ErrExhausted)
	}
	r := &Region{id: id, key: binary.LittleEndian.Uint64(kb[:]), reg: g, fd: fd, mem: mem, size: size, rung: rung, bound: bound}
	g.regions.Store(id, r)
	g.byRung[rung].regions.Add(1)
	g.byRung[rung].bytes.Add(int64(len(mem)))
	return r, nil
}

// Lookup returns the region with the given ID.
func (g *Registry) Lookup(id uint32) (*Region, bool) { return g.regions.Load(id) }

// Resolve returns the bytes a locator names after checking that it belongs to
// this process, names a live region, carries that region's key and stays
// inside it. Transports call it on every remote operation.
func (g *Registry) Resolve(l Locator) ([]byte, error) {
	if l.Process != g.process {
		return nil, fmt.Errorf("%w: %v resolved by process %d", ErrWrongProcess, l, g.process)
	}
	r, ok := g.regions.Load(l.Region)
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrUnknownRegion, l)
	}
	if l.Key != r.key {
		return nil, fmt.Errorf("%w: %v", ErrBadKey, l)
	}
	if !checkRange(l.Offset, l.Length, uint64(len(r.mem))) {
		return nil, fmt.Errorf("%w: %v in a %d-byte region", ErrOutOfRange, l, len(r.mem))
	}
	return r.mem[l.Offset : l.Offset+l.Length : l.Offset+l.Length], nil
}

// OnRelease calls fn with a region's ID whenever a region is released,
// after its locators stop resolving and before its memory is unmapped: a
// transport that registered the memory with a NIC (ofi's one-sided path)
// deregisters it there. The returned function removes fn.
func (g *Registry) OnRelease(fn func(id uint32)) (remove func()) {
	g.hookMu.Lock()
	defer g.hookMu.Unlock()
	if g.hooks == nil {
		g.hooks = make(map[int]func(uint32))
	}
	k := g.nextHook
	g.nextHook++
	g.hooks[k] = fn
	return func() {
		g.hookMu.Lock()
		delete(g.hooks, k)
		g.hookMu.Unlock()
	}
}

// Release unregisters and unmaps a region. Locators of it stop resolving
// before the memory goes away.
func (g *Registry) Release(r *Region) error {
	if _, ok := g.regions.LoadAndDelete(r.id); !ok {
		return fmt.Errorf("%w: region %d", ErrUnknownRegion, r.id)
	}
	g.hookMu.Lock()
	for _, fn := range g.hooks {
		fn(r.id)
	}
	g.hookMu.Unlock()
	g.byRung[r.rung].regions.Add(-1)
	g.byRung[r.rung].bytes.Add(-int64(len(r.mem)))
	return r.close()
}

// Close releases every region. The registry creates no regions afterwards.
func (g *Registry) Close() error {
	g.closed.Store(true)
	var first error
	g.regions.Range(func(_ uint32, r *Region) bool {
		if err := g.Release(r); err != nil && first == nil {
			first = err
		}
		return true
	})
	return first
}

// RungStats counts the live regions created on one rung of the ladder.
type RungStats struct {
	Rung    Rung
	Regions int64
	Bytes   int64
}

// Stats returns, for every rung, how many live regions and mapped bytes it
// holds: the way to see whether hugepages were really obtained.
func (g *Registry) Stats() []RungStats {
	s := make([]RungStats, numRungs)
	for i := range s {
		s[i] = RungStats{Rung: Rung(i), Regions: g.byRung[i].regions.Load(), Bytes: g.byRung[i].bytes.Load()}
	}
	return s
}
