package rconn

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seriema-go/seriema/dtutils"
	"golang.org/x/sys/unix"
)

// Conn is a connection whose bytes travel through two shared-memory rings,
// one per direction, with its socket kept as the control channel: the
// peer's death closes the socket, which ends blocked reads (EOF once the
// ring is drained) and writes (EPIPE). It implements net.Conn, and
// CloseWrite like *net.TCPConn. Read and Write may be called concurrently
// from different goroutines; concurrent Reads (or Writes) take turns.
type Conn struct {
	sock   net.Conn
	rx, tx *ring // rx: the peer writes, this side reads; tx: the other way
	cfg    Config

	rdl, wdl atomic.Int64 // deadlines, Unix nanoseconds; 0: none

	closed   atomic.Bool
	peerGone atomic.Bool  // the control socket ended: the peer is gone
	protoErr atomic.Value // error: the peer broke the protocol

	rmu       sync.Mutex // the reading side
	head      uint64     // next record position (this side's copy of rx head)
	published uint64     // the head the writer was last shown (publish)
	cur       uint64     // data offset of the unread payload of the current record
	curLeft   int        // unread payload bytes of the current record
	recEnd    uint64     // position after the current record

	wmu        sync.Mutex // the writing side
	tail       uint64     // next position this side writes at
	headSeen   uint64     // the peer's head as last loaded: room up to it is known free
	writeShut  bool       // CloseWrite was called
	maxPayload int

	// Doorbells: this side's reader waits on rbell, its writer (for room)
	// on wbell; peerR and peerW are the write ends of the peer's. The
	// descriptors are closed by a cleanup once the Conn is unreachable, so
	// a late ring never writes to a reused descriptor.
	rbell, wbell *bell
	peerR, peerW int
}

func newConn(sock net.Conn, rx, tx *ring, bells [2]*bell, peer [2]int, cfg Config) *Conn {
	c := &Conn{sock: sock, rx: rx, tx: tx, cfg: cfg, maxPayload: int(tx.size/4) - recordHeader,
		rbell: bells[0], wbell: bells[1], peerR: peer[0], peerW: peer[1]}
	runtime.AddCleanup(c, func(fds [4]int) {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}, [4]int{peer[0], peer[1], bells[0].wfd, bells[1].wfd})
	go c.watch()
	return c
}

// watch reads the control socket, which carries nothing after the
// handshake: end of stream or an error means the peer is gone, and any
// byte is a protocol violation. Either wakes this side's blocked calls.
func (c *Conn) watch() {
	var b [1]byte
	n, err := c.sock.Read(b[:])
	if n > 0 {
		c.protoErr.Store(fmt.Errorf("%w: %d unexpected byte(s) on the control socket", ErrProtocol, n))
		if !c.closed.Load() {
			c.cfg.Logger.Warn("rconn: peer broke the protocol; closing", "peer", c.sock.RemoteAddr())
		}
		c.sock.Close()
	} else if err != nil && !c.closed.Load() {
		c.cfg.Logger.Debug("rconn: control socket ended", "peer", c.sock.RemoteAddr(), "err", err)
	}
	c.peerGone.Store(true)
	ringBell(c.rbell.wfd)
	ringBell(c.wbell.wfd)
}

// opErr wraps err as the net package does.
func (c *Conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "rconn", Source: c.sock.LocalAddr(), Addr: c.sock.RemoteAddr(), Err: err}
}

// check is what a blocked call checks on every round: Close, then its
// deadline.
func (c *Conn) check(op string, dl *atomic.Int64) error {
	if c.closed.Load() {
		return c.opErr(op, net.ErrClosed)
	}
	if d := dl.Load(); d != 0 && time.Now().UnixNano() >= d {
		return c.opErr(op, os.ErrDeadlineExceeded)
	}
	return nil
}

// sleep parks on b with sleeping raised, until it rings or the deadline
// (dl, Unix nanoseconds, 0 none) passes, after ready says there is still
// nothing to do. Whoever makes progress rings b when it sees sleeping.
func sleep(b *bell, sleeping *atomic.Uint32, dl int64, ready func() bool) {
	sleeping.Store(1)
	if !ready() {
		var t time.Time
		if dl != 0 {
			t = time.Unix(0, dl)
		}
		b.wait(t)
	}
	sleeping.Store(0)
}

// hotWait is the wait of a blocked Read or Write before it sleeps on its
// doorbell (Config.Spin).
func (c *Conn) hotWait() dtutils.HotWait {
	return dtutils.HotWait{Spin: min(spinAlone, c.cfg.Spin), Yield: c.cfg.Spin}
}

// Read reads what the peer wrote: at most one record's worth per call,
// blocking until something arrives, the peer closes or dies (io.EOF once
// everything it wrote was read), the deadline passes or Close.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, c.check("read", &c.rdl)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	w := c.hotWait()
	for {
		if err := c.check("read", &c.rdl); err != nil {
			return 0, err
		}
		if c.curLeft > 0 || c.nextRecord() {
			// Every record that is ready, up to len(b), and the space
			// they took returned once: a store to the head per record
			// was the reader's hot spot, the line the writer polls.
			n := c.copyOut(b)
			for n < len(b) && c.nextRecord() {
				n += c.copyOut(b[n:])
			}
			c.publish()
			return n, nil
		}
		if err, ok := c.protoErr.Load().(error); ok {
			return 0, c.opErr("read", err)
		}
		if c.rx.u32(offWClosed).Load() != 0 || c.peerGone.Load() {
			if c.nextRecord() { // written before the close
				n := c.copyOut(b)
				c.publish()
				return n, nil
			}
			c.publish()
			return 0, io.EOF
		}
		c.publish() // a lap's end skipped by nextRecord
		if w.Hot() {
			w.Wait()
			continue
		}
		sleep(c.rbell, c.rx.u32(offRSleep), c.rdl.Load(), func() bool {
			ready := c.nextRecord()
			c.publish() // a lap's end it skipped: the writer may wait for that room
			return ready || c.closed.Load() || c.peerGone.Load() || c.rx.u32(offWClosed).Load() != 0
		})
	}
}

