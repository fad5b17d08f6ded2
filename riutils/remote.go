package riutils

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// RemoteObject is a reply slot in the caller's registered memory: CallReturn
// has the callee write the result there with a one-sided write, and waits
// for it. Reuse one per call site; it belongs to its Messengers' thread.
type RemoteObject struct {
	region *alloc.Region
	slot   []byte
	loc    alloc.Locator
	seq    uint64
	cap    int
	closed bool // its memory is unmapped
}

// NewRemoteObject returns a slot for results of at most capacity bytes.
func (m *Messengers) NewRemoteObject(capacity int) (*RemoteObject, error) {
	if capacity < 0 || capacity > m.p.cfg.MaxPayload() {
		return nil, fmt.Errorf("%w: RemoteObject of %d bytes", ErrTooLarge, capacity)
	}
	if m.proc.Closed() {
		return nil, errFabricClosed
	}
	size := replySize(capacity)
	r, err := m.f.Process().Registry().NewRegion(size, alloc.RegionConfig{Name: "riutils-reply"})
	if err != nil {
		return nil, err
	}
	loc, _ := r.Locator(0, size)
	return &RemoteObject{region: r, slot: r.Bytes()[:size], loc: loc, cap: capacity}, nil
}

// Capacity returns the largest result the object holds.
func (o *RemoteObject) Capacity() int { return o.cap }

// Close releases the object's memory; a CallReturn given o afterwards
// fails with ErrClosed. A second Close does nothing.
func (o *RemoteObject) Close(m *Messengers) error {
	if o.closed {
		return nil
	}
	o.closed = true
	return m.f.Process().Registry().Release(o.region)
}

// CallReturn runs h with args on thread dst, one-sided both ways, and
// returns the result, which stays valid until obj's next use. While it
// waits it keeps running the calls written to this thread.
func (m *Messengers) CallReturn(ctx context.Context, dst dsfabric.ThreadID, h dsfabric.HandlerID, args []byte, obj *RemoteObject) ([]byte, error) {
	if obj.closed {
		// Its slot is unmapped: waiting there would fault.
		return nil, errObjectClosed
	}
	obj.seq++
	a := m.scratch[:0]
	a = binary.LittleEndian.AppendUint32(a, uint32(h))
	a = binary.LittleEndian.AppendUint32(a, 0)
	a = binary.LittleEndian.AppendUint64(a, obj.seq)
	a, _ = obj.loc.AppendBinary(a)
	a = append(a, args...)
	m.scratch = a
	if err := m.CallBuffer(dst, returnHandler, a, nil); err != nil {
		return nil, err
	}
	w := m.replyWait()
	for {
		h0 := word(obj.slot, 0).Load()
		if n := int(uint32(h0)); n <= obj.cap {
			end := replySize(n)
			if word(obj.slot, end-recordSeal).Load() == sealOf(h0, obj.seq) {
				res := obj.slot[replyHeader : replyHeader+n]
				if h0>>32 != 0 {
					return nil, fmt.Errorf("%w: thread %d: %s", dsfabric.ErrRemote, dst, res)
				}
				return res, nil
			}
		}
		if m.Poll() > 0 {
			w.Reset()
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := m.f.Transmitter(m.f.Names().Rank(dst)); err != nil {
			return nil, err // the callee died
		}
		w.Wait()
	}
}

// CallReturnTyped is CallReturn with Go values (dsfabric.Encode/Decode).
func CallReturnTyped[R any](ctx context.Context, m *Messengers, dst dsfabric.ThreadID, h dsfabric.HandlerID, arg any, obj *RemoteObject) (R, error) {
	var r R
	args, err := dsfabric.Encode(nil, arg)
	if err != nil {
		return r, err
	}
	out, err := m.CallReturn(ctx, dst, h, args, obj)
	if err != nil {
		return r, err
	}
	return r, dsfabric.Decode(out, &r)
}

// answer runs a call-and-return record on the callee and writes the reply.
func (r *receiver) answer(args []byte) error {
	if len(args) < returnHeader || binary.LittleEndian.Uint32(args[4:]) != 0 {
		return fmt.Errorf("%w: call-and-return of %d argument bytes", ErrProtocol, len(args))
	}
	h := dsfabric.HandlerID(binary.LittleEndian.Uint32(args))
	seq := binary.LittleEndian.Uint64(args[8:])
	var loc alloc.Locator
	if err := loc.UnmarshalBinary(args[16:returnHeader]); err != nil || loc.Process != uint32(r.m.f.Names().Rank(r.src)) {
		return fmt.Errorf("%w: reply slot %v for thread %d", ErrProtocol, loc, r.src)
	}
	res, err := r.run(h, r.src, args[returnHeader:], nil)
	status := uint64(0)
	capacity := int(loc.Length) - replyHeader - recordSeal
	switch {
	case err != nil:
		res, status = []byte(err.Error()), 1
	case len(res) > capacity:
		res, status = []byte(fmt.Sprintf("result of %d bytes does not fit the caller's RemoteObject of %d", len(res), capacity)), 1
	}
	if len(res) > capacity { // even the error message
		res = res[:max(0, capacity)]
	}
	size := replySize(len(res))
	mem, err := allocFrom(r.m.rx.ring, r.tx, size)
	if err != nil {
		return err
	}
	b := mem.Bytes()
	h0 := uint64(len(res)) | status<<32
	binary.LittleEndian.PutUint64(b, h0)
	copy(b[replyHeader:], res)
	clear(b[replyHeader+len(res) : size-recordSeal])
	binary.LittleEndian.PutUint64(b[size-recordSeal:], sealOf(h0, seq))
	dst, _ := loc.Sub(0, uint64(size))
	return r.tx.Write(mem, dst)
}

// RemoteValue is the paper's RemoteObject<T>: a reply slot whose result is
// decoded as a T (dsfabric.Decode: msgp methods, encoding.Binary*, or
// msgpack).
type RemoteValue[T any] struct {
	obj *RemoteObject
	m   *Messengers
}

// NewRemoteValue returns a slot for T results of at most capacity encoded
// bytes, on m's thread.
func NewRemoteValue[T any](m *Messengers, capacity int) (*RemoteValue[T], error) {
	obj, err := m.NewRemoteObject(capacity)
	if err != nil {
		return nil, err
	}
	return &RemoteValue[T]{obj: obj, m: m}, nil
}

// Call runs h with arg (encoded) on thread dst and returns its result.
func (v *RemoteValue[T]) Call(ctx context.Context, dst dsfabric.ThreadID, h dsfabric.HandlerID, arg any) (T, error) {
	return CallReturnTyped[T](ctx, v.m, dst, h, arg, v.obj)
}

// Close releases the slot.
func (v *RemoteValue[T]) Close() error { return v.obj.Close(v.m) }

// replyWait is how a thread waits for a reply or a notification: a reply
// over shm is a microsecond away and over tcp tens of microseconds. When it
// starts sleeping it leaves the transports' progress to their engines.
func (m *Messengers) replyWait() dtutils.HotWait {
	return dtutils.HotWait{Spin: 20 * time.Microsecond, Yield: 2 * time.Millisecond, Idle: m.f.Process().Idle}
}
