package alloc

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// ZoneConfig configures a ZoneAllocator. Every field has a documented default
// (DefaultZoneConfig); VerifyConfig says what is out of range.
type ZoneConfig struct {
	// SuperchunkSize is the size of the regions the zone maps, lazily, one at
	// a time. Default 1 GiB (the paper's superpage); must be a multiple of
	// ChunkSize.
	SuperchunkSize int
	// ChunkSize is the allocation granule. Default 2 MiB; must be a power of
	// two and at least 4 KiB.
	ChunkSize int
	// MaxBytes bounds the bytes the zone hands out in total; 0 means no bound
	// beyond what the kernel grants.
	MaxBytes int64
	// Region configures each superchunk (ladder, NUMA binding). Set
	// Region.Bind and Region.Node to make the zone NUMA-local.
	Region RegionConfig
}

// DefaultZoneConfig returns 1 GiB superchunks cut into 2 MiB chunks, no bound,
// the default ladder and no binding.
func DefaultZoneConfig() ZoneConfig {
	return ZoneConfig{SuperchunkSize: 1 << 30, ChunkSize: 2 << 20}
}

// VerifyConfig checks c.
func (c ZoneConfig) VerifyConfig() error {
	if c.ChunkSize < 4<<10 || c.ChunkSize&(c.ChunkSize-1) != 0 {
		return fmt.Errorf("%w: ChunkSize %d must be a power of two ≥ 4096", ErrBadConfig, c.ChunkSize)
	}
	if c.SuperchunkSize < c.ChunkSize || c.SuperchunkSize%c.ChunkSize != 0 {
		return fmt.Errorf("%w: SuperchunkSize %d must be a positive multiple of ChunkSize %d", ErrBadConfig, c.SuperchunkSize, c.ChunkSize)
	}
	if c.MaxBytes < 0 {
		return fmt.Errorf("%w: MaxBytes %d is negative", ErrBadConfig, c.MaxBytes)
	}
	return nil
}

// ZoneAllocator is the paper's RDMAAllocator: one per NUMA zone, it maps
// superchunks lazily and hands out runs of chunks with a lock-free bump
// pointer. Chunks are never returned to it; the allocators built on top
// (Circular, LinearCircular, General) recycle them. Memory it hands out is
// zero (every superchunk is a new memfd), so a user that needs zeroed
// memory clears only what it recycles. Safe for concurrent use.
type ZoneAllocator struct {
	cfg        ZoneConfig
	reg        *Registry
	next       atomic.Uint64             // bytes handed out across the superchunk sequence
	supers     atomic.Pointer[[]*Region] // copy-on-write; grown under mu
	mu         sync.Mutex
	large      []*Region // dedicated regions for requests above a superchunk
	largeBytes atomic.Int64
	closed     atomic.Bool
}

// NewZoneAllocator returns a zone allocator creating its regions in reg.
func NewZoneAllocator(reg *Registry, cfg ZoneConfig) (*ZoneAllocator, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	z := &ZoneAllocator{cfg: cfg, reg: reg}
	z.supers.Store(new([]*Region))
	return z, nil
}

// Config returns the zone's configuration.
func (z *ZoneAllocator) Config() ZoneConfig { return z.cfg }

// Chunk returns one chunk.
func (z *ZoneAllocator) Chunk() (Memory, error) { return z.Alloc(z.cfg.ChunkSize) }

// Alloc returns contiguous memory of size bytes rounded up to whole chunks.
// Runs that fit a superchunk come from the bump pointer (a run never
// straddles two superchunks; the tail it skips is lost); larger ones get a
// dedicated region, without the superpage guarantee.
func (z *ZoneAllocator) Alloc(size int) (Memory, error) {
	if size <= 0 {
		return Memory{}, fmt.Errorf("%w: zone allocation of %d bytes", ErrInvalidSize, size)
	}
	if z.closed.Load() {
		return Memory{}, ErrClosed
	}
	cs := uint64(z.cfg.ChunkSize)
	n := (uint64(size) + cs - 1) / cs * cs
	sup := uint64(z.cfg.SuperchunkSize)
	if n > sup {
		return z.allocLarge(int(n))
	}
	for {
		cur := z.next.Load()
		start := cur
		if start%sup+n > sup {
			start = (start/sup + 1) * sup
		}
		end := start + n
		if z.cfg.MaxBytes > 0 && int64(end)+z.largeBytes.Load() > z.cfg.MaxBytes {
			return Memory{}, fmt.Errorf("%w: %d more bytes would pass MaxBytes %d", ErrExhausted, n, z.cfg.MaxBytes)
		}
		if !z.next.CompareAndSwap(cur, end) {
			continue
		}
		r, err := z.superchunk(int(start / sup))
		if err != nil {
			return Memory{}, err
		}
		return Memory{region: r, off: int(start % sup), n: n}, nil
	}
}

// superchunk returns superchunk i, mapping it (and any before it) on first use.
func (z *ZoneAllocator) superchunk(i int) (*Region, error) {
	if s := *z.supers.Load(); i < len(s) {
		return s[i], nil
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	s := *z.supers.Load()
	for len(s) <= i {
		cfg := z.cfg.Region
		if cfg.Name == "" {
			cfg.Name = "zone"
		}
		r, err := z.reg.NewRegion(z.cfg.SuperchunkSize, cfg)
		if err != nil {
			return nil, fmt.Errorf("alloc: zone superchunk %d: %w", len(s), err)
		}
		s = append(s[:len(s):len(s)], r)
		z.supers.Store(&s)
	}
	return s[i], nil
}

func (z *ZoneAllocator) allocLarge(n int) (Memory, error) {
	if z.cfg.MaxBytes > 0 && int64(z.next.Load())+z.largeBytes.Load()+int64(n) > z.cfg.MaxBytes {
		return Memory{}, fmt.Errorf("%w: %d more bytes would pass MaxBytes %d", ErrExhausted, n, z.cfg.MaxBytes)
	}
	cfg := z.cfg.Region
	if cfg.Name == "" {
		cfg.Name = "zone-large"
	}
	r, err := z.reg.NewRegion(n, cfg)
	if err != nil {
		return Memory{}, fmt.Errorf("alloc: zone large allocation of %d bytes: %w", n, err)
	}
	z.mu.Lock()
	z.large = append(z.large, r)
	z.mu.Unlock()
	z.largeBytes.Add(int64(n))
	return Memory{region: r, off: 0, n: uint64(n)}, nil
}

// ZoneStats describes a zone's use.
type ZoneStats struct {
	Superchunks int   // superchunks mapped so far
	BumpBytes   int64 // bytes consumed by the bump pointer (skipped tails included)
	LargeBytes  int64 // bytes in dedicated regions
}

// Stats returns the zone's current use.
func (z *ZoneAllocator) Stats() ZoneStats {
	return ZoneStats{Superchunks: len(*z.supers.Load()), BumpBytes: int64(z.next.Load()), LargeBytes: z.largeBytes.Load()}
}

// Close releases every region of the zone. Memory handed out becomes invalid.
func (z *ZoneAllocator) Close() error {
	z.closed.Store(true)
	z.mu.Lock()
	defer z.mu.Unlock()
	var first error
	for _, r := range append(*z.supers.Load(), z.large...) {
		if err := z.reg.Release(r); err != nil && first == nil {
			first = err
		}
	}
	z.supers.Store(new([]*Region))
	z.large = nil
	return first
}
