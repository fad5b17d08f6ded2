package rconn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// pairs lists the ways a connection is made; every test body runs over
// each: rings set up over a unix socket and over TCP loopback, and plain
// sockets (rings disabled), the fallback.
var pairs = []struct {
	name     string
	network  string
	rings    bool
	wantRing bool
}{
	{"unix-rings", "unix", true, true},
	{"tcp-rings", "tcp", true, true},
	{"tcp-socket", "tcp", false, false},
}

// pair returns two connected ends, client and server.
func pair(t testing.TB, network string, rings bool) (net.Conn, net.Conn) {
	t.Helper()
	return pairWith(t, network, Config{DisableRings: !rings, Logger: quiet})
}

// pairWith returns two connected ends made with cfg.
func pairWith(t testing.TB, network string, cfg Config) (net.Conn, net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	ln, err := cfg.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := cfg.DialContext(context.Background(), network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.FailNow()
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func forPairs(t *testing.T, body func(t *testing.T, c, s net.Conn)) {
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			c, s := pair(t, p.network, p.rings)
			_, cr := c.(*Conn)
			_, sr := s.(*Conn)
			if cr != p.wantRing || sr != p.wantRing {
				t.Fatalf("rings: client %v server %v, want %v", cr, sr, p.wantRing)
			}
			body(t, c, s)
		})
	}
}

// TestStreamBothWays: a large pseudo-random stream each way at once, in
// uneven writes and reads, arrives whole and in order (records split at a
// quarter of the ring, laps wrapped, back-pressure).
func TestStreamBothWays(t *testing.T) {
	forPairs(t, func(t *testing.T, c, s net.Conn) {
		const total = 8 << 20
		src := make([]byte, total)
		for i := range src {
			src[i] = byte(i*7 + i>>11)
		}
		// A corrupt stream must fail the test, not hang it.
		c.SetDeadline(time.Now().Add(10 * time.Second))
		s.SetDeadline(time.Now().Add(10 * time.Second))
		var wg sync.WaitGroup
		for _, dir := range [][2]net.Conn{{c, s}, {s, c}} {
			w, r := dir[0], dir[1]
			wg.Add(2)
			go func() {
				defer wg.Done()
				for off, k := 0, 1; off < total; k = k*3%1000003 + 1 {
					n := min(total-off, k%(700<<10)+1)
					if _, err := w.Write(src[off : off+n]); err != nil {
						t.Error(err)
						return
					}
					off += n
				}
			}()
			go func() {
				defer wg.Done()
				got := make([]byte, 0, total)
				buf := make([]byte, 100<<10)
				for k := 1; len(got) < total; k = k*5%999983 + 1 {
					n, err := r.Read(buf[:k%len(buf)+1])
					if err != nil {
						t.Error(err)
						return
					}
					got = append(got, buf[:n]...)
				}
				if !bytes.Equal(got, src) {
					t.Error("stream differs")
				}
			}()
		}
		wg.Wait()
	})
}

// TestHalfClose: CloseWrite gives the peer io.EOF after everything
// written, and the reverse direction keeps working.
func TestHalfClose(t *testing.T) {
	forPairs(t, func(t *testing.T, c, s net.Conn) {
		c.Write([]byte("half"))
		if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(s)
		if err != nil || string(got) != "half" {
			t.Fatalf("read %q, %v", got, err)
		}
		if _, err := c.Write([]byte("more")); !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("a write after CloseWrite: %v, want EPIPE", err)
		}
		s.Write([]byte("back"))
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "back" {
			t.Fatalf("reverse direction: %q %v", b, err)
		}
	})
}

