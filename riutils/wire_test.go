package riutils

import (
	"errors"
	"testing"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
)

// TestRecordsChecked: riutils' decoders refuse, with ErrProtocol, what
// differs from a well-formed record in one field: a record at an offset
// that is not 8-aligned, an allocation request or reply of the wrong
// length or count, an inner record with its reserved word set or running
// past its batch, an extension naming both buffer modes or carrying an
// unused locator that is not zero. (The fuzz targets' seeds are all
// well-formed; `go test` fuzzes nothing.)
func TestRecordsChecked(t *testing.T) {
	// A record at recordsStart parses; the same chunk read at an offset
	// 4 bytes further is refused, not read as a record.
	c := make([]byte, recordsStart+256)
	putRecord(c[recordsStart:recordsStart+recordSize(8)], 7, 1, []byte("12345678"), nil)
	var rec record
	if st, err := parseRecord(c, recordsStart, &rec); st != recOK || err != nil || string(rec.args) != "12345678" {
		t.Fatalf("well-formed record: %v, %v", st, err)
	}
	if _, err := parseRecord(c, recordsStart+4, &rec); !errors.Is(err, ErrProtocol) {
		t.Errorf("record at an unaligned offset: %v", err)
	}

	loc := alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 2}, Length: 8, Key: 3}
	req := allocReq{src: 1, dst: 2, count: 1, size: 4096, feedback: loc}.marshal()
	if _, err := parseAllocReq(req); err != nil {
		t.Fatalf("well-formed allocation request: %v", err)
	}
	if _, err := parseAllocReq(append(req, 0)); !errors.Is(err, ErrProtocol) {
		t.Errorf("allocation request with a trailing byte: %v", err)
	}
	chunk := alloc.Locator{RegionRef: alloc.RegionRef{Process: 2, Region: 5}, Length: 4096, Key: 9}
	reply, _ := chunk.AppendBinary(appendAllocReply(nil, 1))
	if _, err := parseAllocReply(reply, 1, 4096, 2); err != nil {
		t.Fatalf("well-formed allocation reply: %v", err)
	}
	if _, err := parseAllocReply(append(appendAllocReply(nil, 2), reply[4:]...), 1, 4096, 2); !errors.Is(err, ErrProtocol) {
		t.Errorf("allocation reply that counts 2 chunks and carries 1: %v", err)
	}

	in := make([]byte, 64)
	n := putInner(in, 7, []byte("ab"), []byte("cd"))
	if h, args, buf, size, err := nextInner(in[:n]); err != nil || h != 7 || string(args) != "ab" || string(buf) != "cd" || size != n {
		t.Fatalf("well-formed inner record: %v %q %q %d %v", h, args, buf, size, err)
	}
	bad := append([]byte(nil), in[:n]...)
	bad[12] = 1 // the reserved word
	if _, _, _, _, err := nextInner(bad); !errors.Is(err, ErrProtocol) {
		t.Errorf("inner record with its reserved word set: %v", err)
	}
	bad = append([]byte(nil), in[:n]...)
	bad[8] = 200 // a buffer of 200 bytes in a 24-byte record
	if _, _, _, _, err := nextInner(bad); !errors.Is(err, ErrProtocol) {
		t.Errorf("inner record running past its batch: %v", err)
	}

	e := putExt(nil, dsfabric.HandlerID(7), extWrite, loc, alloc.Locator{}, alloc.Locator{})
	if _, err := parseExt(e); err != nil {
		t.Fatalf("well-formed extension: %v", err)
	}
	both := putExt(nil, dsfabric.HandlerID(7), extWrite|extRead, loc, loc, alloc.Locator{})
	if _, err := parseExt(both); !errors.Is(err, ErrProtocol) {
		t.Errorf("extension naming both buffer modes: %v", err)
	}
	stray := append([]byte(nil), e...)
	stray[8+32+7] = 1 // in the unused orig locator
	if _, err := parseExt(stray); !errors.Is(err, ErrProtocol) {
		t.Errorf("extension with an unused locator not zero: %v", err)
	}
}
