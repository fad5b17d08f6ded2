package rdmo

import (
	"errors"
	"fmt"
)

// Code is an RDMO's completion code: OK, one of the engine's codes below
// (the request never reached a method, or the method broke its bounds), or
// a method's own code (CodeUser and above, defined by each type).
type Code uint16

const (
	// OK: the method ran and succeeded.
	OK Code = 0
	// CodeBadCapability: no instance has this capability (never created,
	// revoked, or a wrong secret).
	CodeBadCapability Code = 1
	// CodeBadMethod: the instance's type has no such method.
	CodeBadMethod Code = 2
	// CodeInputTooLarge: the input exceeds the method's declared MaxInput.
	CodeInputTooLarge Code = 3
	// CodeOverBudget: the method used more than its declared MaxCost; it was
	// stopped there (what it wrote before stays written).
	CodeOverBudget Code = 4
	// CodeFault: the method touched memory outside its instance, misaligned
	// an atomic, wrote past its declared output, or panicked.
	CodeFault Code = 5
	// CodeMalformed: the request record was malformed.
	CodeMalformed Code = 6
	// CodeNoDirect: the engine does not let initiators run methods
	// themselves (EngineConfig.Direct); only the engine's describe request
	// gets it, and a Client then sends its RDMOs to the engine.
	CodeNoDirect Code = 7
	// CodeUser is the first code a type may define for its methods.
	CodeUser Code = 64
)

// Errors. Do and Result report the engine's codes as the matching error
// (errors.Is works), methods' own codes with a nil error, and the
// transport's failures as the errors after them.
var (
	ErrBadCapability = errors.New("rdmo: unknown or revoked capability")
	ErrBadMethod     = errors.New("rdmo: unknown method")
	ErrInputTooLarge = errors.New("rdmo: input larger than the method allows")
	ErrOverBudget    = errors.New("rdmo: method exceeded its declared cost")
	ErrFault         = errors.New("rdmo: method faulted")
	ErrMalformed     = errors.New("rdmo: malformed request or reply")
	ErrNoDirect      = errors.New("rdmo: engine does not allow direct initiators")

	// ErrBusy: the target's queue of incoming operations was full; the
	// RDMO did not run and may be retried.
	ErrBusy = errors.New("rdmo: target's queue of incoming operations full")
	// ErrNoEngine: the target process runs no RDMO engine.
	ErrNoEngine = errors.New("rdmo: target runs no RDMO engine")
	// ErrTargetLost: the connection to the target broke (it died or
	// closed); the RDMO may or may not have run.
	ErrTargetLost = errors.New("rdmo: target lost")
	// ErrNoRoute: the client has no queue pair to the capability's process.
	ErrNoRoute = errors.New("rdmo: no queue pair to the target process")
	// ErrBadType: a type or method was refused at registration.
	ErrBadType = errors.New("rdmo: type refused")
	// ErrBadConfig: a configuration field is out of range.
	ErrBadConfig = errors.New("rdmo: bad config")
	// ErrClosed: the client or engine was closed.
	ErrClosed = errors.New("rdmo: closed")
)

// errProcessClosed is what a client whose process closed returns.
var errProcessClosed = fmt.Errorf("%w: the client's process was closed", ErrClosed)

var codeErrs = [...]error{nil, ErrBadCapability, ErrBadMethod, ErrInputTooLarge, ErrOverBudget, ErrFault, ErrMalformed, ErrNoDirect}

// Err returns the engine code's error, nil for OK and methods' codes.
func (c Code) Err() error {
	if int(c) < len(codeErrs) {
		return codeErrs[c]
	}
	if c < CodeUser {
		return fmt.Errorf("%w: unknown engine code %d", ErrMalformed, uint16(c))
	}
	return nil
}

func (c Code) String() string {
	switch {
	case c == OK:
		return "ok"
	case c < CodeUser:
		return c.Err().Error()
	}
	return fmt.Sprintf("code %d", uint16(c))
}
