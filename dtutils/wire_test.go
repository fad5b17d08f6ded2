package dtutils

import (
	"errors"
	"testing"
)

// The decoders' checks, one malformed field at a time: the fuzz targets'
// seeds are all well-formed, so only a fuzzing run would find a missing
// check, and `go test` runs none.

// change returns a copy of b with f applied.
func change(b []byte, f func(b []byte)) []byte {
	c := append([]byte(nil), b...)
	f(c)
	return c
}

// TestEndpointChecked: an endpoint of another version, with reserved bytes
// set, or with bytes before or after its address, is ErrBadEndpoint.
func TestEndpointChecked(t *testing.T) {
	good := endpoint{transport: transportTCP, rank: 1, token: 2, addr: "127.0.0.1:1"}.marshal()
	if ep, err := parseEndpoint(good, transportTCP); err != nil || ep.addr != "127.0.0.1:1" || ep.rank != 1 {
		t.Fatalf("well-formed endpoint: %+v, %v", ep, err)
	}
	for name, b := range map[string][]byte{
		"version 9":                change(good, func(b []byte) { b[1] = 9 }),
		"reserved u16":             change(good, func(b []byte) { b[3] = 1 }),
		"reserved u32":             change(good, func(b []byte) { b[21] = 1 }),
		"a byte after the address": append(append([]byte(nil), good...), 0),
		"the address cut short":    good[:len(good)-1],
		"another transport":        change(good, func(b []byte) { b[0] = transportSHM }),
	} {
		if _, err := parseEndpoint(b, transportTCP); !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("endpoint with %s: %v, want ErrBadEndpoint", name, err)
		}
	}
}

// TestFrameChecked: a frame whose payload is not what its op carries
// (fewer bytes than a write's length, none for a successful atomic's
// answer) is ErrBadFrame.
func TestFrameChecked(t *testing.T) {
	var b [frameHeader]byte
	good := frame{op: uint8(OpWrite), length: 8, payload: 8, region: 1}
	good.put(b[:])
	if _, err := parseFrame(b[:], 1<<20); err != nil {
		t.Fatalf("well-formed write: %v", err)
	}
	for name, fr := range map[string]frame{
		"a write shorter than its length":          {op: uint8(OpWrite), length: 8, payload: 4, region: 1},
		"a successful fetch-add answer of 0 bytes": {op: uint8(OpFetchAdd) | frameResp, length: 8},
		"a read answer shorter than its length":    {op: uint8(OpRead) | frameResp, length: 16, payload: 8},
		"a call reply shorter than its length":     {op: uint8(OpCall) | frameResp, length: 16, payload: 8},
	} {
		fr.put(b[:])
		if _, err := parseFrame(b[:], 1<<20); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: %v, want ErrBadFrame", name, err)
		}
	}
}

// TestOFIRecordsChecked: an ofi message header with reserved bytes set or
// a control message with a body, a region question with its reserved word set, and a region answer with a
// status the protocol does not have are ErrBadFrame.
func TestOFIRecordsChecked(t *testing.T) {
	h := make([]byte, ofiHeader)
	ofiMsgHeader{token: 7, kind: ofiKindProbe, seq: 1}.put(h)
	ask := ofiRegionAsk{region: 3, key: 0xfeed}.append(nil)
	answer := ofiRegionAnswer{region: 3, status: ofiRegionNoSided, key: 0xfeed, length: 4096}.append(nil)
	if _, err := parseOFIHeader(h); err != nil {
		t.Fatalf("well-formed header: %v", err)
	}
	if _, err := parseRegionAsk(ask); err != nil {
		t.Fatalf("well-formed question: %v", err)
	}
	if _, err := parseRegionAnswer(answer); err != nil {
		t.Fatalf("well-formed answer: %v", err)
	}
	for _, off := range []int{9, 10, 11} {
		if _, err := parseOFIHeader(change(h, func(b []byte) { b[off] = 1 })); !errors.Is(err, ErrBadFrame) {
			t.Errorf("header with reserved byte %d set: %v", off, err)
		}
	}
	if _, err := parseOFIHeader(append(append([]byte(nil), h...), 0)); !errors.Is(err, ErrBadFrame) {
		t.Errorf("probe with a 1-byte body: %v", err)
	}
	if _, err := parseRegionAsk(change(ask, func(b []byte) { b[5] = 1 })); !errors.Is(err, ErrBadFrame) {
		t.Errorf("question with its reserved word set: %v", err)
	}
	if _, err := parseRegionAnswer(change(answer, func(b []byte) { b[4] = ofiRegionNoSided + 1 })); !errors.Is(err, ErrBadFrame) {
		t.Errorf("answer with status %d: %v", ofiRegionNoSided+1, err)
	}
}

// TestRingChecked: a ring a peer formatted is taken only with its magic
// and a capacity that is a power of two (the fuzz seeds are well-formed).
func TestRingChecked(t *testing.T) {
	mem := make([]byte, ringBytes(4, 8))
	if _, err := initRing(mem, 4, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := openRing(mem); err != nil {
		t.Fatalf("well-formed ring: %v", err)
	}
	for name, edit := range map[string]func(r *ring){
		"no magic":   func(r *ring) { r.word(0).Store(0) },
		"capacity 3": func(r *ring) { r.word(8).Store(3) },
	} {
		bad := change(mem, func(b []byte) { edit(&ring{mem: b}) })
		if _, err := openRing(bad); !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("ring with %s: %v, want ErrBadEndpoint", name, err)
		}
	}
}

// TestCallAreaChecked: a call area whose rings do not have its slot count
// is refused.
func TestCallAreaChecked(t *testing.T) {
	mem := make([]byte, callAreaBytes(4, 64))
	if _, err := initCallArea(mem, 4, 64); err != nil {
		t.Fatal(err)
	}
	if _, err := openCallArea(mem); err != nil {
		t.Fatalf("well-formed call area: %v", err)
	}
	// The free ring says 2 cells where the area has 4 slots (2 still fit
	// the ring's memory, so only the area's own check can see it).
	(&ring{mem: mem[callHeader:]}).word(8).Store(2)
	if _, err := openCallArea(mem); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("call area with a free ring of 2 cells for 4 slots: %v, want ErrBadEndpoint", err)
	}
}

// TestMisuseErrors: a mismatched ConnectAll and a completion status no
// transport writes are refused with sentinels a caller can test for.
func TestMisuseErrors(t *testing.T) {
	if err := ConnectAll(make([]QueuePair, 2), make([][]byte, 1)); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("ConnectAll of 2 queue pairs to 1 endpoint: %v, want ErrBadEndpoint", err)
	}
	for s := StatusSuccess; s < numStatus; s++ {
		if err := s.Err(); (err == nil) != (s == StatusSuccess) || errors.Is(err, ErrBadFrame) {
			t.Errorf("status %v: Err() = %v", s, err)
		}
	}
	if err := numStatus.Err(); !errors.Is(err, ErrBadFrame) {
		t.Errorf("an unknown status: Err() = %v, want ErrBadFrame", err)
	}
}
