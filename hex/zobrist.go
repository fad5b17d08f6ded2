package hex

// zobrist holds the random keys of the hash. They are computed once from a
// fixed seed, so every process of a job (and every run) agrees on them, and
// are never written after.
var zobrist = newZobrist(0x5e41e3a_2026)

type zobristKeys struct {
	stone [2][maxCells]uint64
	size  [MaxSize + 1]uint64
	white uint64 // XORed in when White is to move
}

func newZobrist(seed uint64) *zobristKeys {
	z := &zobristKeys{}
	next := func() uint64 { // splitmix64
		seed += 0x9e3779b97f4a7c15
		x := seed
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		return x ^ x>>31
	}
	for i := range z.stone {
		for c := range z.stone[i] {
			z.stone[i][c] = next()
		}
	}
	for i := range z.size {
		z.size[i] = next()
	}
	z.white = next()
	return z
}
