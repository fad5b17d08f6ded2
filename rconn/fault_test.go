package rconn

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/seriema-go/seriema/internal/jobtest"
)

const peerEnv = "RCONN_TEST_PEER"

func TestMain(m *testing.M) {
	if addr := os.Getenv(peerEnv); addr != "" {
		os.Exit(writerPeer(addr))
	}
	jobtest.Main(m)
}

// writerPeer dials addr and writes a counting stream until killed.
func writerPeer(addr string) int {
	c, err := Dial("unix", addr)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	if _, ok := c.(*Conn); !ok {
		fmt.Println("no rings")
		return 1
	}
	fmt.Println("READY")
	b := make([]byte, 4096)
	for i := 0; ; i++ {
		for j := range b {
			b[j] = byte(i + j)
		}
		if _, err := c.Write(b); err != nil {
			return 1
		}
	}
}

// pipes counts this process's open pipes (rconn's doorbells among them).
func pipes() int {
	n := 0
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// ringMappings counts this process's mappings of rconn rings.
func ringMappings(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps")
	}
	return bytes.Count(b, []byte("rconn-ring"))
}

// TestPeerKilledMidStream: a writer process killed in the middle of a
// stream leaves its reader with the complete records it wrote, then
// io.EOF, within a second or so, not a hang; once the reader closes, its
// rings are unmapped and its doorbells closed (no shared memory or
// descriptor leaks).
func TestPeerKilledMidStream(t *testing.T) {
	before, pipesBefore := ringMappings(t), pipes()
	ln, err := Config{Logger: quiet}.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"="+ln.Addr().String())
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(l) != "READY" {
		t.Fatalf("peer: %q", l)
	}
	buf := make([]byte, 64<<10)
	got := 0
	for got < 16<<20 {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	cmd.Process.Kill()
	cmd.Wait()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, err := c.Read(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read after the writer was killed: %v", err)
		}
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for ringMappings(t) > before || pipes() > pipesBefore {
		if time.Now().After(deadline) {
			t.Fatalf("%d ring mappings and %d pipes left after close (had %d and %d)", ringMappings(t), pipes(), before, pipesBefore)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// FuzzHello: the hello decoder refuses what is not a hello, with
// ErrHandshake, and what it accepts encodes back the same.
func FuzzHello(f *testing.F) {
	f.Add(hello{flags: flagRing, pid: 7, fd: 3, key: 9, size: 1 << 20, machine: "h|b"}.marshal())
	f.Add(hello{fd: -1}.marshal())
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < helloFixed {
			return
		}
		h, n, err := parseHelloFixed(b[:helloFixed])
		if err != nil {
			if !errors.Is(err, ErrHandshake) {
				t.Fatal(err)
			}
			return
		}
		if n > maxMachineID || len(b) < helloFixed+n {
			return
		}
		h.machine = string(b[helloFixed : helloFixed+n])
		if !bytes.Equal(h.marshal(), b[:helloFixed+n]) {
			t.Fatal("re-encoding differs")
		}
	})
}

// TestHelloChecked: the fixed part of a well-formed hello decodes, and one
// with reserved bits set, another version or a machine identity over 512
// bytes is refused with ErrHandshake (FuzzHello's seeds are well-formed).
func TestHelloChecked(t *testing.T) {
	good := hello{flags: flagRing, pid: 7, fd: 3, key: 9, size: 1 << 20, rbell: 4, wbell: 5, machine: "h|b"}.marshal()
	h, n, err := parseHelloFixed(good[:helloFixed])
	if err != nil || n != 3 || h.pid != 7 || h.fd != 3 || h.key != 9 || h.size != 1<<20 || h.rbell != 4 || h.wbell != 5 || h.flags != flagRing {
		t.Fatalf("well-formed hello: %+v, %d, %v", h, n, err)
	}
	for _, c := range []struct {
		name string
		edit func(b []byte)
	}{
		{"an unknown flag", func(b []byte) { b[5] |= 2 }},
		{"reserved bytes", func(b []byte) { b[7] = 1 }},
		{"version 1", func(b []byte) { b[4] = 1 }},
		{"a machine identity of 513 bytes", func(b []byte) { binary.LittleEndian.PutUint16(b[40:], maxMachineID+1) }},
	} {
		b := append([]byte(nil), good[:helloFixed]...)
		c.edit(b)
		if _, _, err := parseHelloFixed(b); !errors.Is(err, ErrHandshake) {
			t.Errorf("hello with %s: %v, want ErrHandshake", c.name, err)
		}
	}
}

// TestRingChecked: a peer's ring is mapped only when it is the one its
// hello described: its key, and a size that is a power of two.
func TestRingChecked(t *testing.T) {
	for _, c := range []struct {
		name    string
		size    int
		keyDiff uint64
		ok      bool
	}{
		{"as described", minRing, 0, true},
		{"another key", minRing, 2, false},
		{"not a power of two", minRing * 3, 0, false},
	} {
		r, err := newRing(c.size)
		if err != nil {
			t.Fatal(err)
		}
		m, err := openRing(uint32(os.Getpid()), int32(r.fd), r.key()^c.keyDiff, uint64(c.size))
		r.closeFD()
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, ErrHandshake)) {
			t.Errorf("ring %s: %v", c.name, err)
		}
		if err == nil && m.size != uint64(c.size) {
			t.Errorf("ring %s mapped with %d bytes", c.name, m.size)
		}
	}
}

// TestAcceptAfterClose: a Close racing with the listener's own failing
// accept never lets Accept return a nil connection with a nil error (which
// crashed net/http's Serve under make test); the race detector checks the
// error's hand-over.
func TestAcceptAfterClose(t *testing.T) {
	for i := 0; i < 100; i++ {
		ln, err := Listen("unix", filepath.Join(t.TempDir(), "s"))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if c != nil || err == nil {
				err = fmt.Errorf("Accept after Close returned %v, %v", c, err)
			} else if !errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("Accept after Close: %w, want net.ErrClosed", err)
			} else {
				err = nil
			}
			got <- err
		}()
		ln.Close()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
}
