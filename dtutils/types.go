package dtutils

import (
	"fmt"

	"github.com/seriema-go/seriema/alloc"
)

// Op is the kind of a work request or completion.
type Op uint8

const (
	// OpWrite copies Local into Remote (one-sided).
	OpWrite Op = iota + 1
	// OpWriteImm is OpWrite that also consumes a receive at the target and
	// completes it with Imm.
	OpWriteImm
	// OpRead copies Remote into Local (one-sided).
	OpRead
	// OpSend delivers Local into the next receive posted at the peer process.
	OpSend
	// OpRecv is the completion of a posted receive filled by a Send.
	OpRecv
	// OpRecvImm is the completion of a posted receive consumed by a WriteImm.
	OpRecvImm
	// OpFetchAdd adds Add to the 8-byte word at Remote; the old value goes to Local.
	OpFetchAdd
	// OpCompareSwap stores Swap at Remote if it holds Compare; the old value
	// goes to Local.
	OpCompareSwap
	// OpNop transfers nothing; completes in order like any operation (used to
	// flush a queue pair).
	OpNop
	// OpCall hands Local to the target process's Operator (see
	// Process.SetOperator), which runs on the target's engine, not on an
	// application thread, and writes its reply into Result. The completion's
	// Bytes is the reply's length. It is what package rdmo is built on.
	OpCall
	numOps
)

var opNames = [...]string{"", "write", "write-imm", "read", "send", "recv", "recv-imm", "fetch-add", "compare-swap", "nop", "call"}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Status is the outcome of a work request.
type Status uint8

const (
	// StatusSuccess: the operation completed.
	StatusSuccess Status = iota
	// StatusRemoteAccess: the target refused it (see ErrRemoteAccess).
	StatusRemoteAccess
	// StatusReceiverNotReady: no receive was posted at the target.
	StatusReceiverNotReady
	// StatusConnectionLost: the connection broke before the operation completed.
	StatusConnectionLost
	// StatusLength: the message did not fit the posted receive buffer (or a
	// call's request or reply exceeded the target's CallBytes).
	StatusLength
	// StatusBusy: the target's queue of incoming calls was full (OpCall).
	StatusBusy
	// StatusNoOperator: the target process serves no calls (OpCall).
	StatusNoOperator
	numStatus
)

var statusErrs = [...]error{nil, ErrRemoteAccess, ErrReceiverNotReady, ErrConnectionLost, ErrLength, ErrBusy, ErrNoOperator}

// Err returns nil for StatusSuccess and the matching sentinel otherwise.
func (s Status) Err() error {
	if s < numStatus {
		return statusErrs[s]
	}
	return fmt.Errorf("%w: unknown status %d", ErrBadFrame, uint8(s))
}

func (s Status) String() string {
	if s == StatusSuccess {
		return "success"
	}
	return s.Err().Error()
}

// WorkRequest describes one operation posted on a queue pair.
type WorkRequest struct {
	// Op is the operation.
	Op Op
	// WRID is returned in the completion.
	WRID uint64
	// Signaled asks for a completion on success. Failed operations always
	// produce one, as in verbs.
	Signaled bool
	// Local is the source (Write, WriteImm, Send) or the destination (Read;
	// 8 bytes for the atomics).
	Local alloc.Memory
	// Remote is the target of one-sided operations; atomics need an 8-byte,
	// 8-aligned range.
	Remote alloc.Locator
	// Imm travels with WriteImm and Send to the receiver's completion.
	Imm uint32
	// Add is the addend of FetchAdd; Compare and Swap are CompareSwap's operands.
	Add, Compare, Swap uint64
	// Result receives the reply of OpCall (at most Result.Len() bytes);
	// Local is then the request.
	Result alloc.Memory
}

// Completion reports a finished work request, or a filled receive.
type Completion struct {
	WRID   uint64
	Op     Op
	Status Status
	// Bytes is the number of bytes transferred (received, for receives).
	Bytes int
	// Imm is the immediate of WriteImm and Send (receives only).
	Imm uint32
	// Src is the sending process's rank (receives only).
	Src uint32
	// InPlace marks a receive that Process.PollRecvInPlace delivered into
	// its own buffer (a send of up to InlineMax bytes that travelled inside
	// its completion): WRID is then zero, and the posted receive it would
	// have filled stays posted.
	InPlace bool

	retire uint64 // unsignaled-count snapshot of a signaled op (see sqAccount)
	hasRet bool
}

// Err returns the completion's status as an error (nil on success).
func (c Completion) Err() error { return c.Status.Err() }

// validate checks what every transport checks before posting.
func (wr *WorkRequest) validate(maxTransfer, maxCall int) error {
	switch wr.Op {
	case OpWrite, OpWriteImm, OpSend, OpRead:
		if wr.Local.Len() > maxTransfer {
			return fmt.Errorf("%w: %v of %d bytes exceeds the %d-byte transfer limit", ErrBadRequest, wr.Op, wr.Local.Len(), maxTransfer)
		}
		if wr.Op != OpSend && uint64(wr.Local.Len()) != wr.Remote.Length {
			return fmt.Errorf("%w: %v local %d bytes, remote %d bytes", ErrBadRequest, wr.Op, wr.Local.Len(), wr.Remote.Length)
		}
	case OpFetchAdd, OpCompareSwap:
		if wr.Local.Len() != 8 || wr.Remote.Length != 8 {
			return fmt.Errorf("%w: %v needs 8-byte local and remote buffers (got %d, %d)", ErrBadRequest, wr.Op, wr.Local.Len(), wr.Remote.Length)
		}
	case OpCall:
		if wr.Local.Len() > maxCall || wr.Result.Len() > maxCall {
			return fmt.Errorf("%w: call of %d request and %d reply bytes exceeds CallBytes %d", ErrBadRequest, wr.Local.Len(), wr.Result.Len(), maxCall)
		}
	case OpNop:
	default:
		return fmt.Errorf("%w: cannot post %v", ErrBadRequest, wr.Op)
	}
	return nil
}
