package rdmo

import (
	"context"
	"fmt"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// RDMA runs the built-in operations' one-sided equivalents — the
// multi-round-trip sequences of the paper's Fig. 1(b), 6, 7 and 8 — with a
// Transmitter on the same memory layouts, counting the messages they send
// (a write: 1; a read, an atomic or a flush: 2, request and answer). They
// are the baseline the RDMOs are measured against. One goroutine at a time.
type RDMA struct {
	tx      *dtutils.Transmitter
	scratch alloc.Memory
	// Messages counts the messages sent so far.
	Messages uint64
}

// RDMAScratch is the registered scratch memory an RDMA needs.
const RDMAScratch = 256 + MaxRecord + MaxTuple

// Scratch offsets.
const (
	scrAtomic = 0   // atomics' old values
	scrZero   = 8   // a zero word, written to free a lock
	scrWord   = 16  // a word to write (slot entry, seal)
	scrHeader = 64  // headers and nodes read
	scrData   = 256 // tuples and record data
)

// NewRDMA returns the one-sided runner over tx (whose queue pair reaches
// the instances' process), with scratch of at least RDMAScratch bytes.
func NewRDMA(tx *dtutils.Transmitter, scratch alloc.Memory) (*RDMA, error) {
	if scratch.Len() < RDMAScratch {
		return nil, fmt.Errorf("%w: RDMA scratch of %d bytes, need %d", ErrBadConfig, scratch.Len(), RDMAScratch)
	}
	clear(scratch.Bytes()[:RDMAScratch])
	return &RDMA{tx: tx, scratch: scratch}, nil
}

func (r *RDMA) m(off, n int) alloc.Memory {
	m, _ := r.scratch.Slice(off, n)
	return m
}

// sub is l's [off, off+n). Out of l (an offset read from a corrupt
// instance), it is the zero Locator, which every target refuses
// (ErrRemoteAccess) rather than touching memory past the instance.
func sub(l alloc.Locator, off, n int) alloc.Locator {
	s, err := l.Sub(uint64(off), uint64(n))
	if err != nil || off < 0 || n < 0 {
		return alloc.Locator{}
	}
	return s
}

func (r *RDMA) read(ctx context.Context, local alloc.Memory, remote alloc.Locator) error {
	r.Messages += 2
	return r.tx.Read(ctx, local, remote)
}

func (r *RDMA) write(local alloc.Memory, remote alloc.Locator) error {
	r.Messages++
	return r.tx.Write(local, remote)
}

func (r *RDMA) cas(ctx context.Context, remote alloc.Locator, old, new uint64) (uint64, error) {
	r.Messages += 2
	return r.tx.CompareSwap(ctx, r.m(scrAtomic, 8), remote, old, new)
}

func (r *RDMA) faa(ctx context.Context, remote alloc.Locator, d uint64) (uint64, error) {
	r.Messages += 2
	return r.tx.FetchAdd(ctx, r.m(scrAtomic, 8), remote, d)
}

// Flush waits until every operation posted so far has completed (the lock
// release SignaledRead leaves in flight included).
func (r *RDMA) Flush(ctx context.Context) error { return r.flush(ctx) }

func (r *RDMA) flush(ctx context.Context) error {
	r.Messages += 2
	return r.tx.Flush(ctx)
}

// maxCASRetries bounds the one-sided versions' compare-and-swap loops.
const maxCASRetries = 100000

// SlottedAppend (Fig. 1(b)): read the page header, compare-and-swap the
// reservation until it holds, write the tuple and the valid slot entry,
// flush.
func (r *RDMA) SlottedAppend(ctx context.Context, page alloc.Locator, tuple []byte) (uint64, Code, error) {
	if len(tuple) > MaxTuple {
		return 0, 0, fmt.Errorf("%w: %d-byte tuple", ErrInputTooLarge, len(tuple))
	}
	hdr := r.m(scrHeader, 24)
	if err := r.read(ctx, hdr, sub(page, 0, 24)); err != nil {
		return 0, 0, err
	}
	h, n, d := le(hdr.Bytes()), le(hdr.Bytes()[8:]), le(hdr.Bytes()[16:])
	l := uint64(len(tuple))
	for try := 0; ; try++ {
		cnt, used := h>>32, h&(1<<32-1)
		if cnt >= n || used+l > d {
			return 0, CodePageFull, nil
		}
		if try == maxCASRetries {
			return 0, CodeContended, nil
		}
		old, err := r.cas(ctx, sub(page, 0, 8), h, (cnt+1)<<32|(used+l))
		if err != nil {
			return 0, 0, err
		}
		if old != h {
			h = old
			continue
		}
		if l > 0 {
			t := r.m(scrData, len(tuple))
			copy(t.Bytes(), tuple)
			if err := r.write(t, sub(page, slottedHeader+8*int(n)+int(used), len(tuple))); err != nil {
				return 0, 0, err
			}
		}
		putLE(r.m(scrWord, 8).Bytes(), slotEntry(used, l))
		if err := r.write(r.m(scrWord, 8), sub(page, slottedHeader+8*int(cnt), 8)); err != nil {
			return 0, 0, err
		}
		return cnt, OK, r.flush(ctx)
	}
}

// ConditionalGather (Fig. 6): read the bucket's head, then each node in
// turn, filtering at the initiator. buckets is the instance's bucket count.
func (r *RDMA) ConditionalGather(ctx context.Context, chains alloc.Locator, buckets, bucket, key, ts uint64) ([]Version, Code, error) {
	w := r.m(scrHeader, 8)
	if err := r.read(ctx, w, sub(chains, chainsHeader+8*int(bucket%buckets), 8)); err != nil {
		return nil, 0, err
	}
	next := le(w.Bytes())
	nodes := chainsHeader + 8*int(buckets)
	var vs []Version
	node := r.m(scrHeader, nodeBytes)
	for hops := 0; next != 0; hops++ {
		if hops == MaxHops || len(vs) == MaxGather {
			return vs, CodeTruncated, nil
		}
		if err := r.read(ctx, node, sub(chains, nodes+nodeBytes*int(next-1), nodeBytes)); err != nil {
			return nil, 0, err
		}
		b := node.Bytes()
		if le(b[8:]) == key && le(b[16:]) <= ts {
			vs = append(vs, Version{Begin: le(b[16:]), Value: le(b[24:])})
		}
		next = le(b)
	}
	return vs, OK, nil
}

// SignaledRead (Fig. 7): compare-and-swap the lock (tries times), read the
// data, write the lock free.
func (r *RDMA) SignaledRead(ctx context.Context, rec alloc.Locator, tries int, dst []byte) (Code, []byte, error) {
	d := int(rec.Length) - recordHeader
	if d < 8 || d > MaxRecord {
		return 0, dst, fmt.Errorf("%w: record of %d data bytes", ErrBadConfig, d)
	}
	if tries < 1 || tries > maxLockTries {
		tries = defaultTries
	}
	for ; tries > 0; tries-- {
		old, err := r.cas(ctx, sub(rec, 0, 8), 0, 1)
		if err != nil {
			return 0, dst, err
		}
		if old != 0 {
			continue
		}
		data := r.m(scrData, d)
		if err := r.read(ctx, data, sub(rec, recordHeader, d)); err != nil {
			return 0, dst, err
		}
		dst = append(dst, data.Bytes()...)
		return OK, dst, r.write(r.m(scrZero, 8), sub(rec, 0, 8))
	}
	return CodeLocked, dst, nil
}

// LockedWrite: compare-and-swap the lock, write the data, count the
// version, write the lock free, flush.
func (r *RDMA) LockedWrite(ctx context.Context, rec alloc.Locator, data []byte) (Code, error) {
	if len(data) != int(rec.Length)-recordHeader || len(data) > MaxRecord {
		return 0, fmt.Errorf("%w: %d bytes for a record of %d", ErrInputTooLarge, len(data), int(rec.Length)-recordHeader)
	}
	for t := defaultTries; t > 0; t-- {
		old, err := r.cas(ctx, sub(rec, 0, 8), 0, 1)
		if err != nil {
			return 0, err
		}
		if old != 0 {
			continue
		}
		m := r.m(scrData, len(data))
		copy(m.Bytes(), data)
		if err := r.write(m, sub(rec, recordHeader, len(data))); err != nil {
			return 0, err
		}
		if _, err := r.faa(ctx, sub(rec, 8, 8), 1); err != nil {
			return 0, err
		}
		if err := r.write(r.m(scrZero, 8), sub(rec, 0, 8)); err != nil {
			return 0, err
		}
		return OK, r.flush(ctx)
	}
	return CodeLocked, nil
}

// WriteAndSeal: write the data, then the seal, flush.
func (r *RDMA) WriteAndSeal(ctx context.Context, buf alloc.Locator, seal uint64, data []byte) (Code, error) {
	if len(data) > MaxRecord || len(data) > int(buf.Length)-sealHeader {
		return 0, fmt.Errorf("%w: %d bytes for a buffer of %d", ErrInputTooLarge, len(data), int(buf.Length)-sealHeader)
	}
	if len(data) > 0 {
		m := r.m(scrData, len(data))
		copy(m.Bytes(), data)
		if err := r.write(m, sub(buf, sealHeader, len(data))); err != nil {
			return 0, err
		}
	}
	putLE(r.m(scrWord, 8).Bytes(), seal)
	if err := r.write(r.m(scrWord, 8), sub(buf, 0, 8)); err != nil {
		return 0, err
	}
	return OK, r.flush(ctx)
}

// ScatterAndAccumulate (Fig. 8): for each pair, read its lookup entry,
// then fetch-and-add its accumulator. lookups and accumulators are the
// instance's sizes.
func (r *RDMA) ScatterAndAccumulate(ctx context.Context, acc alloc.Locator, lookups, accumulators uint64, pairs []KeyDelta) (int, Code, error) {
	w := r.m(scrHeader, 8)
	for i, p := range pairs {
		if err := r.read(ctx, w, sub(acc, accumHeader+8*int(p.Key%lookups), 8)); err != nil {
			return i, 0, err
		}
		idx := le(w.Bytes())
		if idx >= accumulators {
			return i, CodeBadIndex, nil
		}
		if _, err := r.faa(ctx, sub(acc, accumHeader+8*int(lookups+idx), 8), p.Delta); err != nil {
			return i, 0, err
		}
	}
	return len(pairs), OK, nil
}
