package hex

import "math/bits"

// RNG is a small, fast generator (wyrand) for playouts. The zero value is
// usable; give each goroutine its own.
type RNG struct{ s uint64 }

// NewRNG returns a generator seeded with seed.
func NewRNG(seed uint64) *RNG { return &RNG{s: seed} }

// Uint64 returns 64 random bits.
func (r *RNG) Uint64() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// Intn returns a uniform integer in [0, n), n > 0 (Lemire's method, without
// modulo bias).
func (r *RNG) Intn(n int) int {
	bound := uint64(n)
	hi, lo := bits.Mul64(r.Uint64(), bound)
	if lo < bound {
		thresh := -bound % bound
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), bound)
		}
	}
	return int(hi)
}

// Playout fills every empty cell at random, the side to move getting
// ⌈empties/2⌉ of them (as alternating random moves would), and returns the
// winner of the filled board: Hex has no draws. b is not changed and nothing
// is allocated. A finished game returns its winner.
func (b *Board) Playout(r *RNG) Color {
	if w := b.Winner(); w != Empty {
		return w
	}
	n := b.size
	var empty [maxCells]int16
	e := 0
	full := uint32(1)<<n - 1
	for y := 0; y < n; y++ {
		for m := full &^ (b.rows[0][y] | b.rows[1][y]); m != 0; m &= m - 1 {
			empty[e] = int16(y<<5 | trailingZeros(m))
			e++
		}
	}
	// Black's share of the empties; pick the smaller share at random
	// (a partial Fisher–Yates shuffle) and give the rest to the other side.
	k := e / 2
	if b.toMove == Black {
		k = e - e/2
	}
	pick, pickBlack := k, true
	if e-k < k {
		pick, pickBlack = e-k, false
	}
	var chosen [MaxSize]uint32
	for i := 0; i < pick; i++ {
		j := i + r.Intn(e-i)
		empty[i], empty[j] = empty[j], empty[i]
		c := empty[i]
		chosen[c>>5] |= 1 << (c & 31)
	}
	rows := b.rows[0]
	for y := 0; y < n; y++ {
		if pickBlack {
			rows[y] |= chosen[y]
		} else {
			rows[y] |= full &^ (b.rows[1][y] | chosen[y])
		}
	}
	if connects(&rows, n) {
		return Black
	}
	return White
}
