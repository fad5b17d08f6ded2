package hex

import "math/bits"

func trailingZeros(x uint32) int { return bits.TrailingZeros32(x) }

// connects reports whether the stones of rows (bit x of rows[y]) join row 0
// to row n−1. Cell (x,y) touches (x±1,y), (x,y±1), (x+1,y−1) and (x−1,y+1),
// so a reached set R of row y reaches R|R>>1 in row y+1 and R|R<<1 in row
// y−1. Sweeps alternate downwards and upwards, each carrying the reached set
// as far as it goes in one direction, until the bottom row is reached or a
// pair of sweeps adds nothing: a path needs one sweep per change of vertical
// direction, a handful even on random boards at the percolation threshold.
func connects(rows *[MaxSize]uint32, n int) bool {
	if n == 0 {
		return false
	}
	full := uint32(1)<<n - 1
	var reach [MaxSize]uint32
	reach[0] = rows[0]
	if n == 1 {
		return reach[0] != 0
	}
	for {
		changed := false
		for y := 1; y < n; y++ {
			r := reach[y-1]
			s := (r|r>>1)&rows[y] | reach[y]
			if s != reach[y] {
				s = expand(rows[y], s)
				reach[y] = s
				changed = true
			}
		}
		if reach[n-1] != 0 {
			return true
		}
		if !changed {
			return false
		}
		changed = false
		for y := n - 2; y >= 0; y-- {
			r := reach[y+1]
			s := (r|r<<1)&full&rows[y] | reach[y]
			if s != reach[y] {
				reach[y] = expand(rows[y], s)
				changed = true
			}
		}
		if !changed {
			return false
		}
	}
}

// expand grows seed s along the horizontal runs of row r that contain it.
func expand(r, s uint32) uint32 {
	s &= r
	for {
		t := (s | s<<1 | s>>1) & r
		if t == s {
			return s
		}
		s = t
	}
}
