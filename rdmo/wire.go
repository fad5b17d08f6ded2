package rdmo

import (
	"encoding/binary"
	"fmt"

	"github.com/seriema-go/seriema/alloc"
)

// Every byte format of package rdmo that crosses a process boundary is
// defined in this file, little-endian throughout; docs/wire.md describes
// them. An RDMO travels as one dtutils call (OpCall): the request record
// is the call's request, the reply record its reply.

// Request record:
//
//	0  u8  version (1)   1 u8 reserved   2 u16 method
//	4  u32 reserved
//	8  u64 instance id   16 u64 secret   (the capability, less its process)
//	24 input bytes (the rest of the call's request)
const (
	requestHeader = 24
	wireVersion   = 1
)

// Reply record:
//
//	0 u16 code   2 u16 reserved   4 u32 output length
//	8 output bytes (exactly the output length)
const replyHeader = 8

// Method number methodDescribe is the engine's own, on any instance: with
// an empty input, an engine that allows direct initiators
// (EngineConfig.Direct) answers OK and this describe record; one that does
// not answers CodeNoDirect.
//
//	0  u8 version (1)   1 u8 type name length L (1..255)   2 u16 methods
//	4  u32 reserved
//	8  instance locator (alloc.Locator, 32 bytes): the instance's memory
//	40 revocation word locator (32 bytes): one u64, the instance id while
//	   the capability is valid, anything else once revoked
//	72 type name (L bytes)
const (
	methodDescribe = 0xFFFF
	describeHeader = 72
	maxTypeName    = 255
)

// describe is a decoded describe record.
type description struct {
	typeName string
	methods  int
	inst     alloc.Locator
	valid    alloc.Locator
}

// putDescribe writes d into b and returns its length, 0 when b is too
// short.
func putDescribe(b []byte, d description) int {
	n := describeHeader + len(d.typeName)
	if len(b) < n || len(d.typeName) < 1 || len(d.typeName) > maxTypeName {
		return 0
	}
	b[0], b[1] = wireVersion, byte(len(d.typeName))
	binary.LittleEndian.PutUint16(b[2:], uint16(d.methods))
	binary.LittleEndian.PutUint32(b[4:], 0)
	d.inst.AppendBinary(b[8:8])
	d.valid.AppendBinary(b[40:40])
	copy(b[describeHeader:], d.typeName)
	return n
}

func parseDescribe(b []byte) (description, error) {
	if len(b) < describeHeader || b[0] != wireVersion || b[1] == 0 || binary.LittleEndian.Uint32(b[4:]) != 0 || len(b) != describeHeader+int(b[1]) {
		return description{}, fmt.Errorf("%w: %d-byte describe record", ErrMalformed, len(b))
	}
	d := description{typeName: string(b[describeHeader:]), methods: int(binary.LittleEndian.Uint16(b[2:]))}
	if err := d.inst.UnmarshalBinary(b[8:40]); err != nil {
		return description{}, fmt.Errorf("%w: describe record: %w", ErrMalformed, err)
	}
	if err := d.valid.UnmarshalBinary(b[40:72]); err != nil || d.valid.Length != 8 {
		return description{}, fmt.Errorf("%w: describe record: revocation word %v", ErrMalformed, d.valid)
	}
	return d, nil
}

// Capability record (Capability.MarshalBinary), what the owner hands out:
//
//	0 u32 process rank   4 u32 reserved   8 u64 instance id   16 u64 secret
const capabilitySize = 24

type request struct {
	method uint16
	id     uint64
	secret uint64
	input  []byte
}

// putRequest writes the request into b and returns its length; b must hold
// requestHeader+len(input) bytes.
func putRequest(b []byte, method uint16, id, secret uint64, input []byte) int {
	b[0], b[1] = wireVersion, 0
	binary.LittleEndian.PutUint16(b[2:], method)
	binary.LittleEndian.PutUint32(b[4:], 0)
	binary.LittleEndian.PutUint64(b[8:], id)
	binary.LittleEndian.PutUint64(b[16:], secret)
	return requestHeader + copy(b[requestHeader:], input)
}

func parseRequest(b []byte) (request, error) {
	if len(b) < requestHeader {
		return request{}, fmt.Errorf("%w: %d-byte request", ErrMalformed, len(b))
	}
	if b[0] != wireVersion || b[1] != 0 || binary.LittleEndian.Uint32(b[4:]) != 0 {
		return request{}, fmt.Errorf("%w: request version %d or reserved bytes set", ErrMalformed, b[0])
	}
	return request{
		method: binary.LittleEndian.Uint16(b[2:]),
		id:     binary.LittleEndian.Uint64(b[8:]),
		secret: binary.LittleEndian.Uint64(b[16:]),
		input:  b[requestHeader:],
	}, nil
}

// putReplyHeader writes the header of a reply whose output (n bytes)
// already follows it.
func putReplyHeader(b []byte, code Code, n int) int {
	binary.LittleEndian.PutUint16(b[0:], uint16(code))
	binary.LittleEndian.PutUint16(b[2:], 0)
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
	return replyHeader + n
}

func parseReply(b []byte) (Code, []byte, error) {
	if len(b) < replyHeader {
		return 0, nil, fmt.Errorf("%w: %d-byte reply", ErrMalformed, len(b))
	}
	n := binary.LittleEndian.Uint32(b[4:])
	if binary.LittleEndian.Uint16(b[2:]) != 0 || uint64(n) != uint64(len(b)-replyHeader) {
		return 0, nil, fmt.Errorf("%w: reply of %d bytes says %d output bytes", ErrMalformed, len(b), n)
	}
	return Code(binary.LittleEndian.Uint16(b[0:])), b[replyHeader:], nil
}

// MarshalBinary encodes c (the capability record above).
func (c Capability) MarshalBinary() ([]byte, error) {
	b := make([]byte, capabilitySize)
	binary.LittleEndian.PutUint32(b[0:], c.Process)
	binary.LittleEndian.PutUint64(b[8:], c.ID)
	binary.LittleEndian.PutUint64(b[16:], c.Secret)
	return b, nil
}

// UnmarshalBinary decodes a capability record.
func (c *Capability) UnmarshalBinary(b []byte) error {
	if len(b) != capabilitySize || binary.LittleEndian.Uint32(b[4:]) != 0 {
		return fmt.Errorf("%w: %d-byte capability record", ErrMalformed, len(b))
	}
	*c = Capability{Process: binary.LittleEndian.Uint32(b[0:]), ID: binary.LittleEndian.Uint64(b[8:]), Secret: binary.LittleEndian.Uint64(b[16:])}
	return nil
}
