package alloc

import (
	"fmt"
)

// Source provides the memory that Circular, LinearCircular and General carve
// up. *ZoneAllocator implements it.
type Source interface {
	Alloc(size int) (Memory, error)
}

// Growth says how a circular allocator grows when every unit is in flight.
type Growth int

const (
	// Linear adds InitialUnits units each time.
	Linear Growth = iota
	// Exponential doubles the number of units each time.
	Exponential
)

// CircularConfig configures Circular and LinearCircular.
type CircularConfig struct {
	// UnitSize is the size of one unit in bytes. Default 64 KiB; must be a
	// positive multiple of Align, below 1 TiB and below 2^24 × Align (a
	// unit holds at most 2^24 segments).
	UnitSize int
	// InitialUnits is the number of units allocated at creation, and the
	// step of Linear growth. Default 4.
	InitialUnits int
	// MaxUnits bounds the ring; when every unit is in flight and the ring
	// holds MaxUnits, Next returns ErrBusy. Default 1024.
	MaxUnits int
	// Growth is Linear (default) or Exponential.
	Growth Growth
	// Align is the alignment of LinearCircular segments. Default 8 (the
	// record alignment of riutils); must be a power of two ≤ UnitSize.
	Align int
	// Populate faults each unit's pages in when the unit is taken from the
	// source (at creation and at each growth), in one madvise (Populate),
	// so that the ring's first lap writes no page for the first time: a
	// fault a page otherwise, about 10 µs each on a VM. Best effort, as
	// Populate: before Linux 5.14 the pages fault in on first touch.
	// Default false (the ring's memory stays untouched until used).
	Populate bool
}

// DefaultCircularConfig returns 4 units of 64 KiB growing linearly to 1024,
// with 8-byte segment alignment.
func DefaultCircularConfig() CircularConfig {
	return CircularConfig{UnitSize: 64 << 10, InitialUnits: 4, MaxUnits: 1024, Growth: Linear, Align: 8}
}

// VerifyConfig checks c.
func (c CircularConfig) VerifyConfig() error {
	switch {
	case c.Align <= 0 || c.Align&(c.Align-1) != 0:
		return fmt.Errorf("%w: Align %d must be a power of two", ErrBadConfig, c.Align)
	case c.UnitSize <= 0 || c.UnitSize%c.Align != 0:
		return fmt.Errorf("%w: UnitSize %d must be a positive multiple of Align %d", ErrBadConfig, c.UnitSize, c.Align)
	case uint64(c.UnitSize) > lenMask || c.UnitSize/c.Align >= maxSlots:
		return fmt.Errorf("%w: UnitSize %d must be below %d bytes and %d × Align", ErrBadConfig, c.UnitSize, uint64(lenMask)+1, maxSlots)
	case c.InitialUnits <= 0:
		return fmt.Errorf("%w: InitialUnits %d must be positive", ErrBadConfig, c.InitialUnits)
	case c.MaxUnits < c.InitialUnits:
		return fmt.Errorf("%w: MaxUnits %d below InitialUnits %d", ErrBadConfig, c.MaxUnits, c.InitialUnits)
	case c.Growth != Linear && c.Growth != Exponential:
		return fmt.Errorf("%w: unknown Growth %d", ErrBadConfig, c.Growth)
	}
	return nil
}

// Circular is the paper's circular allocator: a ring of fixed-size units that
// it walks in order, taking the next unit only when the operations that last
// used it have completed (Memory.Tag). When the next unit is still in flight
// it grows, inserting new units at that point of the ring, up to MaxUnits.
// Not safe for concurrent use: create one per sending thread (and per
// Transmitter where latency matters).
type Circular struct {
	cfg   CircularConfig
	src   Source
	ring  []*unit
	cur   int
	slots int // handouts a unit supports before reuse
}

// NewCircular allocates the initial units from src.
func NewCircular(src Source, cfg CircularConfig) (*Circular, error) {
	return newCircular(src, cfg, 1)
}

func newCircular(src Source, cfg CircularConfig, slots int) (*Circular, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	c := &Circular{cfg: cfg, src: src, slots: slots}
	if err := c.grow(cfg.InitialUnits); err != nil {
		return nil, err
	}
	return c, nil
}

