package rdmo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/seriema-go/seriema/alloc"
)

func TestRecordsRoundTrip(t *testing.T) {
	b := make([]byte, 64)
	n := putRequest(b, 7, 11, 13, []byte("in"))
	r, err := parseRequest(b[:n])
	if err != nil || r.method != 7 || r.id != 11 || r.secret != 13 || string(r.input) != "in" {
		t.Fatalf("%+v %v", r, err)
	}
	copy(b[replyHeader:], "out")
	code, out, err := parseReply(b[:putReplyHeader(b, CodeUser+1, 3)])
	if err != nil || code != CodeUser+1 || string(out) != "out" {
		t.Fatalf("%v %q %v", code, out, err)
	}
	c := Capability{Process: 3, ID: 5, Secret: 8}
	enc, _ := c.MarshalBinary()
	var d Capability
	if err := d.UnmarshalBinary(enc); err != nil || d != c {
		t.Fatalf("%+v %v", d, err)
	}
}

// FuzzRequest feeds arbitrary request records to an engine serving the
// built-in types and the failure test type: it never panics, and its reply
// is always a well-formed record whose code is OK, an engine code or a
// method's.
func FuzzRequest(f *testing.F) {
	w := newWorld(f, testTransports[0], worldConfig{})
	if err := w.engine.Register(testType(nil, nil)); err != nil {
		f.Fatal(err)
	}
	page, _ := w.instance(f, 0, 4096)
	InitSlottedPage(page.Bytes(), 16)
	pc := w.create(f, SlottedPageType, page)
	acc, _ := w.instance(f, 4096, accumHeader+8*8)
	InitAccumulator(acc.Bytes(), []uint64{0, 1, 2, 9}, 4)
	ac := w.create(f, AccumulatorType, acc)
	tm, _ := w.instance(f, 8192, 64)
	tc := w.create(f, "test", tm)
	for _, c := range []Capability{pc, ac, tc} {
		for m := uint16(0); m < 4; m++ {
			b := make([]byte, 64)
			f.Add(b[:putRequest(b, m, c.ID, c.Secret, []byte("0123456789abcdef"))])
		}
	}
	reply := make([]byte, 4096)
	f.Fuzz(func(t *testing.T, req []byte) {
		if len(req) >= 4 && binary.LittleEndian.Uint16(req[2:]) == 4 { // the test type's hold method blocks
			return
		}
		n := w.engine.serve(1, req, reply)
		code, out, err := parseReply(reply[:n])
		if err != nil {
			t.Fatalf("malformed reply to %x: %v", req, err)
		}
		if code != OK && code < CodeUser && len(out) != 0 {
			t.Fatalf("engine code %v with %d output bytes", code, len(out))
		}
		if _, perr := parseRequest(req); perr != nil && code != CodeMalformed {
			t.Fatalf("malformed request answered %v", code)
		}
	})
}

func FuzzReply(f *testing.F) {
	b := make([]byte, 32)
	copy(b[replyHeader:], "abc")
	f.Add(b[:putReplyHeader(b, OK, 3)])
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, rep []byte) {
		code, out, err := parseReply(rep)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatal(err)
			}
			return
		}
		b := make([]byte, replyHeader+len(out))
		copy(b[replyHeader:], out)
		if !bytes.Equal(b[:putReplyHeader(b, code, len(out))], rep) {
			t.Fatalf("reply %x does not round-trip", rep)
		}
	})
}

func FuzzCapability(f *testing.F) {
	enc, _ := Capability{Process: 1, ID: 2, Secret: 3}.MarshalBinary()
	f.Add(enc)
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Capability
		if err := c.UnmarshalBinary(b); err != nil {
			return
		}
		again, _ := c.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatalf("capability %x does not round-trip", b)
		}
	})
}

