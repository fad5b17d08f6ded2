package rdmo

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/puzpuzpuz/xsync/v3"
	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// Method is one operation of an abstract data type. Its bounds are
// declared at registration and enforced on every call: the input is
// checked before the body runs, the output buffer it gets holds MaxOutput
// bytes, and its Ctx stops it after MaxCost units.
type Method struct {
	// Name names the method in errors and logs.
	Name string
	// MaxInput bounds the input bytes; larger requests get CodeInputTooLarge.
	MaxInput int
	// MaxOutput bounds the output bytes (the out slice's length).
	MaxOutput int
	// MaxCost bounds the Ctx units the body may use (see Ctx); at most the
	// engine's MaxCost.
	MaxCost int
	// Body runs the method on the instance behind x: it must not block
	// (the implementor certifies it; the engine stops it at MaxCost), and
	// must be safe to run concurrently with itself and the type's other
	// methods (over tcp, calls from different connections run at once).
	// It returns a code (OK or CodeUser and above) and the output bytes
	// written into out.
	Body func(x *Ctx, in, out []byte) (Code, int)
	// Direct certifies the body lock-free: it keeps no lock or other state
	// that its death halfway would leave held, so an initiator on the same
	// machine may run it itself on the mapped instance instead of asking
	// the engine (ClientConfig.Direct, EngineConfig.Direct). Methods that
	// take a lock (SignaledRead) leave it false: an initiator killed
	// holding the lock would block everyone.
	Direct bool
}

// Type is an abstract data type: a name and its methods, whose index in
// Methods is their method number on the wire.
type Type struct {
	Name    string
	Methods []Method
	// MinSize is the smallest instance memory the type accepts (its
	// header); Create refuses less.
	MinSize int
}

// maxMethods bounds a type's methods: method number 0xFFFF is the engine's
// own (methodDescribe).
const maxMethods = 1<<16 - 1

// verify checks t's declared bounds against a cost limit and the room of
// a call (CallBytes); Engine.Register and Client.Register share it.
func (t *Type) verify(maxCost, room int) error {
	if t.Name == "" || len(t.Name) > maxTypeName || len(t.Methods) == 0 || len(t.Methods) > maxMethods || t.MinSize < 0 {
		return fmt.Errorf("%w: type %q needs a name of 1..%d bytes and 1..%d methods", ErrBadType, t.Name, maxTypeName, maxMethods)
	}
	for i, m := range t.Methods {
		switch {
		case m.Body == nil:
			return fmt.Errorf("%w: %s.%s (method %d) has no body", ErrBadType, t.Name, m.Name, i)
		case m.MaxCost < 1 || m.MaxCost > maxCost:
			return fmt.Errorf("%w: %s.%s declares cost %d, engine allows [1, %d]", ErrBadType, t.Name, m.Name, m.MaxCost, maxCost)
		case m.MaxInput < 0 || m.MaxInput > room-requestHeader:
			return fmt.Errorf("%w: %s.%s declares input %d, calls allow %d", ErrBadType, t.Name, m.Name, m.MaxInput, room-requestHeader)
		case m.MaxOutput < 0 || m.MaxOutput > room-replyHeader:
			return fmt.Errorf("%w: %s.%s declares output %d, calls allow %d", ErrBadType, t.Name, m.Name, m.MaxOutput, room-replyHeader)
		}
	}
	return nil
}

// Capability names one instance for RDMOs: its process, its id, and a
// secret that the engine checks on every request. Whoever holds it may
// call the instance's methods until the owner revokes it. The owner hands
// capabilities out through a higher-level facility (a dsfabric or riutils
// call carrying MarshalBinary's bytes).
type Capability struct {
	Process uint32
	ID      uint64
	Secret  uint64
}

type instance struct {
	typ     *Type
	id      uint64
	secret  uint64
	mem     []byte
	loc     alloc.Locator // mem's, for direct initiators
	revoked atomic.Bool
	running atomic.Int32 // RDMOs the engine runs on it now
	valid   validWord    // direct mode's revocation word (zero without it)
}

// quiesce waits until no RDMO the engine started runs on in; in is
// revoked, so none starts after (run counts itself in before it looks).
// Each stops within its method's bounded cost.
func (in *instance) quiesce() {
	var b dtutils.Backoff
	for in.running.Load() != 0 {
		b.Wait()
	}
}

