package dsfabric

import (
	"errors"
	"testing"
)

// TestMessagesChecked: the bootstrap messages and the call header refuse,
// with ErrBadMessage, what differs from a well-formed message in one field:
// trailing bytes, an oversize string, another protocol version, a table or
// list of the wrong length, reserved bytes or unknown flags, both buffer
// modes, locators of the wrong size. (The fuzz targets' seeds are all
// well-formed; `go test` fuzzes nothing.)
func TestMessagesChecked(t *testing.T) {
	const size = 3
	hi := hello{rank: 1, size: size, token: []byte("t"), machine: "m"}.encode()
	table := encodeTable([]member{{machine: "a"}, {machine: "b"}, {machine: "c"}})
	ranks := encodeRanks(msgPlan, []int{0, 2})
	eps := encodeEndpoints(msgPeers, []epEntry{{peer: 0, ep: []byte("x")}})
	decoders := map[string]func([]byte) error{
		"hello":     func(b []byte) error { _, err := decodeHello(b); return err },
		"table":     func(b []byte) error { _, err := decodeTable(b, size); return err },
		"ranks":     func(b []byte) error { _, err := decodeRanks(b, msgPlan, size); return err },
		"endpoints": func(b []byte) error { _, err := decodeEndpoints(b, msgPeers, size); return err },
	}
	good := map[string][]byte{"hello": hi, "table": table, "ranks": ranks, "endpoints": eps}
	for name, b := range good {
		if err := decoders[name](b); err != nil {
			t.Fatalf("well-formed %s: %v", name, err)
		}
	}
	for _, c := range []struct {
		kind, name string
		b          []byte
	}{
		{"hello", "a trailing byte", append(append([]byte(nil), hi...), 0)},
		{"hello", "protocol version 2", append([]byte{msgHello, protoVersion - 1}, hi[2:]...)},
		{"hello", "a token over maxString", hello{rank: 1, size: size, token: make([]byte, maxString+1), machine: "m"}.encode()},
		{"table", "two ranks for a job of three", encodeTable([]member{{machine: "a"}, {machine: "b"}})},
		{"ranks", "four ranks in a job of three", encodeRanks(msgPlan, []int{0, 1, 2, 0})},
		{"endpoints", "seven endpoints in a job of three", encodeEndpoints(msgPeers, make([]epEntry, 2*size+1))},
	} {
		if err := decoders[c.kind](c.b); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s with %s: %v, want ErrBadMessage", c.kind, c.name, err)
		}
	}

	call := make([]byte, callHeader+locSize)
	(&callHdr{kind: kindCall, flags: flagDestBuf, buf: locSize}).put(call)
	if _, _, _, err := parseCall(call); err != nil {
		t.Fatalf("well-formed call: %v", err)
	}
	for name, h := range map[string]callHdr{
		"an unknown flag":                     {kind: kindCall, flags: flagsKnown + 1, buf: locSize},
		"both buffer modes":                   {kind: kindCall, flags: flagDestBuf | flagReadBuf, buf: locSize},
		"a read buffer with one locator only": {kind: kindCall, flags: flagReadBuf, buf: locSize},
	} {
		b := make([]byte, callHeader+locSize)
		h.put(b)
		if _, _, _, err := parseCall(b); !errors.Is(err, ErrBadMessage) {
			t.Errorf("call with %s: %v, want ErrBadMessage", name, err)
		}
	}
	for _, off := range []int{2, 3} {
		b := append([]byte(nil), call...)
		b[off] = 1
		if _, _, _, err := parseCall(b); !errors.Is(err, ErrBadMessage) {
			t.Errorf("call with reserved byte %d set: %v, want ErrBadMessage", off, err)
		}
	}
}

// TestControlMessagesChecked: the coordinator's messages of a running job
// (barrier, release, dead, bye) decode only when whole, of a type the
// receiving side expects, and naming a rank of the job; before, a short
// barrier frame counted as an arrival at barrier 0.
func TestControlMessagesChecked(t *testing.T) {
	const size = 3
	toZero := []uint8{msgBarrier, msgBye}
	toRank := []uint8{msgRelease, msgDead}
	for _, c := range []struct {
		m     control
		types []uint8
	}{
		{control{typ: msgBarrier, seq: 7}, toZero},
		{control{typ: msgBye}, toZero},
		{control{typ: msgRelease, seq: 1 << 31}, toRank},
		{control{typ: msgDead, rank: 2, reason: []byte("gone")}, toRank},
	} {
		b := c.m.encode()
		got, err := decodeControl(b, size, c.types...)
		if err != nil || got.typ != c.m.typ || got.seq != c.m.seq || got.rank != c.m.rank || string(got.reason) != string(c.m.reason) {
			t.Errorf("%+v decodes as %+v, %v", c.m, got, err)
		}
	}
	barrier := control{typ: msgBarrier, seq: 7}.encode()
	dead := control{typ: msgDead, rank: 2, reason: []byte("gone")}.encode()
	for _, c := range []struct {
		name  string
		b     []byte
		types []uint8
	}{
		{"an empty message", nil, toZero},
		{"a barrier without its sequence", barrier[:1], toZero},
		{"a barrier with half a sequence", barrier[:3], toZero},
		{"a barrier with a trailing byte", append(append([]byte(nil), barrier...), 0), toZero},
		{"a bye with a body", append(control{typ: msgBye}.encode(), 1), toZero},
		{"a release sent to rank 0", control{typ: msgRelease, seq: 1}.encode(), toZero},
		{"a barrier sent to a rank", barrier, toRank},
		{"a hello after bootstrap", hello{rank: 1, size: size}.encode(), toZero},
		{"a death of rank 3 in a job of 3", control{typ: msgDead, rank: size}.encode(), toRank},
		{"a death with a short reason", dead[:len(dead)-1], toRank},
		{"a death with a reason over maxString", control{typ: msgDead, reason: make([]byte, maxString+1)}.encode(), toRank},
	} {
		if _, err := decodeControl(c.b, size, c.types...); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: %v, want ErrBadMessage", c.name, err)
		}
	}
}