// TestDeadlines: a read with nothing to read and a write the peer does not
// read end at their deadlines with os.ErrDeadlineExceeded; moving a
// deadline into the past ends a blocked call; Close ends one too.
func TestDeadlines(t *testing.T) {
	forPairs(t, func(t *testing.T, c, s net.Conn) {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read past its deadline: %v", err)
		}
		var ne net.Error
		c.SetReadDeadline(time.Now().Add(-time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read with a past deadline: %v", err)
		}
		c.SetReadDeadline(time.Time{})
		// A writer whose reader never reads: back-pressure, then the deadline.
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		big := make([]byte, 64<<20)
		n, err := c.Write(big)
		if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(big) {
			t.Fatalf("write to a reader that never reads: %d, %v", n, err)
		}
		// A blocked read ended by a deadline moved into the past.
		errc := make(chan error, 1)
		go func() { _, err := s.Read(make([]byte, 0)); errc <- err }()
		<-errc
		go func() {
			s.SetReadDeadline(time.Time{})
			buf := make([]byte, 1)
			for { // drain what c managed to write, then block
				if _, err := s.Read(buf); err != nil {
					errc <- err
					return
				}
			}
		}()
		time.Sleep(50 * time.Millisecond)
		s.SetReadDeadline(time.Now().Add(-time.Millisecond))
		select {
		case err := <-errc:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("blocked read: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("moving the deadline did not end a blocked read")
		}
		// Close ends a blocked read.
		s.SetReadDeadline(time.Time{})
		go func() { _, err := c.Read(make([]byte, 1)); errc <- err }()
		time.Sleep(20 * time.Millisecond)
		c.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read blocked at Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not end a blocked read")
		}
		// The peer of a closed end reads EOF and cannot write.
		if _, err := io.ReadAll(s); err != nil {
			t.Fatalf("peer of a closed end: %v", err)
		}
		var werr error
		for i := 0; i < 100 && werr == nil; i++ {
			_, werr = s.Write(make([]byte, 1<<20))
			time.Sleep(time.Millisecond)
		}
		if !errors.Is(werr, syscall.EPIPE) && !errors.Is(werr, syscall.ECONNRESET) {
			t.Fatalf("write to a closed peer: %v", werr)
		}
	})
}

// TestGarbageOnControlSocket: bytes on the control socket after the
// handshake are a protocol violation: the receiving end's Read fails and
// its peer sees EOF; nothing hangs.
func TestGarbageOnControlSocket(t *testing.T) {
	c, s := pair(t, "unix", true)
	c.(*Conn).sock.Write([]byte("garbage"))
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := s.Read(make([]byte, 8))
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("read after garbage: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 8)); err != io.EOF {
		t.Fatalf("the garbage sender's read: %v", err)
	}
}

