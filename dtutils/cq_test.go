package dtutils

import "testing"

// TestCompletionQueueOrderAcrossGrowth: a send-side completion queue that
// grows while its head is mid-buffer (completions polled, more arriving
// than it holds) hands them out in the order they were pushed.
func TestCompletionQueueOrderAcrossGrowth(t *testing.T) {
	q := newMemCQ(&sqAccount{max: 16})
	var dst [7]Completion
	next, want := uint64(0), uint64(0)
	pollAll := func() {
		for {
			n := q.Poll(dst[:])
			if n == 0 {
				return
			}
			for _, c := range dst[:n] {
				if c.WRID != want {
					t.Fatalf("completion %d came as number %d", c.WRID, want)
				}
				want++
			}
		}
	}
	for _, burst := range []int{10, 0, 200, 5, 700} {
		for i := 0; i < burst; i++ {
			q.push(Completion{WRID: next})
			next++
		}
		if burst == 10 {
			q.Poll(dst[:3]) // the head moves off the buffer's start
			want = 3
			continue
		}
		pollAll()
	}
	if want != next {
		t.Fatalf("polled %d of %d completions", want, next)
	}
}

// TestFIFOOrderAcrossGrowth: the fifo keeps its order when it grows with
// its head mid-buffer, and at and front see the oldest elements.
func TestFIFOOrderAcrossGrowth(t *testing.T) {
	var f fifo[int]
	next, want := 0, 0
	for round, burst := range []int{12, 30, 100, 3, 500} {
		for i := 0; i < burst; i++ {
			f.push(next)
			next++
		}
		if f.len() != next-want || *f.front() != want || *f.at(f.len() - 1) != next-1 {
			t.Fatalf("round %d: len %d, front %d, last %d; want %d, %d, %d", round, f.len(), *f.front(), *f.at(f.len() - 1), next-want, want, next-1)
		}
		keep := 0
		if round%2 == 0 {
			keep = 5 // leave some: the next growth starts mid-buffer
		}
		for f.len() > keep {
			v, ok := f.pop()
			if !ok || v != want {
				t.Fatalf("round %d: popped %d, %v; want %d", round, v, ok, want)
			}
			want++
		}
	}
	if _, ok := f.pop(); !ok {
		t.Fatal("the last five are gone")
	}
}
