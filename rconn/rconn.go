package rconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Listen listens on network ("tcp", "tcp4", "tcp6", "unix") and address
// with the default Config.
func Listen(network, address string) (net.Listener, error) {
	return Config{}.Listen(network, address)
}

// Dial connects with the default Config.
func Dial(network, address string) (net.Conn, error) {
	return Config{}.DialContext(context.Background(), network, address)
}

// DialContext connects with the default Config; ctx bounds connecting and
// the handshake.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return Config{}.DialContext(ctx, network, address)
}

// DialContext connects to address, then agrees with the listener over the
// new socket whether the bytes move through shared-memory rings (*Conn) or
// stay on the socket (the socket itself is returned).
func (c Config) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c = c.withDefaults()
	if err := c.VerifyConfig(); err != nil {
		return nil, err
	}
	var d net.Dialer
	sock, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(c.HandshakeTimeout)
	}
	conn, err := handshake(sock, c, dl)
	if err != nil {
		sock.Close()
		return nil, err
	}
	return conn, nil
}

// Listen listens on network and address; Accept returns connections that
// finished the handshake (a slow or hostile client holds up no other).
func (c Config) Listen(network, address string) (net.Listener, error) {
	c = c.withDefaults()
	if err := c.VerifyConfig(); err != nil {
		return nil, err
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	l := &listener{ln: ln, cfg: c, ready: make(chan net.Conn), done: make(chan struct{})}
	go l.serve()
	return l, nil
}

type listener struct {
	ln    net.Listener
	cfg   Config
	ready chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error // why Accept stopped; written by stop only, read after done is closed
}

func (l *listener) serve() {
	for {
		sock, err := l.ln.Accept()
		if err != nil {
			l.stop(err)
			return
		}
		go func() {
			conn, err := handshake(sock, l.cfg, time.Now().Add(l.cfg.HandshakeTimeout))
			if err != nil {
				l.cfg.Logger.Warn("rconn: handshake failed", "peer", sock.RemoteAddr(), "err", err)
				sock.Close()
				return
			}
			select {
			case l.ready <- conn:
			case <-l.done:
				conn.Close()
			}
		}()
	}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		if errors.Is(l.err, net.ErrClosed) {
			return nil, &net.OpError{Op: "accept", Net: "rconn", Addr: l.ln.Addr(), Err: net.ErrClosed}
		}
		return nil, l.err
	}
}

func (l *listener) Close() error {
	l.stop(net.ErrClosed)
	return l.ln.Close()
}

// stop ends Accept with err, once: err is written only before done
// closes, so that Accept reads it safely (a Close racing with serve's
// failing Accept used to let Accept return a nil connection and a nil
// error, which crashed net/http's Serve; found by make test's race run).
func (l *listener) stop(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

func (l *listener) Addr() net.Addr { return l.ln.Addr() }

// handshake runs the exchange of wire.go on a new socket, by dl.
func handshake(sock net.Conn, cfg Config, dl time.Time) (net.Conn, error) {
	sock.SetDeadline(dl)
	mine := hello{pid: uint32(os.Getpid()), fd: -1, rbell: -1, wbell: -1, machine: machineID()}
	var rx *ring
	var bells [2]*bell
	if !cfg.DisableRings {
		var err error
		if rx, bells, err = newSide(cfg.RingBytes); err != nil {
			cfg.Logger.Warn("rconn: no ring; staying on the socket", "err", err)
		} else {
			defer rx.closeFD() // the peer mapped it, or never will
			mine.flags, mine.fd, mine.key, mine.size = flagRing, int32(rx.fd), rx.key(), rx.size
			mine.rbell, mine.wbell = int32(bells[0].wfd), int32(bells[1].wfd)
		}
	}
	onRings := false
	defer func() {
		if !onRings {
			closeBells(bells)
		}
	}()
	if _, err := sock.Write(mine.marshal()); err != nil {
		return nil, fmt.Errorf("%w: writing the hello: %w", ErrHandshake, err)
	}
	var fixed [helloFixed]byte
	if _, err := io.ReadFull(sock, fixed[:]); err != nil {
		return nil, fmt.Errorf("%w: reading the hello: %w", ErrHandshake, err)
	}
	peer, n, err := parseHelloFixed(fixed[:])
	if err != nil {
		return nil, err
	}
	id := make([]byte, n)
	if _, err := io.ReadFull(sock, id); err != nil {
		return nil, fmt.Errorf("%w: reading the hello: %w", ErrHandshake, err)
	}
	peer.machine = string(id)
	// Map the peer's ring when both offer one on this machine.
	var tx *ring
	peerBells := [2]int{-1, -1}
	if rx != nil && peer.flags&flagRing != 0 && peer.machine == mine.machine && mine.machine != "" {
		if tx, peerBells, err = openPeer(peer); err != nil {
			cfg.Logger.Debug("rconn: cannot map the peer's ring; staying on the socket", "err", err)
			tx = nil
		}
	}
	defer func() {
		if !onRings {
			for _, fd := range peerBells {
				if fd >= 0 {
					unix.Close(fd)
				}
			}
		}
	}()
	verdict := [1]byte{0}
	if tx != nil {
		verdict[0] = 1
	}
	if _, err := sock.Write(verdict[:]); err != nil {
		return nil, fmt.Errorf("%w: writing the verdict: %w", ErrHandshake, err)
	}
	var theirs [1]byte
	if _, err := io.ReadFull(sock, theirs[:]); err != nil {
		return nil, fmt.Errorf("%w: reading the verdict: %w", ErrHandshake, err)
	}
	if theirs[0] > 1 {
		return nil, fmt.Errorf("%w: verdict %d", ErrHandshake, theirs[0])
	}
	sock.SetDeadline(time.Time{})
	if tx == nil || theirs[0] != 1 {
		return sock, nil
	}
	onRings = true
	return newConn(sock, rx, tx, bells, peerBells, cfg), nil
}

// newSide makes what this side offers: the ring it reads and its two
// doorbells.
func newSide(size int) (*ring, [2]*bell, error) {
	var bells [2]*bell
	rx, err := newRing(size)
	if err != nil {
		return nil, bells, err
	}
	for i := range bells {
		if bells[i], err = newBell(); err != nil {
			rx.closeFD()
			closeBells(bells)
			return nil, [2]*bell{}, err
		}
	}
	return rx, bells, nil
}

// openPeer maps the peer's ring and opens its doorbells.
func openPeer(h hello) (*ring, [2]int, error) {
	fds := [2]int{-1, -1}
	tx, err := openRing(h.pid, h.fd, h.key, h.size)
	if err != nil {
		return nil, fds, err
	}
	for i, fd := range []int32{h.rbell, h.wbell} {
		if fds[i], err = openBell(h.pid, fd); err != nil {
			for _, f := range fds[:i] {
				unix.Close(f)
			}
			return nil, [2]int{-1, -1}, err
		}
	}
	return tx, fds, nil
}

func closeBells(bells [2]*bell) {
	for _, b := range bells {
		if b != nil {
			b.r.Close()
			unix.Close(b.wfd)
		}
	}
}

// machineID names this machine: host name and boot ID. Two processes that
// agree on it may share memory (the ring's key then proves they do).
func machineID() string {
	host, _ := os.Hostname()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return host + "|" + strings.TrimSpace(string(boot))
}