// Units returns the number of units in the ring.
func (c *Circular) Units() int { return len(c.ring) }

// Bytes returns the memory held by the ring.
func (c *Circular) Bytes() int { return len(c.ring) * c.cfg.UnitSize }

// Next returns the next unit. It does not block: when the unit is in flight
// and the ring may not grow, it returns an error wrapping ErrBusy, and the
// caller polls completions and tries again.
func (c *Circular) Next() (Memory, error) {
	u, err := c.nextUnit()
	if err != nil {
		return Memory{}, err
	}
	return u.handout(0, c.cfg.UnitSize), nil
}

func (c *Circular) nextUnit() (*unit, error) {
	u := c.ring[c.cur]
	if !u.reusable() {
		k := len(c.ring)
		if c.cfg.Growth == Linear {
			k = c.cfg.InitialUnits
		}
		k = min(k, c.cfg.MaxUnits-len(c.ring))
		if k == 0 {
			return nil, fmt.Errorf("%w: %d units of %d bytes in flight (MaxUnits)", ErrBusy, len(c.ring), c.cfg.UnitSize)
		}
		if err := c.grow(k); err != nil {
			return nil, err
		}
		u = c.ring[c.cur]
	}
	u.reset()
	c.cur = (c.cur + 1) % len(c.ring)
	return u, nil
}

// grow inserts k fresh units at the cursor, so they are the next ones used
// and the ring order of the busy units is kept.
func (c *Circular) grow(k int) error {
	m, err := c.src.Alloc(k * c.cfg.UnitSize)
	if err != nil {
		return fmt.Errorf("alloc: growing circular allocator by %d units: %w", k, err)
	}
	if c.cfg.Populate {
		_ = Populate(m.Bytes())
	}
	fresh := make([]*unit, k)
	for i := range fresh {
		fresh[i] = newUnit(Memory{region: m.region, off: m.off + i*c.cfg.UnitSize, n: uint64(c.cfg.UnitSize)}, c.slots)
	}
	ring := make([]*unit, 0, len(c.ring)+k)
	ring = append(ring, c.ring[:c.cur]...)
	ring = append(ring, fresh...)
	c.ring = append(ring, c.ring[c.cur:]...)
	return nil
}

// LinearCircular is the paper's linear-circular allocator: like Circular, but
// it hands out segments of any size inside the current unit, so small
// buffers waste nothing. A unit is reused once every segment of it was
// tagged or Done and its tags completed. Not safe for concurrent use.
type LinearCircular struct {
	c    *Circular
	u    *unit
	fill int
}

// NewLinearCircular allocates the initial units from src.
func NewLinearCircular(src Source, cfg CircularConfig) (*LinearCircular, error) {
	c, err := newCircular(src, cfg, cfg.UnitSize/max(cfg.Align, 1))
	if err != nil {
		return nil, err
	}
	return &LinearCircular{c: c}, nil
}

// Units returns the number of units in the ring.
func (l *LinearCircular) Units() int { return l.c.Units() }

// Bytes returns the memory held by the ring.
func (l *LinearCircular) Bytes() int { return l.c.Bytes() }

// Alloc returns n bytes, aligned to Align, inside one unit.
func (l *LinearCircular) Alloc(n int) (Memory, error) {
	if n <= 0 {
		return Memory{}, fmt.Errorf("%w: segment of %d bytes", ErrInvalidSize, n)
	}
	if n > l.c.cfg.UnitSize {
		return Memory{}, fmt.Errorf("%w: segment of %d bytes in %d-byte units", ErrTooLarge, n, l.c.cfg.UnitSize)
	}
	if l.u == nil || l.fill+n > l.c.cfg.UnitSize {
		u, err := l.c.nextUnit()
		if err != nil {
			return Memory{}, err
		}
		l.u, l.fill = u, 0
	}
	m := l.u.handout(l.fill, n)
	a := l.c.cfg.Align
	l.fill += (n + a - 1) &^ (a - 1)
	return m, nil
}