// TestHandshakeGarbage: a client that is no rconn endpoint is refused
// (the socket closed) without holding up the listener.
func TestHandshakeGarbage(t *testing.T) {
	ln, err := Config{Logger: quiet, HandshakeTimeout: time.Second}.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bad, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.Write([]byte(strings.Repeat("GET / HTTP/1.0\r\n", 4)))
	silent, _ := net.Dial("tcp", ln.Addr().String()) // never speaks
	defer silent.Close()
	go func() {
		c, err := Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	if string(b) != "ok" {
		t.Fatalf("good client after bad ones: %q", b)
	}
	bad.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(bad); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("bad client not closed: %v", err)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{RingBytes: 1000}, {RingBytes: 1 << 10}, {RingBytes: maxRing * 2}, {Spin: -1}, {Spin: 2 * time.Second}, {HandshakeTimeout: -1}} {
		if _, err := c.Listen("tcp", "127.0.0.1:0"); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestSleepersAreRung: a reader asleep for data is woken by the write that
// brings it, and a writer asleep for room by the read that frees it — by
// the peer's ring, not by the bell's one-second safety net, which this
// test lengthens past the deadlines so that a missing ring fails it.
func TestSleepersAreRung(t *testing.T) {
	saved := lostRingWait.Swap(int64(time.Minute))
	t.Cleanup(func() { lostRingWait.Store(saved) })
	forPairs(t, func(t *testing.T, c, s net.Conn) {
		const wait = 20 * time.Second
		// The reader is asleep (its 50 µs of polling long over) when the
		// byte comes.
		go func() {
			time.Sleep(30 * time.Millisecond)
			c.Write([]byte{7})
		}()
		s.SetReadDeadline(time.Now().Add(wait))
		var one [1]byte
		if n, err := s.Read(one[:]); n != 1 || err != nil || one[0] != 7 {
			t.Fatalf("a sleeping reader, woken by a write: %d %v", n, err)
		}
		// The writer fills the ring (1 MiB) and sleeps for room; the
		// reader starts once it is asleep.
		data := bytes.Repeat([]byte("room"), 1<<20) // 4 MiB
		c.SetWriteDeadline(time.Now().Add(wait))
		werr := make(chan error, 1)
		go func() {
			_, err := c.Write(data)
			werr <- err
		}()
		time.Sleep(30 * time.Millisecond)
		got := make([]byte, len(data))
		if _, err := io.ReadFull(s, got); err != nil {
			t.Fatalf("reading what a sleeping writer wrote: %v", err)
		}
		if err := <-werr; err != nil {
			t.Fatalf("a writer asleep for room: %v", err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("the data differ")
		}
		// A reader asleep with no deadline, then given one in the past.
		s.SetReadDeadline(time.Time{})
		rerr := make(chan error, 1)
		go func() { _, err := s.Read(one[:]); rerr <- err }()
		time.Sleep(30 * time.Millisecond)
		s.SetReadDeadline(time.Now().Add(-time.Millisecond))
		if err := awaitErr(rerr, 5*time.Second); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a sleeping reader whose deadline moved into the past: %v", err)
		}
		// A writer asleep for room (s does not read; 64 MiB is past a
		// socket's buffers too), then given a deadline in the past.
		c.SetWriteDeadline(time.Time{})
		go func() { _, err := c.Write(make([]byte, 64<<20)); werr <- err }()
		time.Sleep(30 * time.Millisecond)
		c.SetWriteDeadline(time.Now().Add(-time.Millisecond))
		if err := awaitErr(werr, 5*time.Second); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a writer asleep for room whose deadline moved into the past: %v", err)
		}
		// A reader asleep, woken by its peer's CloseWrite: end of stream.
		c.SetReadDeadline(time.Time{})
		go func() { _, err := c.Read(one[:]); rerr <- err }()
		time.Sleep(30 * time.Millisecond)
		if err := s.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if err := awaitErr(rerr, 5*time.Second); err != io.EOF {
			t.Fatalf("a sleeping reader whose peer closed its writing side: %v, want io.EOF", err)
		}
	})
}

// awaitErr returns what errc delivers, or a timeout error after d.
func awaitErr(errc <-chan error, d time.Duration) error {
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		return fmt.Errorf("nothing after %v: the sleeper was not woken", d)
	}
}

// TestRecordBeyondRing: a record header whose length runs past the ring
// (a broken or hostile peer) is a protocol error for the reader, not a
// read outside the shared memory.
func TestRecordBeyondRing(t *testing.T) {
	for _, quarter := range []bool{false, true} {
		c, s := pair(t, "unix", true)
		cw, sr := c.(*Conn), s.(*Conn)
		n := uint32(cw.tx.size) // past the ring's end
		if quarter {
			n = uint32(cw.tx.size/4) + 1 // inside the ring, past a record's bound
		}
		cw.wmu.Lock()
		cw.tx.word(cw.tail & cw.tx.mask).Store(validity(cw.tail, n))
		cw.wmu.Unlock()
		sr.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := sr.Read(make([]byte, 64)); !errors.Is(err, ErrProtocol) {
			t.Fatalf("a record of %d bytes in a %d-byte ring: %v, want ErrProtocol", n, cw.tx.size, err)
		}
	}
}

