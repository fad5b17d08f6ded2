package shuffle

import (
	"context"
	"fmt"
	"io"
	"unsafe"

	"github.com/seriema-go/seriema/internal/prefetch"
)

// AppendRecord appends rec to b's data as one record (a u32 length and its
// bytes), if it fits; false when b is too full for it.
func (b *OutBuffer) AppendRecord(rec []byte) bool {
	d, ok := appendRecord(b.Data, rec, cap(b.Data))
	b.Data = d
	return ok
}

// Shuffle is the SHUFFLE operator of one thread (seed 004, Algorithm 1):
// records go to the output buffer of their transmission group; a full
// buffer is transmitted to every destination of the group in one
// operation each, and a new one acquired. Groups express the patterns:
// repartition (group g = destination g, the group chosen by the caller's
// hash), multicast (a set of destinations) and broadcast (all of them).
// Threads may each run a Shuffle over one shared Sender (the
// single-endpoint configuration) or over a Sender each (multi-endpoint);
// the endpoint sends Depleted when its last Shuffle closes.
type Shuffle struct {
	s      *Sender
	groups [][]int
	out    []*OutBuffer
	closed bool
}

// NewShuffle starts a SHUFFLE operator on s with the given transmission
// groups (each a list of s's destinations).
func (s *Sender) NewShuffle(groups [][]int) (*Shuffle, error) {
	for g, dests := range groups {
		if len(dests) == 0 {
			return nil, fmt.Errorf("%w: group %d has no destination", ErrBadConfig, g)
		}
		for _, d := range dests {
			if d < 0 || d >= s.Dests() {
				return nil, fmt.Errorf("%w: group %d names destination %d of %d", ErrBadConfig, g, d, s.Dests())
			}
		}
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	return &Shuffle{s: s, groups: groups, out: make([]*OutBuffer, len(groups))}, nil
}

// Repartition returns n groups of one destination each.
func Repartition(n int) [][]int {
	g := make([][]int, n)
	for i := range g {
		g[i] = []int{i}
	}
	return g
}

// Broadcast returns one group of all n destinations.
func Broadcast(n int) [][]int {
	g := make([]int, n)
	for i := range g {
		g[i] = i
	}
	return [][]int{g}
}

// Put appends rec to group's output buffer, transmitting the buffer first
// if rec does not fit; it blocks while the destinations have no room.
func (sh *Shuffle) Put(ctx context.Context, group int, rec []byte) error {
	if sh.closed {
		return ErrClosed
	}
	if group < 0 || group >= len(sh.groups) {
		return fmt.Errorf("%w: group %d of %d", ErrBadConfig, group, len(sh.groups))
	}
	if recordHeader+len(rec) > sh.s.cfg.BufferBytes {
		return fmt.Errorf("%w: %d bytes, buffers hold %d", ErrTooLarge, len(rec), sh.s.cfg.BufferBytes-recordHeader)
	}
	b := sh.out[group]
	if b != nil && b.AppendRecord(rec) {
		return nil
	}
	if b != nil {
		sh.out[group] = nil
		if err := sh.s.PutData(ctx, b, sh.groups[group], false); err != nil {
			return err
		}
	}
	b, err := sh.s.Acquire(ctx)
	if err != nil {
		return err
	}
	b.AppendRecord(rec)
	sh.out[group] = b
	return nil
}

// Close transmits what the output buffers hold and ends this operator;
// the endpoint's last one sends Depleted to every destination and waits
// until they have consumed everything.
func (sh *Shuffle) Close(ctx context.Context) error {
	if sh.closed {
		return nil
	}
	sh.closed = true
	var first error
	for g, b := range sh.out {
		if b == nil {
			continue
		}
		if err := sh.s.PutData(ctx, b, sh.groups[g], false); err != nil && first == nil {
			first = err
		}
		sh.out[g] = nil
	}
	if err := sh.s.closeUser(ctx); err != nil && first == nil {
		first = err
	}
	return first
}

// Receive is the RECEIVE operator of one thread (seed 004, Algorithm 2):
// it returns the records of the buffers it takes from the endpoint, one at
// a time, until every source is depleted. Threads may share a Receiver
// (each gets whole buffers).
type Receive struct {
	r    *Receiver
	cur  In
	have bool
	rest []byte
}

// prefetchAhead is how far ahead of the record in hand Each asks for the
// buffer's lines. A buffer arriving from another process was written by
// another core (by the sender over shm, or by the engine that wrote it
// into place), so each of its lines is a cross-core miss, and the next
// record's header cannot be found before the one before is read: 62 % of
// Each's samples were that header load (profile of shuffle broadcast -impl
// rd). A hint 1 KiB ahead (about ten 100-byte records) lets those misses
// overlap: broadcast rd 3.11–3.58 → 3.49–4.17 GB/s per process and wr
// 2.87–3.03 → 2.98–3.27 in interleaved rounds, where 512 B and 2 KiB did
// no better and a demand load in place of the hint gained half as much.
const prefetchAhead = 1024

// NewReceive starts a RECEIVE operator on r.
func (r *Receiver) NewReceive() *Receive { return &Receive{r: r} }

// Next returns the next record, valid until the next call; io.EOF once
// every source is depleted.
func (rc *Receive) Next(ctx context.Context) ([]byte, error) {
	if rec, rest, ok := nextRecord(rc.rest); ok {
		rc.rest = rest
		return rec, nil
	}
	return rc.next(ctx)
}

// next is Next past the buffer in hand: it reports a malformed record, or
// takes buffers until one holds a record and returns that. rc.rest is empty
// whenever no buffer is in hand.
func (rc *Receive) next(ctx context.Context) ([]byte, error) {
	for {
		if len(rc.rest) > 0 {
			rec, rest, ok := nextRecord(rc.rest)
			if !ok {
				err := badRecord(rc.rest)
				rc.release()
				return nil, err
			}
			rc.rest = rest
			return rec, nil
		}
		if err := rc.release(); err != nil {
			return nil, err
		}
		in, err := rc.r.GetData(ctx)
		if err != nil {
			return nil, err // io.EOF once every source is depleted
		}
		rc.cur, rc.have, rc.rest = in, true, in.Data
	}
}

// Each calls fn on every record until every source is depleted (then it
// returns nil), fn returns an error, or one occurs; it closes rc. It walks
// a buffer's records in one loop: per record, a prefetch hint for the
// line prefetchAhead bytes on, the split (inlined) and fn.
func (rc *Receive) Each(ctx context.Context, fn func(rec []byte) error) error {
	defer rc.Close()
	for {
		for len(rc.rest) > 0 {
			if len(rc.rest) > prefetchAhead {
				prefetch.Read(unsafe.Pointer(&rc.rest[prefetchAhead]))
			}
			rec, rest, ok := nextRecord(rc.rest)
			if !ok {
				break // next reports it
			}
			rc.rest = rest
			if err := fn(rec); err != nil {
				return err
			}
		}
		rec, err := rc.next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}

// release hands the current buffer back.
func (rc *Receive) release() error {
	if !rc.have {
		return nil
	}
	rc.have, rc.rest = false, nil
	return rc.r.Release(rc.cur)
}

// Close hands back the buffer in use, if any.
func (rc *Receive) Close() error { return rc.release() }