// FuzzDescribe: a describe record (direct mode) from an engine decodes to
// what was put, and anything else is ErrMalformed, never a panic.
func FuzzDescribe(f *testing.F) {
	d := description{typeName: AccumulatorType, methods: 1,
		inst:  alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 2}, Offset: 64, Length: 128, Key: 9},
		valid: alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 3}, Offset: 8, Length: 8, Key: 7}}
	b := make([]byte, 512)
	f.Add(b[:putDescribe(b, d)])
	f.Add([]byte{1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, rec []byte) {
		d, err := parseDescribe(rec)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatal(err)
			}
			return
		}
		if n := putDescribe(b, d); !bytes.Equal(b[:n], rec) {
			t.Fatalf("describe record %x does not round-trip (%x)", rec, b[:n])
		}
	})
}

// TestRecordsChecked: each decoder takes its well-formed record and
// refuses, with ErrMalformed, one that differs from it in a reserved
// field, its version or its length (the fuzz targets' seeds are all
// well-formed, so only fuzzing would find a missing check).
func TestRecordsChecked(t *testing.T) {
	req := make([]byte, 64)
	req = req[:putRequest(req, 7, 11, 13, []byte("in"))]
	rep := make([]byte, 64)
	copy(rep[replyHeader:], "out")
	rep = rep[:putReplyHeader(rep, OK, 3)]
	capRec, _ := Capability{Process: 3, ID: 5, Secret: 8}.MarshalBinary()
	desc := make([]byte, 512)
	desc = desc[:putDescribe(desc, description{typeName: AccumulatorType, methods: 1,
		inst:  alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 2}, Offset: 64, Length: 128, Key: 9},
		valid: alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 3}, Offset: 8, Length: 8, Key: 7}})]
	parsers := map[string]func([]byte) error{
		"request":    func(b []byte) error { _, err := parseRequest(b); return err },
		"reply":      func(b []byte) error { _, _, err := parseReply(b); return err },
		"capability": func(b []byte) error { var c Capability; return c.UnmarshalBinary(b) },
		"describe":   func(b []byte) error { _, err := parseDescribe(b); return err },
	}
	good := map[string][]byte{"request": req, "reply": rep, "capability": capRec, "describe": desc}
	for kind, b := range good {
		if err := parsers[kind](b); err != nil {
			t.Fatalf("well-formed %s: %v", kind, err)
		}
	}
	// edit returns a copy of kind's good record changed by f.
	edit := func(kind string, f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good[kind]...))
	}
	set := func(off int, v byte) func([]byte) []byte {
		return func(b []byte) []byte { b[off] = v; return b }
	}
	for _, c := range []struct {
		kind, name string
		rec        []byte
	}{
		{"request", "version 2", edit("request", set(0, 2))},
		{"request", "reserved byte", edit("request", set(1, 1))},
		{"request", "reserved word", edit("request", set(6, 1))},
		{"request", "short header", good["request"][:requestHeader-1]},
		{"reply", "reserved word", edit("reply", set(3, 1))},
		{"reply", "output longer than said", edit("reply", set(4, 2))},
		{"reply", "output shorter than said", edit("reply", set(4, 4))},
		{"reply", "short header", good["reply"][:replyHeader-1]},
		{"capability", "reserved word", edit("capability", set(5, 1))},
		{"capability", "one byte short", good["capability"][:capabilitySize-1]},
		{"capability", "one byte long", append(edit("capability", func(b []byte) []byte { return b }), 0)},
		{"describe", "version 2", edit("describe", set(0, 2))},
		{"describe", "empty type name", edit("describe", set(1, 0))},
		{"describe", "reserved word", edit("describe", set(7, 1))},
		{"describe", "a byte after the type name", append(edit("describe", func(b []byte) []byte { return b }), 'x')},
		{"describe", "type name past the end", edit("describe", func(b []byte) []byte { b[1]++; return b })},
		{"describe", "revocation word of 16 bytes", edit("describe", set(40+16, 16))},
		{"describe", "instance of region 0", edit("describe", set(8+4, 0))},
	} {
		if err := parsers[c.kind](c.rec); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s with %s: %v, want ErrMalformed", c.kind, c.name, err)
		}
	}
}