// TestWrapWaitsForTheLapBefore: a writer that must wrap at the ring's end
// writes its wrap marker only where the reader has consumed the lap
// before. Records of 3/16 of the ring: five fill a lap but its last
// sixteenth, which the writer skips with a wrap marker; the reader stops
// just before that marker, the writer fills the next lap, and a further
// write must then wait rather than put its marker over the one the reader
// has not yet passed, which would leave the reader stuck at it.
func TestWrapWaitsForTheLapBefore(t *testing.T) {
	c, s := pairWith(t, "unix", Config{RingBytes: minRing, Logger: quiet})
	u := minRing / 16
	rec := make([]byte, 3*u-recordHeader)
	for i := range rec {
		rec[i] = byte(i)
	}
	write := func(n int, dl time.Duration) error {
		c.SetWriteDeadline(time.Now().Add(dl))
		for i := 0; i < n; i++ {
			if _, err := c.Write(rec); err != nil {
				return err
			}
		}
		return nil
	}
	read := func(n int) {
		t.Helper()
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, len(rec))
		for i := 0; i < n; i++ {
			if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, rec) {
				t.Fatalf("record %d: %v", i, err)
			}
		}
	}
	if err := write(5, 10*time.Second); err != nil { // lap 0: [0, 15/16)
		t.Fatal(err)
	}
	// The reader stops before lap 0's wrap marker; lap 1 then starts with
	// that marker and fills [0, 15/16) again.
	read(5)
	if err := write(5, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := write(1, 50*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write into a full ring: %v, want the deadline", err)
	}
	read(5)
}

