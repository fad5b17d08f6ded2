package rdmo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// Direct mode (EngineConfig.Direct, ClientConfig.Direct): over transports
// that share memory (shm, and loop in tests) an initiator may run a method
// declared Direct (lock-free) itself, on the instance's memory mapped into
// its process, with no request at all. The first RDMO on a capability asks
// the engine to describe the instance (method methodDescribe, which checks
// the capability like any RDMO); the client maps the instance and its
// revocation word, and from then on runs Direct methods in the calling
// goroutine after checking that word, which the engine clears when the
// capability is revoked or the engine closes.

// validChunk is the size of each region of revocation words, which
// holds perChunk of them.
const (
	validChunk = 4096
	perChunk   = validChunk / 8
)

// validWord is one instance's revocation word: its id while valid.
type validWord struct {
	w   *atomic.Uint64
	loc alloc.Locator
	idx int // in the table, plus one (zero: no word)
}

// validTable hands out revocation words from registered regions made as
// needed; a revoked instance's word is cleared and reused by a later one,
// which writes its own (never reused) id there.
type validTable struct {
	regions []*alloc.Region
	gone    []bool // regions released (the process closing): no more stores there
	free    []int
	n       int
}

// release marks region id gone if it holds revocation words, and reports
// whether it did: its words are neither cleared nor handed out again.
func (t *validTable) release(id uint32) bool {
	for k, r := range t.regions {
		if r.ID() == id {
			t.gone[k] = true
			t.free = slices.DeleteFunc(t.free, func(i int) bool { return i/perChunk == k })
			if k == len(t.regions)-1 {
				t.n = len(t.regions) * perChunk // the next word needs a region of its own
			}
			return true
		}
	}
	return false
}

func (t *validTable) take(reg *alloc.Registry, id uint64) (validWord, error) {
	var i int
	if k := len(t.free); k > 0 {
		i, t.free = t.free[k-1], t.free[:k-1]
	} else {
		if t.n == len(t.regions)*perChunk {
			r, err := reg.NewRegion(validChunk, alloc.RegionConfig{Name: "rdmo-revocation"})
			if err != nil {
				return validWord{}, err
			}
			t.regions = append(t.regions, r)
			t.gone = append(t.gone, false)
		}
		i = t.n
		t.n++
	}
	r, off := t.regions[i/perChunk], 8*(i%perChunk)
	loc, err := r.Locator(off, 8)
	if err != nil {
		t.free = append(t.free, i)
		return validWord{}, err
	}
	w := (*atomic.Uint64)(unsafe.Pointer(&r.Bytes()[off]))
	w.Store(id)
	return validWord{w: w, loc: loc, idx: i + 1}, nil
}

// give clears v, so that direct initiators refuse its instance, and
// returns it to the table.
func (t *validTable) give(v validWord) {
	if v.w == nil || t.gone[(v.idx-1)/perChunk] {
		return
	}
	v.w.Store(0)
	t.free = append(t.free, v.idx-1)
}

// describe answers methodDescribe for in.
func (e *Engine) describe(in *instance, input, out []byte) (Code, int) {
	if !e.cfg.Direct || in.valid.w == nil {
		return CodeNoDirect, 0
	}
	if len(input) != 0 {
		return CodeInputTooLarge, 0
	}
	n := putDescribe(out, description{typeName: in.typ.Name, methods: len(in.typ.Methods), inst: in.loc, valid: in.valid.loc})
	if n == 0 {
		return CodeNoDirect, 0 // the client's reply room cannot hold it
	}
	return OK, n
}

// mapped is what a client knows of one capability for direct calls; a nil
// typ means its RDMOs go to the engine.
type mapped struct {
	typ   *Type
	mem   dtutils.RemoteMemory
	valid *atomic.Uint64
	id    uint64
}

var engineOnly = &mapped{}

// Register makes t's Direct methods runnable by this client (direct mode):
// t must be the type the engine registered under the same name (same
// methods, same bodies); the client checks the name and method count it
// describes.
func (c *Client) Register(t Type) error {
	return c.types.add(t, maxEngineCost, c.cfg.CallBytes)
}

// mapping returns cap's direct mapping, describing and mapping the
// instance on first use; engineOnly when its RDMOs go to the engine.
func (c *Client) mapping(ctx context.Context, cap Capability) *mapped {
	if m, ok := c.direct.Load(cap); ok {
		return m
	}
	cn, ok := c.conns[cap.Process]
	if !ok {
		return engineOnly // the engine path reports ErrNoRoute
	}
	if !dtutils.CanMapRemote(cn.qp) {
		c.direct.Store(cap, engineOnly)
		return engineOnly
	}
	code, o, err := c.engineDo(ctx, cap, methodDescribe, nil, nil)
	if err != nil || code != OK {
		if code == CodeNoDirect {
			c.direct.Store(cap, engineOnly)
		}
		return engineOnly // a bad capability or a lost target: the engine path reports it
	}
	d, err := parseDescribe(o)
	t := c.types.get(d.typeName)
	if err != nil || t == nil || len(t.Methods) != d.methods || d.inst.Length < uint64(t.MinSize) {
		c.direct.Store(cap, engineOnly) // a type this client does not know
		return engineOnly
	}
	mem, err := dtutils.MapRemote(cn.qp, d.inst)
	var vw dtutils.RemoteMemory
	if err == nil {
		vw, err = dtutils.MapRemote(cn.qp, d.valid)
	}
	if err == nil && uintptr(unsafe.Pointer(&vw.Bytes()[0]))%8 != 0 {
		err = dtutils.ErrRemoteAccess
	}
	if err != nil {
		if errors.Is(err, dtutils.ErrRemoteAccess) {
			c.direct.Store(cap, engineOnly) // the target refused the mapping: do not ask again
		}
		return engineOnly // a lost target: the engine path reports it
	}
	m := &mapped{typ: t, mem: mem, valid: (*atomic.Uint64)(unsafe.Pointer(&vw.Bytes()[0])), id: cap.ID}
	m, _ = c.direct.LoadOrStore(cap, m)
	return m
}

// runDirect runs method on m's instance in the calling goroutine, appending
// its output to out; ok is false when the method is not Direct (the
// engine runs it).
func (c *Client) runDirect(m *mapped, method uint16, in, out []byte) (code Code, _ []byte, ok bool, err error) {
	var room int
	if int(method) < len(m.typ.Methods) {
		if !m.typ.Methods[method].Direct {
			return 0, out, false, nil
		}
		room = m.typ.Methods[method].MaxOutput
	}
	if err := m.mem.Err(); err != nil {
		return 0, out, true, fmt.Errorf("%w: %w", ErrTargetLost, err)
	}
	c.nDirect.Add(1)
	// Revocation is linearized here: a method that passed this check
	// finishes, as one already running at the engine does.
	if m.valid.Load() != m.id {
		return CodeBadCapability, out, true, ErrBadCapability
	}
	out = slices.Grow(out, room)
	buf := out[len(out) : len(out)+room]
	code, n := invoke(m.typ, m.mem.Bytes(), method, in, buf)
	if code != OK && code < CodeUser {
		n = 0
	}
	return code, out[:len(out)+n], true, code.Err()
}

// ClientStats counts a client's RDMOs by where they ran.
type ClientStats struct {
	// Engine counts RDMOs sent to engines, direct mode's describe
	// requests included.
	Engine uint64
	// Direct counts RDMOs the client ran itself (direct mode).
	Direct uint64
}

// Stats returns the client's counts so far.
func (c *Client) Stats() ClientStats {
	return ClientStats{Engine: c.nEngine.Load(), Direct: c.nDirect.Load()}
}
