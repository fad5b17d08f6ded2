package main

import (
	"math"
	"sort"
)

// median returns the median of xs (the mean of the middle two for even
// lengths); NaN for none.
func median(xs []float64) float64 { return percentile(xs, 50) }

// percentile returns the p-th percentile (0–100) of xs by linear
// interpolation between closest ranks; NaN for none.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if p <= 0 {
		return s[0]
	}
	if p >= 100 {
		return s[len(s)-1]
	}
	r := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(r))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (r-float64(lo))*(s[hi]-s[lo])
}