// Engine runs RDMOs on a process's memory. It is the process's dtutils
// Operator, so it runs on the transport's engine (the tcp or ofi connection
// engine, the process's call engine for shm peers), never on the
// application's threads; the queue of incoming operations is dtutils'
// (ProcessConfig.CallSlots), which refuses an RDMO beyond it (ErrBusy).
type Engine struct {
	proc   *dtutils.Process
	unhook func() // the registry's release hook
	cfg    EngineConfig
	mu     sync.Mutex // creation, revocation words
	types  typeSet
	inst   *xsync.MapOf[uint64, *instance]
	nextID uint64
	closed atomic.Bool
	valid  validTable // direct mode's revocation words, under mu
}

// NewEngine makes proc serve RDMOs. A process has at most one engine.
func NewEngine(proc *dtutils.Process, cfg EngineConfig) (*Engine, error) {
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	e := &Engine{proc: proc, cfg: cfg.withDefaults(), inst: xsync.NewMapOf[uint64, *instance]()}
	var b [8]byte
	rand.Read(b[:])
	e.nextID = binary.LittleEndian.Uint64(b[:]) >> 16 // ids are not secret; distinct per engine helps debugging
	if err := proc.SetOperator(e.serve); err != nil {
		return nil, fmt.Errorf("rdmo: %w", err)
	}
	e.unhook = proc.Registry().OnRelease(e.released)
	return e, nil
}

// released revokes the instances over a region being released (the
// registry calls it before unmapping the memory) and waits for the RDMOs
// running on them: an owner that releases instance memory without Revoke
// makes later RDMOs fail with CodeBadCapability rather than fault the
// process.
func (e *Engine) released(region uint32) {
	e.mu.Lock()
	words := e.valid.release(region)
	e.mu.Unlock()
	if words {
		return // revocation words: no instance lives there
	}
	e.inst.Range(func(id uint64, in *instance) bool {
		if in.loc.Region == region {
			e.withdraw(id, in)
		}
		return true
	})
}

// withdraw revokes in (unless someone has), waits until no RDMO runs on
// it, and gives its revocation word back.
func (e *Engine) withdraw(id uint64, in *instance) bool {
	if in.revoked.Swap(true) {
		return false
	}
	e.inst.Delete(id)
	in.quiesce()
	e.mu.Lock()
	e.valid.give(in.valid)
	e.mu.Unlock()
	return true
}

// Register adds a type. A method is refused when its bounds do not fit the
// engine (MaxCost above the engine's, output or input beyond the process's
// CallBytes less the record headers) or it has no body.
func (e *Engine) Register(t Type) error {
	// NewProcess filled in CallBytes' default.
	return e.types.add(t, e.cfg.MaxCost, e.proc.Config().CallBytes)
}

// typeSet holds types by name: an engine's, a direct client's.
type typeSet struct {
	mu sync.Mutex
	m  map[string]*Type
}

// add registers a copy of t after checking its bounds (Type.verify).
func (s *typeSet) add(t Type, maxCost, room int) error {
	if err := t.verify(maxCost, room); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.m[t.Name]; dup {
		return fmt.Errorf("%w: type %q already registered", ErrBadType, t.Name)
	}
	if s.m == nil {
		s.m = make(map[string]*Type)
	}
	t.Methods = append([]Method(nil), t.Methods...)
	s.m[t.Name] = &t
	return nil
}

// get returns the type named name, nil if none.
func (s *typeSet) get(name string) *Type {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[name]
}

