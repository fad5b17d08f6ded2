package dsfabric

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Every byte format of package dsfabric that crosses a process boundary is
// defined in this file, little-endian; docs/wire.md describes them.

// ---- coordinator messages (bootstrap, barrier, deaths) ----
//
// On the coordinator connection every message is a u32 length (of what
// follows), a u8 type and the body. Strings and byte strings are a u32
// length and the bytes.

const (
	msgHello     = 1  // rank>0 → 0: version u8, rank u32, size u32, token str, machine str, shm probe str
	msgTable     = 2  // 0 → all: size u32, (machine str, shm probe str) × size
	msgEndpoints = 3  // r → 0: count u32, (peer u32, transport u8, endpoint bytes) × count: calls lane, then data lane, per peer
	msgPeers     = 4  // 0 → r: the same layout: endpoints other ranks made for r
	msgBarrier   = 5  // r → 0: seq u32
	msgRelease   = 6  // 0 → r: seq u32
	msgDead      = 7  // 0 → r: rank u32, reason str
	msgBye       = 8  // r → 0: orderly end
	msgRefused   = 9  // 0 → would-be rank: reason str
	msgReach     = 10 // r → 0: count u32, rank u32 × count: ranks whose shm probe r passed
	msgPlan      = 11 // 0 → r: count u32, rank u32 × count: ranks r talks to over shm (both probes passed)

	protoVersion  = 3 // 3: endpoint entries lost their transport byte
	maxCoordFrame = 16 << 20
	maxString     = 1 << 20
)

// wbuf appends little-endian fields.
type wbuf []byte

func (w wbuf) u8(v uint8) wbuf   { return append(w, v) }
func (w wbuf) u32(v uint32) wbuf { return binary.LittleEndian.AppendUint32(w, v) }
func (w wbuf) str(s []byte) wbuf { return append(w.u32(uint32(len(s))), s...) }

// rbuf reads fields, remembering the first error; reads after an error
// return zero values, so callers check err once at the end.
type rbuf struct {
	b   []byte
	err error
}

func (r *rbuf) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: need %d bytes, have %d", ErrBadMessage, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *rbuf) u8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *rbuf) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *rbuf) str() []byte {
	n := r.u32()
	if n > maxString {
		if r.err == nil {
			r.err = fmt.Errorf("%w: string of %d bytes", ErrBadMessage, n)
		}
		return nil
	}
	return r.take(int(n))
}

// done reports an error if bytes are left over or a read failed.
func (r *rbuf) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrBadMessage, len(r.b))
	}
	return r.err
}

type hello struct {
	rank, size uint32
	token      []byte
	machine    string
	probe      []byte // dtutils.SHMProbe of the rank; empty when it offers no shm
}

func (h hello) encode() []byte {
	return wbuf{msgHello}.u8(protoVersion).u32(h.rank).u32(h.size).str(h.token).str([]byte(h.machine)).str(h.probe)
}

func decodeHello(b []byte) (hello, error) {
	r := rbuf{b: b}
	if r.u8() != msgHello {
		return hello{}, fmt.Errorf("%w: not a hello", ErrBadMessage)
	}
	if v := r.u8(); v != protoVersion && r.err == nil {
		return hello{}, fmt.Errorf("%w: protocol version %d, want %d", ErrBadMessage, v, protoVersion)
	}
	h := hello{rank: r.u32(), size: r.u32(), token: r.str(), machine: string(r.str()), probe: r.str()}
	if err := r.done(); err != nil {
		return hello{}, err
	}
	return h, nil
}

// member is one rank's entry of the table.
type member struct {
	machine string
	probe   []byte
}

func encodeTable(ms []member) []byte {
	w := wbuf{msgTable}.u32(uint32(len(ms)))
	for _, m := range ms {
		w = w.str([]byte(m.machine)).str(m.probe)
	}
	return w
}

