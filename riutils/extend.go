package riutils

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
)

// Synchronizer counts one thread's one-sided calls down as their callees
// finish running them (the paper's Executed notification). Its counter is a
// word of the caller's registered memory, and every callee decrements it
// with a one-sided FetchAdd after its handler returned: no message comes
// back. It belongs to its Messengers' thread.
type Synchronizer struct {
	m    *Messengers
	slot int
	word *atomic.Int64
	loc  alloc.Locator
}

// syncSlots is a thread's pool of synchronizer counters in one region.
type syncSlots struct {
	region *alloc.Region
	free   []int
}

// syncSlotCount bounds the live Synchronizers of one thread.
const syncSlotCount = 512

// NewSynchronizer returns a synchronizer counting n calls. Close it when
// done; a thread has at most 512 open at once.
func (m *Messengers) NewSynchronizer(n int) (*Synchronizer, error) {
	if m.proc.Closed() {
		return nil, errFabricClosed
	}
	if m.syncs == nil {
		r, err := m.f.Process().Registry().NewRegion(8*syncSlotCount, alloc.RegionConfig{Name: "riutils-sync"})
		if err != nil {
			return nil, err
		}
		m.syncs = &syncSlots{region: r}
		for i := syncSlotCount - 1; i >= 0; i-- {
			m.syncs.free = append(m.syncs.free, i)
		}
	}
	k := len(m.syncs.free)
	if k == 0 {
		return nil, fmt.Errorf("%w: %d synchronizers open on thread %d", ErrFull, syncSlotCount, m.self)
	}
	slot := m.syncs.free[k-1]
	m.syncs.free = m.syncs.free[:k-1]
	mem, _ := m.syncs.region.Memory(8*slot, 8)
	s := &Synchronizer{m: m, slot: slot, word: (*atomic.Int64)(unsafe.Pointer(&mem.Bytes()[0])), loc: mem.Locator()}
	s.word.Store(int64(n))
	return s, nil
}

// Add adds k calls to count (before making them). Add and Count touch
// registered memory: use them before the fabric closes (Wait reports
// ErrClosed after). Add panics after Close: the counter may be another
// synchronizer's by then.
func (s *Synchronizer) Add(k int) {
	if s.m == nil {
		panic("riutils: Synchronizer.Add after Close")
	}
	s.word.Add(int64(k))
}

// Count returns the calls still outstanding; 0 after Close.
func (s *Synchronizer) Count() int {
	if s.m == nil {
		return 0
	}
	return int(s.word.Load())
}

// usable checks a synchronizer given to a call: after its Close the
// counter goes back to the thread's pool, and a callee counting it down
// would count down whichever synchronizer has it next (that one's Wait
// would return early).
func (s *Synchronizer) usable() error {
	if s != nil && s.m == nil {
		return errSyncClosed
	}
	return nil
}

// Wait returns once the count is zero, running this thread's incoming calls
// meanwhile, or with ctx's error, or with an error naming a rank of the job
// that died (its calls may never be counted down).
func (s *Synchronizer) Wait(ctx context.Context) error {
	if err := s.usable(); err != nil {
		return err
	}
	w := s.m.replyWait()
	for {
		if s.m.proc.Closed() { // the counter's memory is unmapped
			return errFabricClosed
		}
		if s.word.Load() <= 0 {
			return nil
		}
		if s.m.Poll() > 0 {
			w.Reset()
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.m.f.DeadErr(); err != nil {
			return fmt.Errorf("riutils: synchronizer with %d calls outstanding: %w", s.word.Load(), err)
		}
		w.Wait()
	}
}

// Close returns the counter to the thread's pool. A call given s after
// Close fails with ErrClosed, as does Wait.
func (s *Synchronizer) Close() {
	if s.m != nil {
		s.m.syncs.free = append(s.m.syncs.free, s.slot)
		s.m = nil
	}
}

// CallSync is CallBuffer (buf may be nil) with an Executed notification:
// s counts the call down once dst has run it, whatever its result.
func (m *Messengers) CallSync(dst dsfabric.ThreadID, h dsfabric.HandlerID, args, buf []byte, s *Synchronizer) error {
	if err := s.usable(); err != nil {
		return err
	}
	return m.callExt(dst, h, extNotify, alloc.Locator{}, alloc.Locator{}, s, args, buf)
}

// CallBufferWrite (Table 1, variant 2) writes orig, registered memory of
// this process, into dest, registered memory of dst's process, with a
// one-sided write, then calls h on dst with Call.Buffer = dest's bytes. The
// write is complete when h runs. orig must not change until then (use s, or
// nil).
func (m *Messengers) CallBufferWrite(dst dsfabric.ThreadID, h dsfabric.HandlerID, args []byte, orig alloc.Memory, dest alloc.Locator, s *Synchronizer) error {
	if err := s.usable(); err != nil {
		return err // before the write: a refused call writes nothing
	}
	if err := m.checkRemote(dst, dest, orig.Len()); err != nil {
		return err
	}
	snd, err := m.sender(dst)
	if err != nil {
		return err
	}
	d, _ := dest.Sub(0, uint64(orig.Len()))
	// The buffer and the record travel on the same queue pair, in order:
	// a receiver that sees the record sees the buffer.
	if err := snd.tx.Write(orig, d); err != nil {
		return err
	}
	return m.callExt(dst, h, extWrite, d, alloc.Locator{}, s, args, nil)
}

// CallBufferRead (Table 1, variant 3) has dst's thread read orig,
// registered memory of this process, into dest, registered memory of dst's
// process, with a one-sided read, then run h with Call.Buffer = dest's
// bytes. orig must stay unchanged until h has run: pass s to know when.
func (m *Messengers) CallBufferRead(dst dsfabric.ThreadID, h dsfabric.HandlerID, args []byte, orig alloc.Memory, dest alloc.Locator, s *Synchronizer) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := m.checkRemote(dst, dest, orig.Len()); err != nil {
		return err
	}
	d, _ := dest.Sub(0, uint64(orig.Len()))
	return m.callExt(dst, h, extRead, d, orig.Locator(), s, args, nil)
}

