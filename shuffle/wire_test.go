package shuffle

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/seriema-go/seriema/alloc"
)

// FuzzOffer: an endpoint description from a peer decodes to what was
// marshalled, or is refused with ErrBadOffer; never a panic.
func FuzzOffer(f *testing.F) {
	cfg := DefaultConfig()
	good := offer{design: cfg.Design, depth: cfg.Depth, bytes: cfg.BufferBytes, window: 2,
		loc: alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 2}, Offset: 64, Length: 4096, Key: 7}}.marshal()
	f.Add(good)
	f.Add(good[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := parseOffer(b, cfg)
		if err != nil {
			if !errors.Is(err, ErrBadOffer) {
				t.Fatal(err)
			}
			return
		}
		if o.window < 0 || o.window > o.depth {
			t.Fatalf("accepted window %d with depth %d", o.window, o.depth)
		}
		if again := o.marshal(); !bytes.Equal(again, b) {
			t.Fatalf("offer %x does not round-trip (%x)", b, again)
		}
	})
}

// FuzzRecords: a received buffer splits into the records that were
// appended, or fails with ErrBadBuffer, never reading past it.
func FuzzRecords(f *testing.F) {
	var buf []byte
	for _, r := range [][]byte{[]byte("a"), nil, bytes.Repeat([]byte("x"), 40)} {
		buf, _ = appendRecord(buf, r, 1<<10)
	}
	f.Add(buf)
	f.Add([]byte{9, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var again []byte
		for rest := b; len(rest) > 0; {
			rec, r, ok := nextRecord(rest)
			if !ok {
				if err := badRecord(rest); !errors.Is(err, ErrBadBuffer) {
					t.Fatal(err)
				}
				return
			}
			again, _ = appendRecord(again, rec, len(b))
			rest = r
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("buffer %x does not round-trip", b)
		}
	})
}

// FuzzWireMsg: a wiring message from a peer (JSON) is refused with
// ErrBadOffer or has lists sized for its endpoint count; never a panic.
func FuzzWireMsg(f *testing.F) {
	f.Add([]byte(`{"round":1,"endpoints":1,"send":["AA=="],"recv":["AA=="],"offers":["AA=="]}`))
	f.Add([]byte(`{"round":2,"endpoints":2,"offers":["","","",""]}`))
	f.Add([]byte(`{"round":1,"endpoints":65536}`))
	f.Add([]byte(`{"round":3,"endpoints":1,"send":["AA=="]}`))
	f.Add([]byte(`{"round":4,"endpoints":1,"set":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseWireMsg(b)
		if err != nil {
			if !errors.Is(err, ErrBadOffer) {
				t.Fatal(err)
			}
			return
		}
		n := m.Endpoints * m.Endpoints
		switch {
		case m.Round == 3 && (len(m.Send) != 1 || len(m.Offers) != 0),
			m.Round == 4 && (m.Endpoints != 1 || len(m.Send)+len(m.Recv)+len(m.Offers) != 0 || m.Set < 0),
			m.Round < 3 && len(m.Offers) != n,
			m.Round < 1 || m.Round > 4,
			m.Round == 1 && (len(m.Send) != len(m.Recv) || len(m.Send) != 0 && len(m.Send) != n):
			t.Fatalf("accepted %+v", m)
		}
	})
}

// TestCreditWord: the credit word carries the count consumed and the
// window; the sender's limit never lets a window past the ring's depth
// overwrite a slot not yet consumed.
func TestCreditWord(t *testing.T) {
	for _, c := range []struct {
		consumed uint64
		window   int
	}{{0, 1}, {5, 32}, {1<<creditCountBits - 1, 4096}} {
		got, limit := unpackCredit(packCredit(c.consumed, c.window))
		if got != c.consumed || limit != c.consumed+uint64(c.window) {
			t.Errorf("%+v: consumed %d, limit %d", c, got, limit)
		}
	}
	sc := sendConn{credit: new(atomic.Uint64)}
	sc.credit.Store(packCredit(10, 1<<20)) // a corrupt window
	if _, limit := sc.limit(32); limit != 42 {
		t.Errorf("window past the depth: limit %d, want 42", limit)
	}
}