// Create makes an instance of a registered type over mem (registered
// memory of the engine's process, 8-aligned; the type's own Init lays it
// out) and returns its capability.
func (e *Engine) Create(typeName string, mem alloc.Memory) (Capability, error) {
	if e.closed.Load() {
		return Capability{}, ErrClosed
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.types.get(typeName)
	if t == nil {
		return Capability{}, fmt.Errorf("%w: type %q not registered", ErrBadType, typeName)
	}
	r := mem.Region()
	if r == nil {
		return Capability{}, fmt.Errorf("%w: instance memory is empty", ErrBadConfig)
	}
	if got, ok := e.proc.Registry().Lookup(r.ID()); !ok || got != r {
		return Capability{}, fmt.Errorf("%w: instance memory is not registered in process %d", ErrBadConfig, e.proc.Rank())
	}
	b := mem.Bytes()
	if len(b) < t.MinSize || len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return Capability{}, fmt.Errorf("%w: %s instance needs %d bytes, 8-aligned (got %d)", ErrBadConfig, typeName, t.MinSize, len(b))
	}
	var s [8]byte
	rand.Read(s[:])
	e.nextID++
	in := &instance{typ: t, id: e.nextID, secret: binary.LittleEndian.Uint64(s[:]), mem: b, loc: mem.Locator()}
	if e.cfg.Direct {
		var err error
		if in.valid, err = e.valid.take(e.proc.Registry(), in.id); err != nil {
			return Capability{}, fmt.Errorf("rdmo: revocation word: %w", err)
		}
	}
	e.inst.Store(e.nextID, in)
	return Capability{Process: e.proc.Rank(), ID: e.nextID, Secret: in.secret}, nil
}

// Revoke withdraws a capability: RDMOs that arrive after it get
// CodeBadCapability. It returns once the RDMOs the engine was running on
// the instance have finished (each within its method's bounded cost), so
// the memory is the caller's again then; a direct initiator that read the
// revocation word before it changed may still finish its method on it
// (see ClientConfig.Direct). Releasing the instance's memory revokes it
// the same way.
func (e *Engine) Revoke(c Capability) error {
	in, ok := e.inst.Load(c.ID)
	if !ok || c.Process != e.proc.Rank() || !sameSecret(in.secret, c.Secret) || !e.withdraw(c.ID, in) {
		return fmt.Errorf("%w: revoke of capability %d", ErrBadCapability, c.ID)
	}
	return nil
}

// Close makes the engine refuse every RDMO (CodeBadCapability): the
// process's Operator stays installed, as dtutils allows one per process.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.unhook()
	e.inst.Range(func(id uint64, in *instance) bool {
		e.withdraw(id, in)
		return true
	})
	return nil
}

// serve is the process's Operator: one RDMO, request to reply.
func (e *Engine) serve(src uint32, req, reply []byte) int {
	if len(reply) < replyHeader {
		return 0 // the caller sees a malformed (empty) reply
	}
	out := reply[replyHeader:]
	code, n := e.run(req, out)
	if code != OK && code < CodeUser {
		n = 0
	}
	return putReplyHeader(reply, code, n)
}

func (e *Engine) run(req, out []byte) (code Code, n int) {
	r, err := parseRequest(req)
	if err != nil {
		return CodeMalformed, 0
	}
	in, ok := e.inst.Load(r.id)
	if !ok || !sameSecret(in.secret, r.secret) {
		return CodeBadCapability, 0
	}
	// Counted in before the revocation is looked at: a withdraw that
	// revokes after this look waits for this RDMO to finish.
	in.running.Add(1)
	defer in.running.Add(-1)
	if in.revoked.Load() || e.closed.Load() {
		return CodeBadCapability, 0
	}
	if r.method == methodDescribe {
		return e.describe(in, r.input, out)
	}
	return invoke(in.typ, in.mem, r.method, r.input, out)
}

// invoke runs method of type t on mem, checking the method number and the
// input's bound, and stopping the body at its bounds: the engine's path
// and a direct initiator's.
func invoke(t *Type, mem []byte, method uint16, input, out []byte) (code Code, n int) {
	if int(method) >= len(t.Methods) {
		return CodeBadMethod, 0
	}
	m := &t.Methods[method]
	if len(input) > m.MaxInput {
		return CodeInputTooLarge, 0
	}
	if len(out) > m.MaxOutput {
		out = out[:m.MaxOutput]
	}
	x := Ctx{mem: mem, left: m.MaxCost}
	defer func() {
		if p := recover(); p != nil {
			code, n = CodeFault, 0
			if s, ok := p.(stop); ok {
				code = s.code
			}
		}
	}()
	code, n = m.Body(&x, input, out)
	if n < 0 || n > len(out) || (code != OK && code < CodeUser) {
		return CodeFault, 0
	}
	return code, n
}

// sameSecret compares secrets in constant time, so that timing tells a
// guesser nothing.
func sameSecret(a, b uint64) bool {
	return subtle.ConstantTimeEq(int32(a>>32), int32(b>>32))&subtle.ConstantTimeEq(int32(a), int32(b)) == 1
}
