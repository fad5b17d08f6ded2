package hex

import (
	"bytes"
	"errors"
	"testing"
)

func TestWireRoundTrip(t *testing.T) {
	r := NewRNG(8)
	for n := 1; n <= MaxSize; n++ {
		b := mustBoard(t, n)
		for i := 0; i < n*n/2; i++ {
			if c := Cell(r.Intn(n * n)); b.Legal(c) {
				_ = b.Play(c)
			}
		}
		enc, err := b.MarshalBinary()
		if err != nil || len(enc) != EncodedLen(n) {
			t.Fatalf("%d: %d bytes, %v", n, len(enc), err)
		}
		var d Board
		if err := d.UnmarshalBinary(enc); err != nil {
			t.Fatal(err)
		}
		if d != b {
			t.Fatalf("%d×%d: decoded board differs", n, n)
		}
	}
}

func TestWireRejects(t *testing.T) {
	good, _ := (&Board{size: 2, toMove: Black}).MarshalBinary()
	bad := map[string][]byte{
		"short":   {2},
		"size 0":  {0, 1},
		"size 20": append([]byte{20, 1}, make([]byte, 100)...),
		"length":  append(good, 0),
		"to move": {2, 3, 0},
		"code 3":  {2, 1, 3},
		"padding": {1, 1, 4},
	}
	for name, data := range bad {
		var b Board
		if err := b.UnmarshalBinary(data); !errors.Is(err, ErrBadFormat) {
			t.Errorf("%s: %v", name, err)
		}
		if b != (Board{}) {
			t.Errorf("%s: board changed on error", name)
		}
	}
}

// FuzzBoardDecode: any input decodes to a valid board or fails cleanly, and
// a decoded board re-encodes to the same bytes.
func FuzzBoardDecode(f *testing.F) {
	b := mustBoard(f, 11)
	_ = b.Play(60)
	enc, _ := b.MarshalBinary()
	f.Add(enc)
	f.Add([]byte{3, 2, 0x11, 0x22, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Board
		if err := b.UnmarshalBinary(data); err != nil {
			return
		}
		again, _ := b.MarshalBinary()
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs: %x vs %x", again, data)
		}
		if b.Hash() != b.recomputeHash() {
			t.Fatal("hash not consistent")
		}
		b.Winner()
		b.Moves(nil)
	})
}
