package shuffle

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/seriema-go/seriema/alloc"
)

// Every byte format of package shuffle that crosses a process boundary is
// defined here, little-endian; docs/wire.md describes them.

// Offer: what one end of a connection tells the other when they are wired
// (Receiver.Offer, Sender.Attach):
//
//	0 u8 version (2)   1 u8 design
//	2 u16 index: SR only, the index the other end knows this end by (a
//	  receiver's source index for the sender, a sender's destination
//	  index for the receiver), carried in the immediates of its Sends
//	4 u32 depth        8 u32 buffer bytes
//	12 u32 window: the receiver's first window (1…depth); 0 from a sender
//	16 locator (alloc.Locator, 32 bytes): the receiver's ring, or the
//	   sender's credit word
const (
	offerSize    = 48
	wireVersion  = 2
	slotHeader   = 16 // a ring slot's header
	rdSlotBytes  = 64 // an RD ring slot: the buffer's locator and a header
	rdHeaderAt   = alloc.LocatorSize
	recordHeader = 4 // a record's length
)

// RecordOverhead is what a record takes in a buffer beyond its own bytes
// (its u32 length): a buffer of BufferBytes holds records of up to
// BufferBytes − RecordOverhead bytes.
const RecordOverhead = recordHeader

type offer struct {
	design       Design
	depth, bytes int
	window       int // the receiver's first window; 0 in a sender's offer
	index        int // SR: this end's index at the other end
	loc          alloc.Locator
}

func (o offer) marshal() []byte {
	b := make([]byte, offerSize)
	b[0], b[1] = wireVersion, byte(o.design)
	binary.LittleEndian.PutUint16(b[2:], uint16(o.index))
	binary.LittleEndian.PutUint32(b[4:], uint32(o.depth))
	binary.LittleEndian.PutUint32(b[8:], uint32(o.bytes))
	binary.LittleEndian.PutUint32(b[12:], uint32(o.window))
	o.loc.AppendBinary(b[16:16])
	return b
}

func parseOffer(b []byte, cfg Config) (offer, error) {
	if len(b) != offerSize || b[0] != wireVersion {
		return offer{}, fmt.Errorf("%w: %d bytes", ErrBadOffer, len(b))
	}
	o := offer{design: Design(b[1]), index: int(binary.LittleEndian.Uint16(b[2:])), depth: int(binary.LittleEndian.Uint32(b[4:])), bytes: int(binary.LittleEndian.Uint32(b[8:])), window: int(binary.LittleEndian.Uint32(b[12:]))}
	if o.window > o.depth {
		return offer{}, fmt.Errorf("%w: window %d past depth %d", ErrBadOffer, o.window, o.depth)
	}
	if err := o.loc.UnmarshalBinary(b[16:]); err != nil {
		return offer{}, fmt.Errorf("%w: %w", ErrBadOffer, err)
	}
	if o.design != cfg.Design || o.depth != cfg.Depth || o.bytes != cfg.BufferBytes {
		return offer{}, fmt.Errorf("%w: the peer uses %v, depth %d, %d-byte buffers; this end %v, %d, %d", ErrBadOffer, o.design, o.depth, o.bytes, cfg.Design, cfg.Depth, cfg.BufferBytes)
	}
	return o, nil
}

// Ring slot header (in the receiver's ring, one slot per buffer in flight),
// 16 bytes:
//
//	0 u32 length of the data   4 u32 flags (bit 0: Depleted, the sender's
//	  last buffer on this connection)
//	8 u64 sequence number of the buffer in the slot (1, 2, …; 0: never
//	  written): the last word, so that it lands last (dtutils' write
//	  visibility rule); the receiver polls it.
//
// Flag bit 1 (stalled): the sender waited for credit before sending this
// buffer, so the window held it back (the adaptive receiver grows the
// window when a consumer waited for it).
//
// WR slot (BufferBytes+64 bytes): the data at 0, the header at BufferBytes;
// the sender writes the data, then the header, in order on one queue pair.
// RD slot (64 bytes): the locator of the buffer in the sender's memory at
// 0 (32 bytes), the header at 32, written as one 48-byte write; the
// receiver then reads the data from the sender.
const (
	flagDepleted = 1
	flagStalled  = 2
)

func putHeader(b []byte, seq uint64, n int, flags uint32) {
	binary.LittleEndian.PutUint32(b, uint32(n))
	binary.LittleEndian.PutUint32(b[4:], flags)
	binary.LittleEndian.PutUint64(b[8:], seq)
}

