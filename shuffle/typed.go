package shuffle

import (
	"context"
	"errors"
	"fmt"
)

// Codec turns values of T into records and back: the typed helper's
// encoding. Append must write a record Decode reads back as the same
// value; Decode must refuse, with an error, any record it cannot read (a
// record crosses a process boundary).
type Codec[T any] interface {
	Append(dst []byte, v T) []byte
	Decode(rec []byte) (T, error)
}

// CodecFuncs makes a Codec of two functions.
type CodecFuncs[T any] struct {
	AppendFunc func(dst []byte, v T) []byte
	DecodeFunc func(rec []byte) (T, error)
}

// Append calls AppendFunc.
func (c CodecFuncs[T]) Append(dst []byte, v T) []byte { return c.AppendFunc(dst, v) }

// Decode calls DecodeFunc.
func (c CodecFuncs[T]) Decode(rec []byte) (T, error) { return c.DecodeFunc(rec) }

// TypedShuffle is a SHUFFLE operator of values of T: each value is
// encoded by the codec and goes to the group its partitioner picks (the
// repartition hash, or a fixed group for broadcast).
type TypedShuffle[T any] struct {
	sh      *Shuffle
	codec   Codec[T]
	group   func(T) int
	scratch []byte
}

// NewTypedShuffle wraps sh: group picks each value's transmission group.
func NewTypedShuffle[T any](sh *Shuffle, codec Codec[T], group func(T) int) *TypedShuffle[T] {
	return &TypedShuffle[T]{sh: sh, codec: codec, group: group}
}

// Put encodes v and puts it in its group's output buffer (Shuffle.Put).
func (t *TypedShuffle[T]) Put(ctx context.Context, v T) error {
	t.scratch = t.codec.Append(t.scratch[:0], v)
	return t.sh.Put(ctx, t.group(v), t.scratch)
}

// Close closes the operator (Shuffle.Close).
func (t *TypedShuffle[T]) Close(ctx context.Context) error { return t.sh.Close(ctx) }

// TypedReceive is a RECEIVE operator of values of T.
type TypedReceive[T any] struct {
	rc    *Receive
	codec Codec[T]
}

// NewTypedReceive wraps rc.
func NewTypedReceive[T any](rc *Receive, codec Codec[T]) *TypedReceive[T] {
	return &TypedReceive[T]{rc: rc, codec: codec}
}

// Next returns the next value; io.EOF once every source is depleted. A
// record the codec cannot read is an ErrBadBuffer error (the operator
// stays usable: the next call goes on after it).
func (t *TypedReceive[T]) Next(ctx context.Context) (T, error) {
	rec, err := t.rc.Next(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := t.codec.Decode(rec)
	if err != nil {
		return v, fmt.Errorf("%w: a %d-byte record: %w", ErrBadBuffer, len(rec), err)
	}
	return v, nil
}

// Each calls fn on every value until every source is depleted, fn returns
// an error, or the stream fails; it closes the operator. A record the codec
// cannot read does not stop it (the stream goes on after it, as after
// Next's): Each skips it, calls fn on the values after it, and returns an
// ErrBadBuffer error for the first such record, with their count, besides
// whatever else ended it (stopping there would lose the readable records
// after it in the same buffer, which Close hands back).
func (t *TypedReceive[T]) Each(ctx context.Context, fn func(T) error) error {
	var bad int
	var badErr error
	err := t.rc.Each(ctx, func(rec []byte) error {
		v, err := t.codec.Decode(rec)
		if err != nil {
			if bad == 0 {
				badErr = fmt.Errorf("%w: a %d-byte record: %w", ErrBadBuffer, len(rec), err)
			}
			bad++
			return nil
		}
		return fn(v)
	})
	if bad > 1 {
		badErr = fmt.Errorf("%w (%d records the codec refused)", badErr, bad)
	}
	return errors.Join(err, badErr)
}

// Close hands back the buffer in use (Receive.Close).
func (t *TypedReceive[T]) Close() error { return t.rc.Close() }
