package rdmo

import (
	"context"
	"encoding/binary"
	"fmt"
)

// Initiator helpers for the built-in RDMOs: each encodes its input, runs
// one RDMO with Do and decodes its output.

// SlottedAppend appends tuple to the page and returns its slot.
func (c *Client) SlottedAppend(ctx context.Context, page Capability, tuple []byte) (uint64, Code, error) {
	code, out, err := c.Do(ctx, page, MethodAppend, tuple)
	if err != nil || code != OK {
		return 0, code, err
	}
	if len(out) != 8 {
		return 0, code, fmt.Errorf("%w: SlottedAppend answered %d bytes", ErrMalformed, len(out))
	}
	return le(out), OK, nil
}

// ConditionalGather returns the versions of key in bucket visible at ts.
func (c *Client) ConditionalGather(ctx context.Context, chains Capability, bucket, key, ts uint64) ([]Version, Code, error) {
	code, out, err := c.Do(ctx, chains, MethodGather, appendLE(nil, bucket, key, ts))
	if err != nil {
		return nil, code, err
	}
	return decodeVersions(out), code, nil
}

func decodeVersions(b []byte) []Version {
	vs := make([]Version, 0, len(b)/versionBytes)
	for ; len(b) >= versionBytes; b = b[versionBytes:] {
		vs = append(vs, Version{Begin: le(b), Value: le(b[8:])})
	}
	return vs
}

// InsertVersion pushes a version of key, visible from begin, on bucket.
func (c *Client) InsertVersion(ctx context.Context, chains Capability, bucket, key, begin, value uint64) (Code, error) {
	code, _, err := c.Do(ctx, chains, MethodInsert, appendLE(nil, bucket, key, begin, value))
	return code, err
}

// SignaledRead reads the record under its lock, trying the lock tries
// times (0: the default, 4; at most 16), appending the data to dst.
func (c *Client) SignaledRead(ctx context.Context, rec Capability, tries int, dst []byte) (Code, []byte, error) {
	var in [4]byte
	binary.LittleEndian.PutUint32(in[:], uint32(tries))
	return c.DoInto(ctx, rec, MethodSignaledRead, in[:], dst)
}

// LockedWrite replaces the record's data under its lock.
func (c *Client) LockedWrite(ctx context.Context, rec Capability, data []byte) (Code, error) {
	code, _, err := c.Do(ctx, rec, MethodLockedWrite, data)
	return code, err
}

// WriteAndSeal writes data into the buffer, then seal.
func (c *Client) WriteAndSeal(ctx context.Context, buf Capability, seal uint64, data []byte) (Code, error) {
	in := make([]byte, 8, 8+len(data))
	putLE(in, seal)
	code, _, err := c.Do(ctx, buf, MethodWriteAndSeal, append(in, data...))
	return code, err
}

// ScatterAndAccumulate adds each pair's delta to its key's accumulator and
// returns how many pairs were applied.
func (c *Client) ScatterAndAccumulate(ctx context.Context, acc Capability, pairs []KeyDelta) (int, Code, error) {
	in := make([]byte, 0, keyDeltaBytes*len(pairs))
	for _, p := range pairs {
		in = appendLE(in, p.Key, p.Delta)
	}
	code, out, err := c.Do(ctx, acc, MethodAccumulate, in)
	if err != nil {
		return 0, code, err
	}
	if len(out) != 8 {
		return 0, code, fmt.Errorf("%w: ScatterAndAccumulate answered %d bytes", ErrMalformed, len(out))
	}
	return int(le(out)), code, nil
}
