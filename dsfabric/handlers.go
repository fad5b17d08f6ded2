package dsfabric

import (
	"bytes"
	"encoding"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/vmihailenco/msgpack/v5"
)

// HandlerID identifies a handler in every process of a job: the 32-bit FNV-1a
// hash of its name, so processes of the same binary agree without any
// exchange.
type HandlerID uint32

// IDOf returns the HandlerID a name gets.
func IDOf(name string) HandlerID {
	h := fnv.New32a()
	h.Write([]byte(name))
	return HandlerID(h.Sum32())
}

// Call describes the invocation a handler runs for.
type Call struct {
	// Fabric is the local fabric.
	Fabric *Fabric
	// Src is the calling thread.
	Src ThreadID
	// Dst is the thread running the handler (for service calls, the first
	// thread of this process).
	Dst ThreadID
	// Buffer is the buffer of a CallBuffer variant, in this process's
	// memory; nil for other calls. It is valid until the handler returns.
	Buffer []byte

	// The thread's last handler: a stream of calls to one handler skips
	// the map (its lookup was 11 % of a receiver of send-based calls).
	// Handlers are never replaced, so the entry never goes stale.
	lastID HandlerID
	lastFn HandlerFunc
}

// HandlerFunc is a raw handler: it gets the argument bytes and c (both
// valid until it returns: c is its thread's, reused for the next call) and
// returns the result bytes for CallReturn (ignored otherwise).
// This is the zero-allocation path.
type HandlerFunc func(c *Call, args []byte) ([]byte, error)

// Handlers maps IDs to handlers. Register everything before Start, in every
// process, so that no call finds its handler missing.
type Handlers struct {
	mu    sync.Mutex
	names map[HandlerID]string
	fns   *xsync.MapOf[HandlerID, HandlerFunc]
}

// NewHandlers returns an empty set.
func NewHandlers() *Handlers {
	return &Handlers{names: map[HandlerID]string{}, fns: xsync.NewMapOf[HandlerID, HandlerFunc]()}
}

// Register adds a raw handler and returns its ID. A name already used, or
// colliding with another name's hash, is an error.
func (h *Handlers) Register(name string, fn HandlerFunc) (HandlerID, error) {
	if fn == nil || name == "" {
		return 0, fmt.Errorf("%w: empty name or nil function", ErrBadConfig)
	}
	id := IDOf(name)
	if id == 0 {
		// A record whose header word is zero is "no record yet" to a
		// receiver: a call to ID 0 with no arguments would never run.
		return 0, fmt.Errorf("%w: %q hashes to the reserved ID 0; rename it", ErrBadConfig, name)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.names[id]; ok {
		if old == name {
			return 0, fmt.Errorf("%w: %q", ErrHandlerExists, name)
		}
		return 0, fmt.Errorf("%w: %q and %q share the ID %#08x; rename one", ErrHandlerExists, name, old, uint32(id))
	}
	h.names[id] = name
	h.fns.Store(id, fn)
	return id, nil
}

// Name returns the name registered for id.
func (h *Handlers) Name(id HandlerID) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.names[id]
	return n, ok
}

func (h *Handlers) lookup(id HandlerID) (HandlerFunc, bool) { return h.fns.Load(id) }

// Lookup returns the handler registered under id (for layers that dispatch
// calls themselves, such as riutils).
func (h *Handlers) Lookup(id HandlerID) (HandlerFunc, bool) { return h.fns.Load(id) }

// RegisterTyped registers a handler whose argument and result are Go values,
// encoded as Encode does.
func RegisterTyped[A, R any](h *Handlers, name string, fn func(c *Call, arg A) (R, error)) (HandlerID, error) {
	return h.Register(name, func(c *Call, args []byte) ([]byte, error) {
		var a A
		if err := Decode(args, &a); err != nil {
			return nil, err
		}
		r, err := fn(c, a)
		if err != nil {
			return nil, err
		}
		return Encode(nil, r)
	})
}

// msgpEncoder and msgpDecoder are the methods msgp generates; types that
// have them are detected structurally, with no import of msgp.
type msgpEncoder interface{ MarshalMsg([]byte) ([]byte, error) }
type msgpDecoder interface{ UnmarshalMsg([]byte) ([]byte, error) }

var encPool = sync.Pool{New: func() any {
	var b bytes.Buffer
	return &struct {
		buf *bytes.Buffer
		enc *msgpack.Encoder
	}{&b, msgpack.NewEncoder(&b)}
}}

// Encode appends the encoding of v to dst, using in order: a msgp-style
// MarshalMsg method, encoding.BinaryAppender, encoding.BinaryMarshaler,
// []byte as is, and msgpack (pooled encoders).
func Encode(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case msgpEncoder:
		b, err := x.MarshalMsg(dst)
		if err != nil {
			return dst, fmt.Errorf("%w: %v", ErrCodec, err)
		}
		return b, nil
	case encoding.BinaryAppender:
		b, err := x.AppendBinary(dst)
		if err != nil {
			return dst, fmt.Errorf("%w: %v", ErrCodec, err)
		}
		return b, nil
	case encoding.BinaryMarshaler:
		b, err := x.MarshalBinary()
		if err != nil {
			return dst, fmt.Errorf("%w: %v", ErrCodec, err)
		}
		return append(dst, b...), nil
	case []byte:
		return append(dst, x...), nil
	}
	e := encPool.Get().(*struct {
		buf *bytes.Buffer
		enc *msgpack.Encoder
	})
	defer encPool.Put(e)
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return dst, fmt.Errorf("%w: msgpack: %v", ErrCodec, err)
	}
	return append(dst, e.buf.Bytes()...), nil
}

// Decode decodes data into v (a pointer) with the method matching Encode.
func Decode(data []byte, v any) error {
	switch x := v.(type) {
	case msgpDecoder:
		rest, err := x.UnmarshalMsg(data)
		if err == nil && len(rest) != 0 {
			err = fmt.Errorf("%d trailing bytes", len(rest))
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCodec, err)
		}
		return nil
	case encoding.BinaryUnmarshaler:
		if err := x.UnmarshalBinary(data); err != nil {
			return fmt.Errorf("%w: %v", ErrCodec, err)
		}
		return nil
	case *[]byte:
		*x = append((*x)[:0], data...)
		return nil
	}
	if err := msgpack.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: msgpack: %v", ErrCodec, err)
	}
	return nil
}
