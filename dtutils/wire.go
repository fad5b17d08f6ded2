package dtutils

import (
	"encoding/binary"
	"fmt"
)

// Every byte format of package dtutils that crosses a process boundary is
// defined in this file, little-endian throughout; docs/wire.md describes them.

// Receive descriptor: one posted receive in the shared receive queue.
//
//	0  u32 region   4 u32 reserved   8 u64 key
//	16 u64 offset  24 u64 length    32 u64 wrid
const recvDescSize = 40

type recvDesc struct {
	region      uint32
	key, off, n uint64
	wrid        uint64
}

func (d recvDesc) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], d.region)
	binary.LittleEndian.PutUint32(b[4:], 0)
	binary.LittleEndian.PutUint64(b[8:], d.key)
	binary.LittleEndian.PutUint64(b[16:], d.off)
	binary.LittleEndian.PutUint64(b[24:], d.n)
	binary.LittleEndian.PutUint64(b[32:], d.wrid)
}

func getRecvDesc(b []byte) recvDesc {
	return recvDesc{
		region: binary.LittleEndian.Uint32(b[0:]),
		key:    binary.LittleEndian.Uint64(b[8:]),
		off:    binary.LittleEndian.Uint64(b[16:]),
		n:      binary.LittleEndian.Uint64(b[24:]),
		wrid:   binary.LittleEndian.Uint64(b[32:]),
	}
}

// Receive completion: one entry of the receive completion ring, a 16-byte
// header and then either the wrid of the receive it completes or, for a
// send delivered inline, the message itself (the receiving process then
// takes a posted receive and copies it there when it polls).
//
//	0  u32 bytes   4 u32 imm   8 u32 source rank   12 u8 op   13 u8 status
//	14 u8 flags (bit 0: inline)   15 u8 reserved
//	16 u64 wrid, or the inline message (bytes ≤ recvInlineMax)
//
// The entry is 312 bytes, so a cell (with the ring's 8-byte sequence) is
// five cache lines: a dsfabric call with 256 bytes of arguments (288
// bytes) goes inline, and a message of up to 40 bytes (one with 8 bytes of
// arguments) fills only the first line.
const (
	recvComplHdr  = 16
	recvComplSize = 312
	recvInlineMax = recvComplSize - recvComplHdr

	complInline = 1 << 0
)

func putRecvComplHdr(b []byte, c Completion, flags byte) {
	binary.LittleEndian.PutUint32(b[0:], uint32(c.Bytes))
	binary.LittleEndian.PutUint32(b[4:], c.Imm)
	binary.LittleEndian.PutUint32(b[8:], c.Src)
	b[12], b[13], b[14], b[15] = byte(c.Op), byte(c.Status), flags, 0
}

func putRecvCompl(b []byte, c Completion) {
	putRecvComplHdr(b, c, 0)
	binary.LittleEndian.PutUint64(b[16:], c.WRID)
}

// getRecvCompl decodes an entry's header; inline reports a message that
// follows it (c.WRID is then unset), otherwise the wrid is read.
func getRecvCompl(b []byte) (c Completion, inline bool) {
	c = Completion{
		Bytes:  int(binary.LittleEndian.Uint32(b[0:])),
		Imm:    binary.LittleEndian.Uint32(b[4:]),
		Src:    binary.LittleEndian.Uint32(b[8:]),
		Op:     Op(b[12]),
		Status: Status(b[13]),
	}
	if b[14]&complInline != 0 {
		return c, true
	}
	c.WRID = binary.LittleEndian.Uint64(b[16:])
	return c, false
}

// complTail is how many bytes of an entry follow its header: the message
// of an inline one (at most recvInlineMax, whatever a corrupt length
// says), else the wrid. The ring copies no more of a cell than this.
func complTail(hdr []byte) int {
	if hdr[14]&complInline != 0 {
		return min(int(binary.LittleEndian.Uint32(hdr[0:])), recvInlineMax)
	}
	return 8
}

// Receive counters: three cache lines after the completion ring. ready
// counts receives posted (stored by the receiving process after the
// descriptor is in the queue), claimed counts the sends and
// writes-with-immediate that have taken one of them (each claim is later
// consumed by exactly one dequeue of a descriptor: by the sender, or for an
// inline send by the receiver), so claimed ≤ ready always. minLen is the
// length of the shortest receive ever posted (0: none yet); it only falls.
//
//	0 u64 ready   64 u64 claimed   128 u64 minLen
const (
	recvCountersBytes = 192
	cntReadyAt        = 0
	cntClaimedAt      = 64
	cntMinLenAt       = 128
)

