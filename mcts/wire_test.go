package mcts

import (
	"bytes"
	"errors"
	"testing"
)

func TestWireRoundTrip(t *testing.T) {
	for k := uint8(0); k < numKinds; k++ {
		a := action{kind: k, w: [6]uint32{7, 1, 2, 3, 4, 5}, stats: [numStats]uint64{9, 8, 7, 6, 5, 4, 3, 2}}
		b := a.encode(nil)
		if len(b) != 4*kindWords[k] {
			t.Fatalf("%s: %d bytes, want %d", kindNames[k], len(b), 4*kindWords[k])
		}
		got, err := decode(k, b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.encode(nil), b) {
			t.Errorf("%s: round trip differs", kindNames[k])
		}
		if _, err := decode(k, b[:len(b)-1]); !errors.Is(err, ErrMessage) {
			t.Errorf("%s: short call accepted: %v", kindNames[k], err)
		}
		if _, err := decode(k, append(b, 0)); !errors.Is(err, ErrMessage) {
			t.Errorf("%s: call with a trailing byte accepted: %v", kindNames[k], err)
		}
	}
	if _, err := decode(numKinds, nil); !errors.Is(err, ErrMessage) {
		t.Error("unknown kind accepted")
	}
}

// FuzzDecodeCall: any bytes of any kind decode cleanly or fail with
// ErrMessage; what decodes re-encodes to the same bytes.
func FuzzDecodeCall(f *testing.F) {
	f.Add(uint8(kindBackprop), (&action{kind: kindBackprop, w: [6]uint32{1, 2, 3, 4, 16, 1}}).encode(nil))
	f.Add(uint8(kindStats), (&action{kind: kindStats}).encode(nil))
	create := createCall(3, ref{owner: 1, idx: 9}, 4, 2, nil)
	f.Add(uint8(kindCreate), create.encode(nil))
	steal, eval, gave := stealCall(3, 5), evalCall(3, ref{owner: 0, idx: 7}, 2, nil), gaveCall(3, 1)
	f.Add(uint8(kindSteal), steal.encode(nil))
	f.Add(uint8(kindEval), eval.encode(nil))
	f.Add(uint8(kindGave), gave.encode(nil))
	f.Fuzz(func(t *testing.T, kind uint8, args []byte) {
		a, err := decode(kind, args)
		if err != nil {
			if !errors.Is(err, ErrMessage) {
				t.Fatalf("error not wrapping ErrMessage: %v", err)
			}
			return
		}
		if !bytes.Equal(a.encode(nil), args) {
			t.Fatal("re-encoding differs")
		}
	})
}