func (m *Messengers) checkRemote(dst dsfabric.ThreadID, dest alloc.Locator, n int) error {
	names := m.f.Names()
	if !names.Valid(dst) {
		return fmt.Errorf("riutils: %w: thread %d", dsfabric.ErrBadThread, dst)
	}
	if dest.Process != uint32(names.Rank(dst)) || uint64(n) > dest.Length {
		return fmt.Errorf("riutils: %w: destination %v for %d bytes to thread %d", alloc.ErrOutOfRange, dest, n, dst)
	}
	return nil
}

// callExt writes an extension record (see wire.go).
func (m *Messengers) callExt(dst dsfabric.ThreadID, h dsfabric.HandlerID, flags uint32, dest, orig alloc.Locator, s *Synchronizer, args, buf []byte) error {
	if s != nil {
		flags |= extNotify
	} else {
		flags &^= extNotify
	}
	var sl alloc.Locator
	if s != nil {
		sl = s.loc
	}
	a := putExt(m.scratch[:0], h, flags, dest, orig, sl)
	a = append(a, args...)
	m.scratch = a
	return m.CallBuffer(dst, extHandler, a, buf)
}

// extended runs an extension record on the receiver.
func (r *receiver) extended(args, buf []byte) error {
	e, err := parseExt(args)
	if err != nil {
		return err
	}
	reg := r.m.f.Process().Registry()
	srcRank := uint32(r.m.f.Names().Rank(r.src))
	if e.flags&(extWrite|extRead) != 0 {
		b, err := reg.Resolve(e.dest)
		if err != nil {
			return fmt.Errorf("%w: buffer of a call from thread %d: %w", ErrProtocol, r.src, err)
		}
		if e.flags&extRead != 0 {
			if e.orig.Process != srcRank || e.orig.Length != e.dest.Length {
				return fmt.Errorf("%w: read of %v into %v for thread %d", ErrProtocol, e.orig, e.dest, r.src)
			}
			region, _ := reg.Lookup(e.dest.Region)
			local, err := region.Memory(int(e.dest.Offset), int(e.dest.Length))
			if err == nil {
				err = r.tx.Read(context.Background(), local, e.orig)
			}
			if err != nil {
				return fmt.Errorf("riutils: reading the buffer of thread %d: %w", r.src, err)
			}
		}
		buf = b
	}
	if _, err := r.run(e.handler, r.src, e.args, buf); err != nil {
		r.m.p.log.Warn("riutils: handler failed", "handler", fmt.Sprintf("%#08x", uint32(e.handler)), "err", err)
	}
	if e.flags&extNotify != 0 {
		if e.sync.Process != srcRank || e.sync.Length != 8 {
			return fmt.Errorf("%w: synchronizer %v of thread %d", ErrProtocol, e.sync, r.src)
		}
		scratch, err := allocFrom(r.m.rx.ring, r.tx, 8)
		if err != nil {
			return err
		}
		if _, err := r.tx.FetchAdd(context.Background(), scratch, e.sync, ^uint64(0)); err != nil {
			return fmt.Errorf("riutils: notifying thread %d: %w", r.src, err)
		}
	}
	return nil
}