// Endpoints: what one side of a queue pair gives the other to connect.
//
//	0 u8 transport (1 loop, 2 shm, 3 tcp, 4 ofi)   1 u8 version (1)   2 u16 reserved
//	4 u32 process rank   8 u64 token (queue pair identity)
//	16 u32 srq region   20 u32 reserved   24 u64 srq key        (shm; zero otherwise)
//	32 u16 address length   34 address bytes (shm: unix socket path; tcp:
//	host:port; ofi: the libfabric endpoint name from fi_getname, raw)
const (
	transportLoop = 1
	transportSHM  = 2
	transportTCP  = 3
	transportOFI  = 4

	endpointVersion = 1
	endpointFixed   = 34
	maxAddrLen      = 1024
)

type endpoint struct {
	transport uint8
	rank      uint32
	token     uint64
	srqRegion uint32
	srqKey    uint64
	addr      string
}

func (e endpoint) marshal() []byte {
	b := make([]byte, endpointFixed, endpointFixed+len(e.addr))
	b[0], b[1] = e.transport, endpointVersion
	binary.LittleEndian.PutUint32(b[4:], e.rank)
	binary.LittleEndian.PutUint64(b[8:], e.token)
	binary.LittleEndian.PutUint32(b[16:], e.srqRegion)
	binary.LittleEndian.PutUint64(b[24:], e.srqKey)
	binary.LittleEndian.PutUint16(b[32:], uint16(len(e.addr)))
	return append(b, e.addr...)
}

func parseEndpoint(b []byte, transport uint8) (endpoint, error) {
	if len(b) < endpointFixed {
		return endpoint{}, fmt.Errorf("%w: %d bytes", ErrBadEndpoint, len(b))
	}
	if b[0] != transport || b[1] != endpointVersion {
		return endpoint{}, fmt.Errorf("%w: transport %d version %d, want transport %d version %d", ErrBadEndpoint, b[0], b[1], transport, endpointVersion)
	}
	if binary.LittleEndian.Uint16(b[2:]) != 0 || binary.LittleEndian.Uint32(b[20:]) != 0 {
		return endpoint{}, fmt.Errorf("%w: reserved bytes set", ErrBadEndpoint)
	}
	n := int(binary.LittleEndian.Uint16(b[32:]))
	if n > maxAddrLen || len(b) != endpointFixed+n {
		return endpoint{}, fmt.Errorf("%w: address of %d bytes in %d", ErrBadEndpoint, n, len(b))
	}
	return endpoint{
		transport: b[0],
		rank:      binary.LittleEndian.Uint32(b[4:]),
		token:     binary.LittleEndian.Uint64(b[8:]),
		srqRegion: binary.LittleEndian.Uint32(b[16:]),
		srqKey:    binary.LittleEndian.Uint64(b[24:]),
		addr:      string(b[endpointFixed:]),
	}, nil
}

// tcp frames. Every frame is a 64-byte header followed by payload bytes:
//
//	0  u8  op (requests: Op; responses: Op|0x80)
//	1  u8  flags (bit 0: signaled)
//	2  u8  status (responses)
//	3  u8  reserved
//	4  u32 payload length
//	8  u64 wrid
//	16 u32 region   20 u32 imm
//	24 u64 offset   32 u64 key   40 u64 length
//	48 u64 arg1 (FetchAdd addend, CompareSwap compare)
//	56 u64 arg2 (CompareSwap swap)
//
// Requests carry the payload of Write, WriteImm and Send, and the request
// of Call (length: the reply's capacity); responses carry the data of Read,
// the old value of the atomics and the reply of Call (length: its size).
const (
	frameHeader  = 64
	frameResp    = 0x80
	flagSignaled = 1
)

type frame struct {
	op       uint8
	flags    uint8
	status   Status
	payload  uint32
	wrid     uint64
	region   uint32
	imm      uint32
	off, key uint64
	length   uint64
	arg1     uint64
	arg2     uint64
}

func (f *frame) put(b []byte) {
	b[0], b[1], b[2], b[3] = f.op, f.flags, byte(f.status), 0
	binary.LittleEndian.PutUint32(b[4:], f.payload)
	binary.LittleEndian.PutUint64(b[8:], f.wrid)
	binary.LittleEndian.PutUint32(b[16:], f.region)
	binary.LittleEndian.PutUint32(b[20:], f.imm)
	binary.LittleEndian.PutUint64(b[24:], f.off)
	binary.LittleEndian.PutUint64(b[32:], f.key)
	binary.LittleEndian.PutUint64(b[40:], f.length)
	binary.LittleEndian.PutUint64(b[48:], f.arg1)
	binary.LittleEndian.PutUint64(b[56:], f.arg2)
}