func decodeTable(b []byte, size int) ([]member, error) {
	r := rbuf{b: b}
	if r.u8() != msgTable {
		return nil, fmt.Errorf("%w: not a table", ErrBadMessage)
	}
	n := r.u32()
	if r.err == nil && int(n) != size {
		return nil, fmt.Errorf("%w: table of %d ranks for a job of %d", ErrBadMessage, n, size)
	}
	ms := make([]member, 0, size)
	for i := 0; i < int(n) && r.err == nil; i++ {
		ms = append(ms, member{machine: string(r.str()), probe: r.str()})
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return ms, nil
}

// encodeRanks and decodeRanks are msgReach and msgPlan: a list of ranks.
func encodeRanks(typ uint8, ranks []int) []byte {
	w := wbuf{typ}.u32(uint32(len(ranks)))
	for _, r := range ranks {
		w = w.u32(uint32(r))
	}
	return w
}

func decodeRanks(b []byte, typ uint8, size int) ([]int, error) {
	r := rbuf{b: b}
	if r.u8() != typ {
		return nil, fmt.Errorf("%w: expected message type %d", ErrBadMessage, typ)
	}
	n := r.u32()
	if int(n) > size && r.err == nil {
		return nil, fmt.Errorf("%w: %d ranks in a job of %d", ErrBadMessage, n, size)
	}
	var out []int
	for i := 0; i < int(n) && r.err == nil; i++ {
		v := r.u32()
		if r.err == nil && int(v) >= size {
			return nil, fmt.Errorf("%w: rank %d in a job of %d", ErrBadMessage, v, size)
		}
		out = append(out, int(v))
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return out, nil
}

// control is a coordinator message of a running job: a barrier's
// arrival (msgBarrier) or release (msgRelease), a death (msgDead) or a
// rank's goodbye (msgBye).
type control struct {
	typ    uint8
	seq    uint32 // msgBarrier, msgRelease
	rank   uint32 // msgDead
	reason []byte // msgDead
}

func (c control) encode() []byte {
	w := wbuf{c.typ}
	switch c.typ {
	case msgBarrier, msgRelease:
		w = w.u32(c.seq)
	case msgDead:
		w = w.u32(c.rank).str(c.reason)
	}
	return w
}

// decodeControl parses a control message of one of the types the
// receiving side expects (rank 0: barrier and bye; the others: release
// and dead), in a job of size ranks.
func decodeControl(b []byte, size int, types ...uint8) (control, error) {
	r := rbuf{b: b}
	c := control{typ: r.u8()}
	if r.err == nil && !slices.Contains(types, c.typ) {
		return control{}, fmt.Errorf("%w: coordinator message of type %d here", ErrBadMessage, c.typ)
	}
	switch c.typ {
	case msgBarrier, msgRelease:
		c.seq = r.u32()
	case msgDead:
		c.rank, c.reason = r.u32(), r.str()
		if r.err == nil && int(c.rank) >= size {
			return control{}, fmt.Errorf("%w: rank %d dead in a job of %d", ErrBadMessage, c.rank, size)
		}
	}
	if err := r.done(); err != nil {
		return control{}, err
	}
	return c, nil
}

// epEntry is one queue-pair endpoint in msgEndpoints / msgPeers.
// The endpoint bytes name their transport themselves (dtutils).
type epEntry struct {
	peer uint32
	ep   []byte
}

func encodeEndpoints(typ uint8, es []epEntry) []byte {
	w := wbuf{typ}.u32(uint32(len(es)))
	for _, e := range es {
		w = w.u32(e.peer).str(e.ep)
	}
	return w
}

func decodeEndpoints(b []byte, typ uint8, size int) ([]epEntry, error) {
	r := rbuf{b: b}
	if r.u8() != typ {
		return nil, fmt.Errorf("%w: expected message type %d", ErrBadMessage, typ)
	}
	n := r.u32()
	if int(n) > 2*size && r.err == nil { // two queue pairs per peer
		return nil, fmt.Errorf("%w: %d endpoints in a job of %d", ErrBadMessage, n, size)
	}
	var es []epEntry
	for i := 0; i < int(n) && r.err == nil; i++ {
		e := epEntry{peer: r.u32(), ep: r.str()}
		if r.err == nil && int(e.peer) >= size {
			return nil, fmt.Errorf("%w: endpoint for rank %d in a job of %d", ErrBadMessage, e.peer, size)
		}
		es = append(es, e)
	}
	if err := r.done(); err != nil {
		return nil, err // not the entries read before the error
	}
	return es, nil
}

// ---- calls (send-based messages between ranks) ----
//
// Every send-based message starts with a 32-byte header:
//
//	0  u8  kind       (kindCall, kindReply, kindNotify, kindBroadcast)
//	1  u8  flags      (flag*)
//	2  u16 reserved
//	4  u32 handler ID
//	8  u32 source thread
//	12 u32 destination thread (kindBroadcast: the root rank)
//	16 u64 call ID    (correlates replies and notifications; 0 when none)
//	24 u32 argument bytes
//	28 u32 buffer bytes
//
// then the arguments, then the buffer (CallBuffer) or, with flagDestBuf or
// flagReadBuf, one or two 32-byte alloc.Locators instead of the buffer.
const (
	kindCall      = 1
	kindReply     = 2
	kindNotify    = 3
	kindBroadcast = 4
	kindCredit    = 5 // a hello: the arguments are the locator of the sender's credit word

	flagService = 1 << 0 // run on a service thread, not a worker
	flagReply   = 1 << 1 // the caller waits for a reply (CallReturn)
	flagNotify  = 1 << 2 // the caller wants a notification once the handler ran
	flagDestBuf = 1 << 3 // the buffer was written into a destination buffer: its locator follows
	flagReadBuf = 1 << 4 // the destination reads the buffer: source and destination locators follow
	flagError   = 1 << 5 // (replies) the payload is an error message
	flagsKnown  = 1<<6 - 1

	callHeader = 32
	locSize    = 32
)

type callHdr struct {
	kind, flags uint8
	handler     HandlerID
	src, dst    uint32
	callID      uint64
	args, buf   uint32
}

func (h *callHdr) put(b []byte) {
	b[0], b[1], b[2], b[3] = h.kind, h.flags, 0, 0
	binary.LittleEndian.PutUint32(b[4:], uint32(h.handler))
	binary.LittleEndian.PutUint32(b[8:], h.src)
	binary.LittleEndian.PutUint32(b[12:], h.dst)
	binary.LittleEndian.PutUint64(b[16:], h.callID)
	binary.LittleEndian.PutUint32(b[24:], h.args)
	binary.LittleEndian.PutUint32(b[28:], h.buf)
}

// parseCall checks a received message and splits it into header, arguments
// and the buffer part (buffer bytes or locators).
func parseCall(b []byte) (callHdr, []byte, []byte, error) {
	if len(b) < callHeader {
		return callHdr{}, nil, nil, fmt.Errorf("%w: %d-byte call", ErrBadMessage, len(b))
	}
	h := callHdr{
		kind: b[0], flags: b[1],
		handler: HandlerID(binary.LittleEndian.Uint32(b[4:])),
		src:     binary.LittleEndian.Uint32(b[8:]),
		dst:     binary.LittleEndian.Uint32(b[12:]),
		callID:  binary.LittleEndian.Uint64(b[16:]),
		args:    binary.LittleEndian.Uint32(b[24:]),
		buf:     binary.LittleEndian.Uint32(b[28:]),
	}
	if h.kind < kindCall || h.kind > kindCredit || h.flags&^flagsKnown != 0 || b[2] != 0 || b[3] != 0 {
		return h, nil, nil, fmt.Errorf("%w: kind %d flags %#x", ErrBadMessage, h.kind, h.flags)
	}
	rest := b[callHeader:]
	if uint64(h.args)+uint64(h.buf) != uint64(len(rest)) {
		return h, nil, nil, fmt.Errorf("%w: %d argument and %d buffer bytes in a %d-byte body", ErrBadMessage, h.args, h.buf, len(rest))
	}
	want := uint32(0)
	switch {
	case h.flags&flagDestBuf != 0 && h.flags&flagReadBuf != 0:
		return h, nil, nil, fmt.Errorf("%w: both buffer modes", ErrBadMessage)
	case h.flags&flagDestBuf != 0:
		want = locSize
	case h.flags&flagReadBuf != 0:
		want = 2 * locSize
	}
	if want != 0 && h.buf != want {
		return h, nil, nil, fmt.Errorf("%w: %d locator bytes, want %d", ErrBadMessage, h.buf, want)
	}
	return h, rest[:h.args], rest[h.args:], nil
}
