package shuffle

import (
	"encoding/binary"
	"fmt"

	"github.com/seriema-go/seriema/dtutils"
)

// The SR design (seed 004 §5, send/receive with credits in messages): the
// receiver's buffers are posted receives of its own process's shared
// receive queue, Depth per source; a sender sends a buffer with one Send
// (the immediate names its source index and carries the flags); every
// buffer released is posted again and, batched, a credit message (the
// credit word, by Send) goes back to the sender, whose own process has
// Depth receives per destination posted for them. Since each source keeps
// at most its window (≤ Depth) of buffers unconsumed, a posted receive is
// always there for the next Send.

// srSlots checks that proc's shared receive queue holds n receives.
func srSlots(proc *dtutils.Process, n int) error {
	if have := proc.Config().ReceiveSlots; have < n {
		return fmt.Errorf("%w: design sr posts %d receives, the process has ReceiveSlots %d (give the endpoint a process of its own with at least that many)", ErrBadConfig, n, have)
	}
	return nil
}

// postCredit posts credit receive buffer i; mu is held (or s is new).
func (s *Sender) postCredit(i int) error {
	m, _ := s.creditBufs.Slice(i*creditBytes, creditBytes)
	if err := s.proc.PostRecv(m, uint64(i)); err != nil {
		return fmt.Errorf("shuffle: posting a credit receive: %w", err)
	}
	return nil
}

// pollCredits applies the credit messages that arrived and posts their
// buffers again; mu is held. A message that names no destination of this
// sender, or comes from another process, is dropped (its connection's
// flow stays where it was, so a forger can only slow it).
func (s *Sender) pollCredits() {
	for {
		n := s.proc.RecvCQ().Poll(s.cq[:])
		for _, c := range s.cq[:n] {
			i := int(c.WRID)
			if i >= s.creditBufs.Len()/creditBytes {
				continue // not a receive this sender posted
			}
			d, _ := parseSRImm(c.Imm)
			if c.Status == dtutils.StatusSuccess && c.Bytes == creditBytes && d < len(s.conns) && s.conns[d].qp != nil && s.conns[d].peer == c.Src {
				word := binary.LittleEndian.Uint64(s.creditBufs.Bytes()[i*creditBytes:])
				if old, _ := unpackCredit(s.conns[d].credit.Load()); old <= word&(1<<creditCountBits-1) {
					s.conns[d].credit.Store(word)
				}
			}
			if err := s.postCredit(i); err != nil {
				for _, c := range s.conns {
					if c.c != nil {
						c.c.fail(fmt.Errorf("%w: %w", ErrPeerLost, err))
					}
				}
			}
		}
		if n < len(s.cq) {
			return
		}
	}
}

// srArrival is a buffer received and not yet handed out.
type srArrival struct {
	src, buf, n int
	flags       uint32
}

// postAll posts every receive buffer (NewReceiver).
func (r *Receiver) postAll() error {
	// Each source's share of the region ends with Depth buffers (RD's read
	// buffers); together they are one pool, any of which any source's
	// Send may land in.
	for _, s := range r.srcs {
		for k := 0; k < r.cfg.Depth; k++ {
			m, _ := s.reads.Slice(k*r.cfg.BufferBytes, r.cfg.BufferBytes)
			r.bufs = append(r.bufs, m)
		}
	}
	r.out = make([]int, len(r.bufs))
	for i := range r.bufs {
		if err := r.post(i); err != nil {
			return err
		}
	}
	return nil
}

func (r *Receiver) post(i int) error {
	if err := r.proc.PostRecv(r.bufs[i], uint64(i)); err != nil {
		return fmt.Errorf("shuffle: posting a receive buffer: %w", err)
	}
	return nil
}

// takeSR polls the arrivals and hands out the oldest; mu is held.
func (r *Receiver) takeSR(waited bool) (In, bool, error) {
	for {
		n := r.proc.RecvCQ().Poll(r.cq[:])
		for _, c := range r.cq[:n] {
			i := int(c.WRID)
			src, flags := parseSRImm(c.Imm)
			switch {
			case i >= len(r.out) || r.out[i] != 0:
				return In{}, false, fmt.Errorf("%w: a receive completion for buffer %d, which is not posted", ErrBadBuffer, i)
			case c.Status != dtutils.StatusSuccess:
				return In{}, false, fmt.Errorf("%w: a receive failed: %w", ErrPeerLost, c.Err())
			case src >= len(r.srcs) || r.srcs[src].qp == nil || r.srcs[src].peer != c.Src || r.srcs[src].ended:
				return In{}, false, fmt.Errorf("%w: a buffer from process %d names source %d", ErrBadBuffer, c.Src, src)
			}
			r.out[i] = src + 1
			r.landed = append(r.landed, srArrival{src: src, buf: i, n: c.Bytes, flags: flags})
			r.srcs[src].landed++
		}
		if n < len(r.cq) {
			break
		}
	}
	if r.landedAt == len(r.landed) {
		return In{}, false, nil
	}
	// A queue with its head at landedAt: a receiver that lags holds up to
	// Depth arrivals per source here, and moving them all down at every
	// take was half of its time at 1 KiB buffers. The taken are dropped
	// once they are half of it.
	a := r.landed[r.landedAt]
	r.landedAt++
	if r.landedAt > len(r.landed)/2 { // always once every one is out
		r.landed = r.landed[:copy(r.landed, r.landed[r.landedAt:])]
		r.landedAt = 0
	}
	s := r.srcs[a.src]
	s.landed--
	if r.cfg.Adaptive {
		// The spare: the arrivals of this source still waiting.
		r.adapt(s, waited && a.flags&flagStalled != 0, s.landed)
	}
	depleted := a.flags&flagDepleted != 0
	if depleted {
		s.ended = true
		r.live--
	}
	s.next++
	data := r.bufs[a.buf].Bytes()
	return In{Data: data[:a.n:a.n], Src: a.src, Depleted: depleted, seq: uint64(a.buf) + 1}, true, nil
}

// releaseSR posts the buffer again and credits its source, batching the
// credits to a quarter of the window (flushCredits sends the rest before
// the receiver waits, and every release after the source's end credits);
// mu is held.
func (r *Receiver) releaseSR(s *recvSrc, in In) error {
	i := int(in.seq) - 1
	if i < 0 || i >= len(r.out) || r.out[i] != in.Src+1 {
		return fmt.Errorf("%w: buffer %d of source %d released twice or never handed out", ErrBadBuffer, i, in.Src)
	}
	r.out[i] = 0
	if err := r.post(i); err != nil {
		return err
	}
	s.consumed++
	return r.creditDue(s)
}