// parseFrame decodes and validates a header; maxPayload bounds the payload.
func parseFrame(b []byte, maxPayload int) (frame, error) {
	if len(b) < frameHeader {
		return frame{}, fmt.Errorf("%w: %d-byte header", ErrBadFrame, len(b))
	}
	f := frame{
		op: b[0], flags: b[1], status: Status(b[2]),
		payload: binary.LittleEndian.Uint32(b[4:]),
		wrid:    binary.LittleEndian.Uint64(b[8:]),
		region:  binary.LittleEndian.Uint32(b[16:]),
		imm:     binary.LittleEndian.Uint32(b[20:]),
		off:     binary.LittleEndian.Uint64(b[24:]),
		key:     binary.LittleEndian.Uint64(b[32:]),
		length:  binary.LittleEndian.Uint64(b[40:]),
		arg1:    binary.LittleEndian.Uint64(b[48:]),
		arg2:    binary.LittleEndian.Uint64(b[56:]),
	}
	op := Op(f.op &^ frameResp)
	if b[3] != 0 || f.flags&^flagSignaled != 0 || f.status >= numStatus {
		return frame{}, fmt.Errorf("%w: reserved bits set", ErrBadFrame)
	}
	if int64(f.payload) > int64(maxPayload) {
		return frame{}, fmt.Errorf("%w: payload %d exceeds %d", ErrBadFrame, f.payload, maxPayload)
	}
	var want uint64
	resp := f.op&frameResp != 0
	switch op {
	case OpWrite, OpWriteImm:
		if !resp {
			want = f.length
		}
	case OpSend:
		if !resp {
			want = uint64(f.payload)
		}
	case OpRead:
		if resp && f.status == StatusSuccess {
			want = f.length
		}
	case OpFetchAdd, OpCompareSwap:
		if resp && f.status == StatusSuccess {
			want = 8
		}
	case OpCall:
		// Requests: the request is the payload, length the reply's
		// capacity; responses: the reply, length its size.
		if f.length > uint64(maxPayload) {
			return frame{}, fmt.Errorf("%w: call reply of %d bytes exceeds %d", ErrBadFrame, f.length, maxPayload)
		}
		want = uint64(f.payload)
		if resp && f.status == StatusSuccess {
			want = f.length
		} else if resp {
			want = 0
		}
	case OpNop:
	default:
		return frame{}, fmt.Errorf("%w: op %d", ErrBadFrame, f.op)
	}
	if uint64(f.payload) != want {
		return frame{}, fmt.Errorf("%w: %v frame with %d payload bytes, want %d", ErrBadFrame, op, f.payload, want)
	}
	return f, nil
}

// ofi messages. The ofi provider runs the tcp frame stream over libfabric
// messages (fi_send into receive buffers the target posted); every message
// starts with a 16-byte header:
//
//	0  u64 token of the destination queue pair
//	8  u8  kind (1: frame bytes follow; 2: the sender closed its queue
//	       pair; 3: a probe, sent while answers are overdue, to learn
//	       whether the peer is still there; 4: the answer to a probe;
//	       5: a region question, 6: its answer — the one-sided path)
//	9  u8[3] reserved
//	12 u32 sequence number of the message in its queue pair's stream
//
// A region question (OFIConfig.OneSided: before the first fi_write or
// fi_read into a region of the peer) asks whether a locator's region and
// key are good, and how to name the region in RMA:
//
//	16 u32 region ID   20 u32 reserved (0)   24 u64 the locator's key
//
// and its answer:
//
//	16 u32 region ID   20 u32 status (0: yes; 1: no such region, or not
//	       that key; 2: the peer offers no one-sided access to it)
//	24 u64 the key asked about   32 u64 region length
//	40 u64 RMA address of the region's first byte (its virtual address
//	       under FI_MR_VIRT_ADDR, else 0)   48 u64 the registration's key
//
// Frame bytes are the next part of the stream of tcp frames (above); a
// frame may span messages. Receives may complete out of order (a large
// message that the provider moves by rendezvous completes after a small
// one sent later), so the receiver puts messages back in sequence order.
const (
	ofiHeader    = 16
	ofiKindData  = 1
	ofiKindClose = 2
	ofiKindProbe = 3
	ofiKindAck   = 4

	ofiKindRegionAsk    = 5
	ofiKindRegionAnswer = 6
	ofiRegionAskBody    = 16
	ofiRegionAnswerBody = 40

	ofiRegionYes     = 0
	ofiRegionNo      = 1
	ofiRegionNoSided = 2
)

// ofiRegionAsk and ofiRegionAnswer are the one-sided path's region
// question and answer (bodies of kinds 5 and 6).
type ofiRegionAsk struct {
	region uint32
	key    uint64
}