func parseHeader(b []byte) (n int, flags uint32) {
	return int(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint32(b[4:])
}

// Credit word, a u64 in the sender's memory written by the receiver:
// bits 0–39 the count of buffers from this sender consumed (released in
// order), bits 40–63 the window. The sender may send buffer n when
// n ≤ consumed + window. Before the first write it holds the receiver's
// first window (from its offer) and a count of 0.
const creditCountBits = 40

func packCredit(consumed uint64, window int) uint64 {
	return consumed&(1<<creditCountBits-1) | uint64(window)<<creditCountBits
}

// unpackCredit returns the count consumed and the highest sequence number
// the sender may send.
func unpackCredit(v uint64) (consumed, limit uint64) {
	consumed = v & (1<<creditCountBits - 1)
	return consumed, consumed + v>>creditCountBits
}

// SR messages carry no header: a data Send is the buffer's bytes, its
// immediate the source's index at the receiver (bits 0–15) and the flags
// (bits 16–31: the slot header's flags); a credit Send is the 8-byte credit
// word, its immediate the destination's index at the sender.
const (
	srIndexBits = 16
	srIndexMask = 1<<srIndexBits - 1
	creditBytes = 8
)

func srImm(index int, flags uint32) uint32 { return uint32(index)&srIndexMask | flags<<srIndexBits }

func parseSRImm(imm uint32) (index int, flags uint32) {
	return int(imm & srIndexMask), imm >> srIndexBits
}

// A buffer holds records, each a u32 length and its bytes, back to back.

// appendRecord appends rec to buf if it fits in max bytes.
func appendRecord(buf []byte, rec []byte, max int) ([]byte, bool) {
	if len(buf)+recordHeader+len(rec) > max {
		return buf, false
	}
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(rec)))
	return append(buf, rec...), true
}

// nextRecord splits the record at the front of b off the rest; false when
// b does not start with a whole record (badRecord says why). It is small
// enough to inline: a receiver calls it once per record.
func nextRecord(b []byte) (rec, rest []byte, ok bool) {
	if len(b) >= recordHeader {
		n := uint64(binary.LittleEndian.Uint32(b))
		if r := b[recordHeader:]; n <= uint64(len(r)) {
			return r[:n], r[n:], true
		}
	}
	return nil, nil, false
}

// badRecord says what is wrong with b, which nextRecord could not split.
func badRecord(b []byte) error {
	if len(b) < recordHeader {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadBuffer, len(b))
	}
	return fmt.Errorf("%w: a %d-byte record in %d bytes", ErrBadBuffer, binary.LittleEndian.Uint32(b), len(b)-recordHeader)
}

// wireMsg is a message of Wiring.Connect between two processes (JSON, a
// dsfabric service call): round 1 carries the sender's queue pairs'
// endpoints (none for a Mesh stage, whose connections exist) and its
// receivers' offers, round 2 its senders' offers (credit words); lists are
// E×E, indexed [sender*E + receiver]. Round 3 (Wiring.Mesh) carries the
// one queue pair endpoint of the pair of processes, E = 1. Round 4 says
// that the sender's endpoints on connection set Set are closed (E = 1, no
// lists): the close handshake (docs/wire.md).
type wireMsg struct {
	Round     int      `json:"round"`
	Endpoints int      `json:"endpoints"`
	Set       int      `json:"set,omitempty"`
	Send      [][]byte `json:"send,omitempty"`
	Recv      [][]byte `json:"recv,omitempty"`
	Offers    [][]byte `json:"offers"`
}

func parseWireMsg(b []byte) (wireMsg, error) {
	var m wireMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return wireMsg{}, fmt.Errorf("%w: wiring message: %v", ErrBadOffer, err)
	}
	n := m.Endpoints * m.Endpoints
	switch {
	case m.Endpoints < 1 || m.Endpoints > 1<<8:
		return wireMsg{}, fmt.Errorf("%w: wiring for %d endpoints", ErrBadOffer, m.Endpoints)
	case m.Round == 1 && (len(m.Send) != len(m.Recv) || len(m.Send) != n && len(m.Send) != 0 || len(m.Offers) != n):
		return wireMsg{}, fmt.Errorf("%w: round 1 lists of %d, %d, %d entries, want %d (or none of queue pairs)", ErrBadOffer, len(m.Send), len(m.Recv), len(m.Offers), n)
	case m.Round == 2 && len(m.Offers) != n:
		return wireMsg{}, fmt.Errorf("%w: round 2 list of %d entries, want %d", ErrBadOffer, len(m.Offers), n)
	case m.Round == 3 && (m.Endpoints != 1 || len(m.Send) != 1 || len(m.Recv) != 0 || len(m.Offers) != 0):
		return wireMsg{}, fmt.Errorf("%w: a mesh message of %d endpoints and lists of %d, %d, %d entries", ErrBadOffer, m.Endpoints, len(m.Send), len(m.Recv), len(m.Offers))
	case m.Round == 4 && (m.Endpoints != 1 || len(m.Send)+len(m.Recv)+len(m.Offers) != 0 || m.Set < 0):
		return wireMsg{}, fmt.Errorf("%w: a closing message for set %d of %d endpoints and lists of %d, %d, %d entries", ErrBadOffer, m.Set, m.Endpoints, len(m.Send), len(m.Recv), len(m.Offers))
	case m.Round < 1 || m.Round > 4:
		return wireMsg{}, fmt.Errorf("%w: wiring round %d", ErrBadOffer, m.Round)
	}
	return m, nil
}
