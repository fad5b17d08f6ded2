package hex

import (
	"errors"
	"math"
	"testing"
)

// slowConnects is the reference: a breadth-first search over the
// neighbour definition of docs/design.md §7, written independently of the bit
// sweeps; Black joins row 0 to row n−1, White column 0 to column n−1.
func slowConnects(b *Board, col Color) bool {
	n := b.size
	seen := make([]bool, n*n)
	var queue []int
	for i := 0; i < n; i++ {
		c := i // Black starts on row 0 (x = i)
		if col == White {
			c = i * n // White starts on column 0 (y = i)
		}
		if b.At(Cell(c)) == col {
			seen[c] = true
			queue = append(queue, c)
		}
	}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		x, y := c%n, c/n
		if (col == Black && y == n-1) || (col == White && x == n-1) {
			return true
		}
		for _, d := range [][2]int{{1, 0}, {-1, 0}, {0, 1}, {0, -1}, {1, -1}, {-1, 1}} {
			nx, ny := x+d[0], y+d[1]
			if nx < 0 || ny < 0 || nx >= n || ny >= n {
				continue
			}
			nc := ny*n + nx
			if !seen[nc] && b.At(Cell(nc)) == col {
				seen[nc] = true
				queue = append(queue, nc)
			}
		}
	}
	return false
}

// slowWinner is the reference's winner. Both colours never connect on one
// board (their chains would cross), so it fails the test if they do.
func slowWinner(b *Board) Color {
	black, white := slowConnects(b, Black), slowConnects(b, White)
	switch {
	case black && white:
		panic("reference: both colours connect, which Hex's topology forbids")
	case black:
		return Black
	case white:
		return White
	}
	return Empty
}