// fakePeer runs the other side of a handshake by hand over sock: it offers
// a real ring of this process, as a peer on machine would, and answers
// the verdict it is given; forge, if set, changes its hello first. It
// returns the verdict the side under test sent.
func fakePeer(t *testing.T, sock net.Conn, machine string, forge func(*hello), verdict byte) byte {
	t.Helper()
	rx, bells, err := newSide(DefaultConfig().RingBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer closeBells(bells)
	defer rx.closeFD()
	h := hello{flags: flagRing, pid: uint32(os.Getpid()), fd: int32(rx.fd), key: rx.key(), size: rx.size,
		rbell: int32(bells[0].wfd), wbell: int32(bells[1].wfd), machine: machine}
	if forge != nil {
		forge(&h)
	}
	sock.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := sock.Write(h.marshal()); err != nil {
		t.Fatal(err)
	}
	var fixed [helloFixed]byte
	if _, err := io.ReadFull(sock, fixed[:]); err != nil {
		t.Fatal(err)
	}
	_, n, err := parseHelloFixed(fixed[:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(sock, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	var theirs [1]byte
	if _, err := io.ReadFull(sock, theirs[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := sock.Write([]byte{verdict}); err != nil {
		t.Fatal(err)
	}
	return theirs[0]
}

// TestHandshakeVerdicts (seed 003 §3: shared memory only between
// processes of one machine, by agreement): a peer whose hello names
// another machine is not mapped, even where its descriptors would open;
// and a side that mapped its peer's ring stays on the socket when the
// peer could not map its own; a hello whose ring does not open as
// described (not the key the ring carries, the peer's descriptor not
// there) leaves both on the socket.
func TestHandshakeVerdicts(t *testing.T) {
	for _, c := range []struct {
		name        string
		machine     string
		forge       func(*hello)
		peerVerdict byte
		wantVerdict byte
	}{
		{"another machine", "elsewhere|00000000-0000-0000-0000-000000000000", nil, 1, 0},
		{"peer could not map", machineID(), nil, 0, 1},
		{"wrong key", machineID(), func(h *hello) { h.key ^= 1 }, 1, 0},
		{"no such descriptor", machineID(), func(h *hello) { h.fd = 1 << 20 }, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if machineID() == "" {
				t.Skip("no boot ID: rings are never offered here")
			}
			fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			if err != nil {
				t.Fatal(err)
			}
			conns := make([]net.Conn, 2)
			for i, fd := range fds {
				f := os.NewFile(uintptr(fd), "sock")
				if conns[i], err = net.FileConn(f); err != nil {
					t.Fatal(err)
				}
				f.Close()
				defer conns[i].Close()
			}
			type result struct {
				c   net.Conn
				err error
			}
			done := make(chan result, 1)
			go func() {
				cfg := DefaultConfig()
				cfg.Logger = quiet
				got, err := handshake(conns[0], cfg, time.Now().Add(10*time.Second))
				done <- result{got, err}
			}()
			if v := fakePeer(t, conns[1], c.machine, c.forge, c.peerVerdict); v != c.wantVerdict {
				t.Errorf("verdict %d, want %d", v, c.wantVerdict)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if rc, ok := r.c.(*Conn); ok {
				rc.Close()
				t.Fatal("the handshake chose rings that only one side mapped")
			}
		})
	}
}

// TestPollingYields: a Read that polls for data yields its processor after
// spinAlone, so that a goroutine its own goroutine has just woken runs at
// once. Go readies a woken goroutine to run next on the waker's processor;
// with one processor, a reader that kept polling there (Spin 1 s) would
// let it run only when the runtime preempts the reader, every 10–20 ms:
// 200 hand-offs would take 2 s or more, where yielding takes microseconds
// each. The bound of 500 ms leaves both sides two orders of magnitude.
func TestPollingYields(t *testing.T) {
	c, s := pairWith(t, "unix", Config{Spin: time.Second, Logger: quiet})
	if _, ok := s.(*Conn); !ok {
		t.Fatal("no rings between two ends in one process")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const handoffs = 200
	woke := make(chan byte)
	rerr := make(chan error, 1)
	go func() {
		var b [1]byte
		for range handoffs {
			if _, err := s.Read(b[:]); err != nil {
				rerr <- err
				return
			}
			woke <- b[0] // readies the main goroutine; this one polls again
		}
		rerr <- nil
	}()
	t0 := time.Now()
	for i := range handoffs {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-woke:
			if got != byte(i) {
				t.Fatalf("hand-off %d carried %d", i, got)
			}
		case err := <-rerr:
			t.Fatalf("reader: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("hand-off %d of %d not done after %v", i, handoffs, time.Since(t0))
		}
	}
	if err := <-rerr; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Errorf("%d hand-offs from a polling reader to the goroutine it woke took %v on one processor, want well under 500 ms (the reader keeps its processor)", handoffs, d)
	}
}

// TestReadTakesReadyRecords: a Read returns every record that is ready, up
// to the length of its buffer, not one write's worth: the reader of a
// stream of small writes makes one call per batch, and returns their space
// to the writer once. A buffer that ends inside a record leaves the rest
// of it for the next Read.
func TestReadTakesReadyRecords(t *testing.T) {
	c, s := pair(t, "unix", true)
	if _, ok := s.(*Conn); !ok {
		t.Fatal("no rings between two ends in one process")
	}
	var want []byte
	for i, n := range []int{10, 20, 30} {
		w := bytes.Repeat([]byte{byte('a' + i)}, n)
		if _, err := c.Write(w); err != nil {
			t.Fatal(err)
		}
		want = append(want, w...)
	}
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 25)
	n, err := s.Read(b)
	if err != nil || n != 25 || !bytes.Equal(b[:n], want[:25]) {
		t.Fatalf("Read of 25 bytes with three writes (10, 20, 30 bytes) ready: %d bytes %q, %v; want the first 25", n, b[:n], err)
	}
	b = make([]byte, 100)
	n, err = s.Read(b)
	if err != nil || n != 35 || !bytes.Equal(b[:n], want[25:]) {
		t.Fatalf("Read of 100 bytes with 35 ready in two records: %d bytes %q, %v; want the 35", n, b[:n], err)
	}
	// The space they took is back: the writer fills the ring again.
	big := make([]byte, 1<<20)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(big); errc <- err }()
	if _, err := io.ReadFull(s, make([]byte, len(big))); err != nil {
		t.Fatal(err)
	}
	if err := awaitErr(errc, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