// nextRecord looks for a record at the head of rx and makes it current;
// rmu is held.
func (c *Conn) nextRecord() bool {
	if c.curLeft > 0 {
		return true
	}
	for {
		off := c.head & c.rx.mask
		v := c.rx.word(off).Load()
		if uint32(v>>32) != tag(c.head) {
			return false
		}
		n := uint32(v)
		if n == wrapLength {
			c.head += c.rx.size - off
			continue
		}
		rec := recordHeader + (uint64(n)+7)&^7
		if n == 0 || off+rec > c.rx.size || rec > c.rx.size/4 {
			c.protoErr.Store(fmt.Errorf("%w: record of %d bytes at offset %d", ErrProtocol, n, off))
			return false
		}
		c.cur, c.curLeft, c.recEnd = off+recordHeader, int(n), c.head+rec
		return true
	}
}

// copyOut copies from the current record into b, moving the head past
// the record once it is read; rmu is held.
func (c *Conn) copyOut(b []byte) int {
	n := copy(b, c.rx.data[c.cur:c.cur+uint64(c.curLeft)])
	c.cur += uint64(n)
	c.curLeft -= n
	if c.curLeft == 0 {
		c.head = c.recEnd
	}
	return n
}

// publish shows the writer the reader's head, returning the space read
// since the last time, and wakes the writer if it sleeps for space; rmu is
// held.
func (c *Conn) publish() {
	if c.head == c.published {
		return
	}
	c.published = c.head
	c.rx.u64(offHead).Store(c.head)
	if c.rx.u32(offWSleep).Load() != 0 {
		ringBell(c.peerW)
	}
}

// Write writes b, in records of at most a quarter of the ring, blocking
// while the peer has not read enough to make room; it returns an error
// (and how much was written) when the deadline passes, on Close, or when
// the peer has closed or died (EPIPE).
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.writeShut {
		return 0, c.opErr("write", syscall.EPIPE)
	}
	if err := c.check("write", &c.wdl); err != nil || len(b) == 0 {
		return 0, err // as over TCP, a passed deadline fails even a write that fits
	}
	done := 0
	for done < len(b) {
		n := min(len(b)-done, c.maxPayload)
		rec := recordHeader + (uint64(n)+7)&^7
		off := c.tail & c.tx.mask
		if off+rec > c.tx.size {
			// The rest of the lap is too short: mark it unused.
			if err := c.room(c.tx.size - off); err != nil {
				return done, err
			}
			c.tx.word(off).Store(validity(c.tail, wrapLength))
			c.tail += c.tx.size - off
			continue
		}
		if err := c.room(rec); err != nil {
			return done, err
		}
		copy(c.tx.data[off+recordHeader:], b[done:done+n])
		c.tx.word(off).Store(validity(c.tail, uint32(n))) // last: the record is valid
		c.tail += rec
		done += n
		if c.tx.u32(offRSleep).Load() != 0 {
			ringBell(c.peerR)
		}
	}
	return done, nil
}

// room waits until n bytes past the tail are free; wmu is held. It loads
// the peer's head only when the head last seen leaves too little room: a
// load per write was the writer's hot spot, the line the reader stores to.
func (c *Conn) room(n uint64) error {
	free := func() bool {
		if c.tail+n-c.headSeen <= c.tx.size {
			return true
		}
		c.headSeen = c.tx.u64(offHead).Load()
		return c.tail+n-c.headSeen <= c.tx.size
	}
	w := c.hotWait()
	for {
		if free() {
			return nil
		}
		if err := c.check("write", &c.wdl); err != nil {
			return err
		}
		if c.peerGone.Load() || c.tx.u32(offRClosed).Load() != 0 {
			return c.opErr("write", syscall.EPIPE)
		}
		if w.Hot() {
			w.Wait()
			continue
		}
		sleep(c.wbell, c.tx.u32(offWSleep), c.wdl.Load(), func() bool {
			return free() || c.closed.Load() || c.peerGone.Load() || c.tx.u32(offRClosed).Load() != 0
		})
	}
}

// CloseWrite shuts the writing side: the peer reads io.EOF after what was
// written; this side can still read.
func (c *Conn) CloseWrite() error {
	if c.closed.Load() {
		return c.opErr("close", net.ErrClosed)
	}
	c.wmu.Lock()
	c.writeShut = true
	c.wmu.Unlock()
	c.tx.u32(offWClosed).Store(1)
	ringBell(c.peerR)
	return nil
}

// Close closes the connection: blocked calls return net.ErrClosed, the peer
// reads io.EOF after what was written and its writes fail.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return c.opErr("close", net.ErrClosed)
	}
	c.tx.u32(offWClosed).Store(1)
	c.rx.u32(offRClosed).Store(1)
	for _, fd := range []int{c.peerR, c.peerW, c.rbell.wfd, c.wbell.wfd} {
		ringBell(fd) // the peer's sleepers, then ours
	}
	c.rbell.r.Close()
	c.wbell.r.Close()
	return c.sock.Close()
}

func (c *Conn) LocalAddr() net.Addr  { return c.sock.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.sock.RemoteAddr() }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline bounds Read, including one already blocked.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(unixNano(t))
	ringBell(c.rbell.wfd)
	return nil
}

// SetWriteDeadline bounds Write, including one already blocked.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(unixNano(t))
	ringBell(c.wbell.wfd)
	return nil
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}
