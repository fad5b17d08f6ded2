package numa

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ParseCPUList parses the kernel's list format ("0-7,16-23", "3", "") into a
// sorted list of unique CPU numbers. Whitespace around the list and its items
// is ignored; anything else that is not a number or a range is an error
// wrapping ErrBadCPUList.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var cpus []int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		a, err := parseCPU(lo)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrBadCPUList, s, err)
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi); err != nil {
				return nil, fmt.Errorf("%w: %q: %v", ErrBadCPUList, s, err)
			}
			if b < a {
				return nil, fmt.Errorf("%w: %q: range %d-%d is reversed", ErrBadCPUList, s, a, b)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	sort.Ints(cpus)
	out := cpus[:0]
	for i, c := range cpus {
		if i == 0 || c != cpus[i-1] {
			out = append(out, c)
		}
	}
	return out, nil
}

// maxCPU bounds parsed CPU numbers so a corrupt list cannot make us allocate
// gigabytes; the kernel's own limit (CONFIG_NR_CPUS) is 8192.
const maxCPU = 1 << 16

func parseCPU(s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	if n < 0 || n >= maxCPU {
		return 0, fmt.Errorf("CPU %d out of range [0,%d)", n, maxCPU)
	}
	return n, nil
}

// FormatCPUList is the inverse of ParseCPUList: it writes ranges ("0-3,8").
// The input need not be sorted.
func FormatCPUList(cpus []int) string {
	c := append([]int(nil), cpus...)
	sort.Ints(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] <= c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if c[i] == c[j] {
			fmt.Fprintf(&b, "%d", c[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", c[i], c[j])
		}
		i = j + 1
	}
	return b.String()
}