func mustBoard(t testing.TB, n int) Board {
	t.Helper()
	b, err := New(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func place(t testing.TB, b *Board, col Color, cells ...[2]int) {
	t.Helper()
	for _, c := range cells {
		if err := b.PlayColor(col, b.Cell(c[0], c[1])); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWinnerHandMade checks straight, edge and zig-zag chains for both
// players on every size 1…13, and chains one cell short of winning.
func TestWinnerHandMade(t *testing.T) {
	for n := 1; n <= 13; n++ {
		type path struct {
			name  string
			cells [][2]int // (x, y) for Black; transposed for White
			wins  bool
		}
		var straight, edge, zigzag, short, diagonalGap [][2]int
		for i := 0; i < n; i++ {
			straight = append(straight, [2]int{n / 2, i})
			edge = append(edge, [2]int{n - 1, i})
		}
		// Zig-zag: down the column x, then along row to x+1 on every other
		// row — a path that uses the (x+1,y−1)/(x−1,y+1) neighbours.
		for y := 0; y < n; y++ {
			zigzag = append(zigzag, [2]int{n - 1 - y, y}) // anti-diagonal: (x−1, y+1) steps
		}
		short = straight[:n-1]
		// The main diagonal (x+1, y+1) is not adjacent in Hex.
		for i := 0; i < n; i++ {
			diagonalGap = append(diagonalGap, [2]int{i, i})
		}
		paths := []path{{"straight", straight, true}, {"edge", edge, true}, {"zigzag", zigzag, true}, {"short", short, false}, {"diagonal", diagonalGap, n == 1}}
		// A snake: right along row 0, down, left along row 2, ... (n ≥ 3).
		if n >= 3 {
			var snake [][2]int
			for y := 0; y < n; y++ {
				if y%2 == 0 {
					for x := 0; x < n; x++ {
						snake = append(snake, [2]int{x, y})
					}
				} else if y%4 == 1 {
					snake = append(snake, [2]int{n - 1, y})
				} else {
					snake = append(snake, [2]int{0, y})
				}
			}
			paths = append(paths, path{"snake", snake, true})
		}
		for _, p := range paths {
			for _, col := range []Color{Black, White} {
				b := mustBoard(t, n)
				for _, c := range p.cells {
					x, y := c[0], c[1]
					if col == White {
						x, y = y, x
					}
					place(t, &b, col, [2]int{x, y})
				}
				want := Empty
				if p.wins {
					want = col
				}
				if got := b.Winner(); got != want {
					t.Errorf("%d×%d %s path for %v: winner %v, want %v\n%s", n, n, p.name, col, got, want, b.String())
				}
				if got := slowWinner(&b); got != want {
					t.Errorf("reference disagrees on %d×%d %s for %v: %v", n, n, p.name, col, got)
				}
			}
		}
	}
}

// TestWinnerMatchesReference compares the sweeps with the breadth-first
// search on random partial and full boards of every size.
func TestWinnerMatchesReference(t *testing.T) {
	r := NewRNG(1)
	for n := 1; n <= MaxSize; n++ {
		for trial := 0; trial < 300; trial++ {
			b := mustBoard(t, n)
			fill := r.Intn(n*n + 1)
			for i := 0; i < fill; i++ {
				c := Cell(r.Intn(n * n))
				if b.Legal(c) {
					_ = b.PlayColor(Color(1+r.Intn(2)), c)
				}
			}
			if got, want := b.Winner(), slowWinner(&b); got != want {
				t.Fatalf("%d×%d: winner %v, reference %v\n%s", n, n, got, want, b.String())
			}
		}
	}
}

// TestFilledBoardOneWinner: a filled board always has exactly one winner,
// which the playout reports.
func TestFilledBoardOneWinner(t *testing.T) {
	r := NewRNG(2)
	for n := 1; n <= 13; n++ {
		for trial := 0; trial < 200; trial++ {
			b := mustBoard(t, n)
			for c := Cell(0); int(c) < n*n; c++ {
				_ = b.PlayColor(Color(1+r.Intn(2)), c)
			}
			black := connects(&b.rows[0], n)
			white := connects(&b.cols[1], n)
			if black == white {
				t.Fatalf("%d×%d filled board: black wins %v, white wins %v\n%s", n, n, black, white, b.String())
			}
			if w := slowWinner(&b); (w == Black) != black {
				t.Fatalf("reference disagrees: %v", w)
			}
		}
	}
}

// TestZobristIncremental: the hash kept move by move equals the hash
// computed from scratch, and differs between positions that differ.
func TestZobristIncremental(t *testing.T) {
	r := NewRNG(3)
	seen := map[uint64]string{}
	for n := 1; n <= MaxSize; n += 3 {
		b := mustBoard(t, n)
		for b.Stones() < n*n {
			c := Cell(r.Intn(n * n))
			if !b.Legal(c) {
				continue
			}
			if err := b.Play(c); err != nil {
				t.Fatal(err)
			}
			if b.Hash() != b.recomputeHash() {
				t.Fatalf("%d×%d after %d stones: incremental %#x, scratch %#x", n, n, b.Stones(), b.Hash(), b.recomputeHash())
			}
			enc, _ := b.MarshalBinary()
			if prev, ok := seen[b.Hash()]; ok && prev != string(enc) {
				t.Fatalf("two positions share hash %#x", b.Hash())
			}
			seen[b.Hash()] = string(enc)
		}
	}
}

func TestPlayErrors(t *testing.T) {
	b := mustBoard(t, 5)
	if err := b.Play(b.Cell(2, 2)); err != nil {
		t.Fatal(err)
	}
	if err := b.Play(b.Cell(2, 2)); !errors.Is(err, ErrOccupied) {
		t.Errorf("occupied: %v", err)
	}
	if err := b.Play(25); !errors.Is(err, ErrBadCell) {
		t.Errorf("off board: %v", err)
	}
	if err := b.PlayColor(Empty, 0); !errors.Is(err, ErrBadColor) {
		t.Errorf("bad colour: %v", err)
	}
	if _, err := New(0); !errors.Is(err, ErrBadSize) {
		t.Errorf("size 0: %v", err)
	}
	if _, err := New(20); !errors.Is(err, ErrBadSize) {
		t.Errorf("size 20: %v", err)
	}
	for _, s := range []string{"", "a", "a0", "f1", "a6", "1a", "a-1", "a+1", "?3"} {
		if _, err := ParseCell(s, 5); !errors.Is(err, ErrBadCell) {
			t.Errorf("ParseCell(%q): %v", s, err)
		}
	}
	for c := Cell(0); c < 25; c++ {
		if got, err := ParseCell(CellName(c, 5), 5); err != nil || got != c {
			t.Errorf("round trip of %d: %v %v", c, got, err)
		}
	}
	if c, _ := ParseCell("E5", 5); c != 24 {
		t.Errorf("E5 = %d", c)
	}
}

// TestBoardEdges: cells off the board are neither legal nor named, a
// colour that is not a player cannot be given the move, and a won
// position has no moves left.
func TestBoardEdges(t *testing.T) {
	b := mustBoard(t, 3)
	for _, c := range []Cell{-1, -4, 9, 12} {
		if b.Legal(c) {
			t.Errorf("cell %d of a 3×3 board is legal", c)
		}
		if n := CellName(c, 3); n != "?" {
			t.Errorf("cell %d of a 3×3 board is named %q", c, n)
		}
	}
	h := b.Hash()
	b.SetToMove(Empty)
	if b.ToMove() != Black || b.Hash() != h {
		t.Errorf("SetToMove(Empty): %v to move, hash %#x (was %#x)", b.ToMove(), b.Hash(), h)
	}
	b.SetToMove(White)
	if b.ToMove() != White || b.Hash() == h {
		t.Errorf("SetToMove(White): %v to move, hash unchanged %v", b.ToMove(), b.Hash() == h)
	}
	// Black connects top to bottom down column a; cells remain empty.
	for y := 0; y < 3; y++ {
		if err := b.PlayColor(Black, b.Cell(0, y)); err != nil {
			t.Fatal(err)
		}
	}
	if w := b.Winner(); w != Black {
		t.Fatalf("winner %v, want Black", w)
	}
	if m := b.Moves(nil); len(m) != 0 {
		t.Errorf("a won position has moves %v", m)
	}
}

// exactBlackRate enumerates every colouring of the empty n×n board with
// ⌈n²/2⌉ black cells and returns the fraction Black wins.
func exactBlackRate(n int) float64 {
	cells := n * n
	k := cells - cells/2
	wins, total := 0, 0
	for v := uint64(1)<<k - 1; v < 1<<cells; {
		var rows [MaxSize]uint32
		for y := 0; y < n; y++ {
			rows[y] = uint32(v>>(y*n)) & (1<<n - 1)
		}
		if connects(&rows, n) {
			wins++
		}
		total++
		// Gosper's hack: the next integer with the same number of bits.
		c := v & -v
		rr := v + c
		v = ((rr^v)>>2)/c | rr
	}
	return float64(wins) / float64(total)
}

// TestExactFillProbabilities: enumerated over all colourings, Black wins
// 2/3 of 3×3 fills, 1/2 of 4×4 and 0.573283 of 5×5.
func TestExactFillProbabilities(t *testing.T) {
	cases := []struct {
		n    int
		want float64
	}{{3, 2.0 / 3}, {4, 0.5}, {5, 0.573283}}
	for _, c := range cases {
		if c.n == 5 && testing.Short() {
			continue
		}
		if got := exactBlackRate(c.n); math.Abs(got-c.want) > 5e-7 {
			t.Errorf("%d×%d: enumerated black win rate %.7f, want %.7f", c.n, c.n, got, c.want)
		}
	}
}

// TestPlayoutStatistics: uniform fill-playouts from the empty board win for
// Black at the exact rates within 4 standard errors; on 11×11 about 0.523.
func TestPlayoutStatistics(t *testing.T) {
	cases := []struct {
		n    int
		want float64
		tol  float64 // extra tolerance for a value known only approximately
	}{{3, 2.0 / 3, 0}, {4, 0.5, 0}, {5, 0.573283, 0}, {11, 0.523, 0.005}}
	r := NewRNG(4)
	const trials = 200000
	for _, c := range cases {
		b := mustBoard(t, c.n)
		wins := 0
		for i := 0; i < trials; i++ {
			if b.Playout(r) == Black {
				wins++
			}
		}
		p := float64(wins) / trials
		se := math.Sqrt(c.want * (1 - c.want) / trials)
		if math.Abs(p-c.want) > 4*se+c.tol {
			t.Errorf("%d×%d: black won %.4f of %d playouts, want %.4f ± %.4f", c.n, c.n, p, trials, c.want, 4*se+c.tol)
		}
	}
	// The side to move gets the larger share: with White to move on an
	// empty 3×3 board, White has 5 cells and wins 2/3.
	b := mustBoard(t, 3)
	b.SetToMove(White)
	wins := 0
	for i := 0; i < trials; i++ {
		if b.Playout(r) == White {
			wins++
		}
	}
	if p, se := float64(wins)/trials, math.Sqrt(2.0/9/trials); math.Abs(p-2.0/3) > 4*se {
		t.Errorf("3×3 White to move: white won %.4f, want 2/3", p)
	}
}

// TestPlayoutKeepsStones: a playout never changes the board and respects
// the stones already there (a board where Black already has a whole
// column but the game is not over cannot exist; use a near-win instead).
func TestPlayoutKeepsStones(t *testing.T) {
	b := mustBoard(t, 7)
	for y := 0; y < 7; y++ {
		if y != 3 {
			place(t, &b, Black, [2]int{3, y})
		}
	}
	place(t, &b, White, [2]int{3, 3}, [2]int{2, 4})
	before := b
	r := NewRNG(5)
	for i := 0; i < 1000; i++ {
		b.Playout(r)
	}
	if b != before {
		t.Fatal("Playout changed the board")
	}
	if n := testing.AllocsPerRun(100, func() { b.Playout(r) }); n != 0 {
		t.Errorf("Playout allocates %v times", n)
	}
}

func TestRNGIntnUniform(t *testing.T) {
	r := NewRNG(6)
	var counts [7]int
	for i := 0; i < 70000; i++ {
		counts[r.Intn(7)]++
	}
	for i, c := range counts {
		if c < 9500 || c > 10500 {
			t.Errorf("Intn(7) gave %d %d times of 70000", i, c)
		}
	}
	if a, b := r.Uint64(), r.Uint64(); a == b {
		t.Error("two draws equal")
	}
}

// BenchmarkPlayout11 is one uniform fill-playout of an empty 11×11 board per
// op, winner included (docs/design.md §9: ≥ 1 M per second per core, 0 allocs).
func BenchmarkPlayout11(b *testing.B) {
	board := mustBoard(b, 11)
	r := NewRNG(7)
	b.ReportAllocs()
	wins := 0
	for b.Loop() {
		if board.Playout(r) == Black {
			wins++
		}
	}
	b.ReportMetric(float64(wins)/float64(b.N), "black-rate")
}
