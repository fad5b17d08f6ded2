package dtutils

// fifo is a growable ring: allocation-free once it has grown to its
// working size. Not synchronised.
type fifo[T any] struct {
	buf     []T
	head, n int
}

func (f *fifo[T]) push(v T) {
	if f.n == len(f.buf) {
		nb := make([]T, max(16, 2*len(f.buf)))
		for i := 0; i < f.n; i++ {
			nb[i] = f.buf[(f.head+i)%len(f.buf)]
		}
		f.buf, f.head = nb, 0
	}
	f.buf[(f.head+f.n)%len(f.buf)] = v
	f.n++
}

func (f *fifo[T]) pop() (T, bool) {
	var zero T
	if f.n == 0 {
		return zero, false
	}
	v := f.buf[f.head]
	f.buf[f.head] = zero
	f.head = (f.head + 1) % len(f.buf)
	f.n--
	return v, true
}

func (f *fifo[T]) len() int { return f.n }

func (f *fifo[T]) peek() (T, bool) {
	var zero T
	if f.n == 0 {
		return zero, false
	}
	return f.buf[f.head], true
}

// front returns the oldest element, to update in place; the fifo must not
// be empty.
func (f *fifo[T]) front() *T { return &f.buf[f.head] }

// at returns the i-th oldest element, to update in place; i < len().
func (f *fifo[T]) at(i int) *T { return &f.buf[(f.head+i)%len(f.buf)] }

// indexPool hands out the indices 0…n−1 of a table (message buffers,
// completion contexts), lowest first. Not synchronised.
type indexPool struct{ free []int }

func newIndexPool(n int) indexPool {
	p := indexPool{free: make([]int, n)}
	for i := range p.free {
		p.free[i] = n - 1 - i
	}
	return p
}

func (p *indexPool) take() (int, bool) {
	n := len(p.free)
	if n == 0 {
		return 0, false
	}
	i := p.free[n-1]
	p.free = p.free[:n-1]
	return i, true
}

func (p *indexPool) put(i int) { p.free = append(p.free, i) }