func (a ofiRegionAsk) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, a.region)
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint64(b, a.key)
}

func parseRegionAsk(b []byte) (ofiRegionAsk, error) {
	if len(b) != ofiRegionAskBody || binary.LittleEndian.Uint32(b[4:]) != 0 {
		return ofiRegionAsk{}, fmt.Errorf("%w: region question of %d bytes", ErrBadFrame, len(b))
	}
	return ofiRegionAsk{region: binary.LittleEndian.Uint32(b), key: binary.LittleEndian.Uint64(b[8:])}, nil
}

type ofiRegionAnswer struct {
	region, status uint32
	key, length    uint64
	addr, mrKey    uint64
}

func (a ofiRegionAnswer) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, a.region)
	b = binary.LittleEndian.AppendUint32(b, a.status)
	for _, v := range [...]uint64{a.key, a.length, a.addr, a.mrKey} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func parseRegionAnswer(b []byte) (ofiRegionAnswer, error) {
	if len(b) != ofiRegionAnswerBody {
		return ofiRegionAnswer{}, fmt.Errorf("%w: region answer of %d bytes", ErrBadFrame, len(b))
	}
	a := ofiRegionAnswer{region: binary.LittleEndian.Uint32(b), status: binary.LittleEndian.Uint32(b[4:]),
		key: binary.LittleEndian.Uint64(b[8:]), length: binary.LittleEndian.Uint64(b[16:]),
		addr: binary.LittleEndian.Uint64(b[24:]), mrKey: binary.LittleEndian.Uint64(b[32:])}
	if a.status > ofiRegionNoSided {
		return ofiRegionAnswer{}, fmt.Errorf("%w: region answer status %d", ErrBadFrame, a.status)
	}
	return a, nil
}

type ofiMsgHeader struct {
	token uint64
	kind  uint8
	seq   uint32
}

func (h ofiMsgHeader) put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], h.token)
	b[8], b[9], b[10], b[11] = h.kind, 0, 0, 0
	binary.LittleEndian.PutUint32(b[12:], h.seq)
}

// parseOFIHeader decodes a message header; the bytes after it are the body.
func parseOFIHeader(b []byte) (ofiMsgHeader, error) {
	if len(b) < ofiHeader {
		return ofiMsgHeader{}, fmt.Errorf("%w: %d-byte ofi message", ErrBadFrame, len(b))
	}
	h := ofiMsgHeader{token: binary.LittleEndian.Uint64(b[0:]), kind: b[8], seq: binary.LittleEndian.Uint32(b[12:])}
	if b[9]|b[10]|b[11] != 0 {
		return ofiMsgHeader{}, fmt.Errorf("%w: reserved ofi header bytes set", ErrBadFrame)
	}
	body := len(b) - ofiHeader
	switch {
	case h.kind == ofiKindData && body > 0:
	case h.kind >= ofiKindClose && h.kind <= ofiKindAck && body == 0:
	case h.kind == ofiKindRegionAsk && body == ofiRegionAskBody:
	case h.kind == ofiKindRegionAnswer && body == ofiRegionAnswerBody:
	default:
		return ofiMsgHeader{}, fmt.Errorf("%w: ofi message kind %d with %d bytes", ErrBadFrame, h.kind, len(b))
	}
	return h, nil
}

// Call area: where shm peers queue calls (OpCall) for a process's engine.
// It follows the receive completion ring in the process's receive-queue
// region (the region an shm endpoint names):
//
//	0  u64 magic "SERICALL"   8 u32 slots   12 u32 slot bytes (CallBytes)
//	16 u32 operator present (1 once Process.SetOperator ran)   20..64 reserved
//	64 free ring (entries: u32 slot index, u32 reserved)
//	   posted ring (same entries), both rings of capacity slots
//	   slots × (64-byte slot header + slot bytes rounded up to 64)
//
// Slot header:
//
//	0  u32 state (0 free, 1 posted, 2 done; a futex word)
//	4  u32 waiter (1 once the caller sleeps on state)
//	8  u32 source rank   12 u32 request length   16 u32 reply capacity
//	20 u32 reply length  24 u8 status
//
// The slot's bytes hold the request, then the reply in its place.
const (
	callMagic      = 0x4c4c414349524553 // "SERICALL" read little-endian
	callHeader     = 64
	callSlotHeader = 64
	callEntry      = 8
)

func callSlotSize(bytes int) int { return callSlotHeader + (bytes+63)&^63 }

func callAreaBytes(slots, bytes int) int {
	return callHeader + 2*ringBytes(slots, callEntry) + slots*callSlotSize(bytes)
}
