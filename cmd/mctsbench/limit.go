package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/dtutils"
	"golang.org/x/sys/unix"
)

// The peers our transports are measured against, in the same run:
//
//   - micro -mode limit -transport shm: a two-process SPSC ring of sealed
//     records in one shared mapping, with no verbs layer at all — what the
//     machine allows (the paper's max-raw without dtutils around it);
//   - micro -mode limit -transport tcp: a plain Go TCP stream of
//     length-prefixed frames through bufio, the way a Go program would
//     stream records without us;
//   - latency -transport tcp-plain: a plain Go TCP ping-pong of fixed-size
//     messages, blocking reads and writes.
//
// Each starts its second process by re-executing this binary with limitEnv
// set to "role;transport;size;n;reps;address".

const limitEnv = "SERIEMA_MICRO_PEER"

type peerSpec struct {
	role, transport string
	size, n, reps   int
	addr            string
}

func (s peerSpec) encode() string {
	return strings.Join([]string{s.role, s.transport, strconv.Itoa(s.size), strconv.Itoa(s.n), strconv.Itoa(s.reps), s.addr}, ";")
}

func parsePeerSpec(v string) (peerSpec, error) {
	f := strings.SplitN(v, ";", 6)
	if len(f) != 6 {
		return peerSpec{}, fmt.Errorf("bad %s=%q", limitEnv, v)
	}
	size, e1 := strconv.Atoi(f[2])
	n, e2 := strconv.Atoi(f[3])
	reps, e3 := strconv.Atoi(f[4])
	if err := errors.Join(e1, e2, e3); err != nil {
		return peerSpec{}, fmt.Errorf("bad %s=%q: %w", limitEnv, v, err)
	}
	return peerSpec{role: f[0], transport: f[1], size: size, n: n, reps: reps, addr: f[5]}, nil
}

// peerMain runs the re-executed second process and returns its exit code.
func peerMain(env string, stderr io.Writer) int {
	s, err := parsePeerSpec(env)
	if err == nil {
		switch s.role {
		case "stream":
			err = limitTCPSender(s)
		case "ring":
			err = limitRingSender(s)
		case "echo":
			err = plainEcho(s)
		default:
			err = fmt.Errorf("unknown role %q", s.role)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench (peer process): %v\n", err)
		return 1
	}
	return 0
}

// startPeer re-executes this binary as the second process of spec.
func startPeer(s peerSpec, files ...*os.File) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), limitEnv+"="+s.encode())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the peer process: %w", err)
	}
	return cmd, nil
}

// acceptPeer starts the second process of s, which dials a fresh loopback
// listener (s.addr is set to it), and returns its connection; done closes
// the connection and waits for the process.
func acceptPeer(s peerSpec) (c net.Conn, done func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	s.addr = ln.Addr().String()
	cmd, err := startPeer(s)
	if err != nil {
		return nil, nil, err
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	if c, err = ln.Accept(); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("the %s process did not connect: %w", s.role, err)
	}
	return c, func() { c.Close(); cmd.Wait() }, nil
}

// runLimit measures the limit of spec.transport for every size.
func runLimit(spec rawSpec) ([]Result, error) {
	var out []Result
	for _, size := range spec.sizes {
		if size < 8 || size%8 != 0 || size > rawRingBytes/4 {
			return nil, fmt.Errorf("limit: size %d must be a multiple of 8 between 8 and %d", size, rawRingBytes/4)
		}
		s := peerSpec{transport: spec.transport, size: size, n: spec.n, reps: spec.reps}
		var rates []float64
		var err error
		switch spec.transport {
		case "tcp":
			rates, err = limitTCP(s)
		case "shm", "":
			rates, err = limitRing(s)
		default:
			err = fmt.Errorf("limit: no limit mode for transport %q", spec.transport)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, newResult("limit", transportName(spec.transport), size, spec.n, rates))
	}
	return out, nil
}

// limitTCP receives spec.reps streams of spec.n frames and times each
// after its first tenth.
func limitTCP(s peerSpec) ([]float64, error) {
	s.role = "stream"
	c, done, err := acceptPeer(s)
	if err != nil {
		return nil, fmt.Errorf("limit: %w", err)
	}
	defer done()
	r := bufio.NewReaderSize(c, 64<<10)
	buf := make([]byte, 4+s.size)
	var rates []float64
	for rep := 0; rep < s.reps; rep++ {
		var start time.Time
		for i := 0; i < s.n; i++ {
			if i == s.n/10 {
				start = time.Now()
			}
			if _, err := io.ReadFull(r, buf); err != nil {
				return nil, fmt.Errorf("limit: frame %d: %w", i, err)
			}
			if n := binary.LittleEndian.Uint32(buf); int(n) != s.size || binary.LittleEndian.Uint64(buf[4:]) != uint64(i) {
				return nil, fmt.Errorf("limit: frame %d is corrupt", i)
			}
		}
		rates = append(rates, float64(s.n-s.n/10)/time.Since(start).Seconds())
		if _, err := c.Write([]byte{1}); err != nil { // next repetition
			return nil, err
		}
	}
	return rates, nil
}

func limitTCPSender(s peerSpec) error {
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	w := bufio.NewWriterSize(c, 64<<10)
	frame := make([]byte, 4+s.size)
	binary.LittleEndian.PutUint32(frame, uint32(s.size))
	var ack [1]byte
	for rep := 0; rep < s.reps; rep++ {
		for i := 0; i < s.n; i++ {
			binary.LittleEndian.PutUint64(frame[4:], uint64(i))
			if _, err := w.Write(frame); err != nil {
				return err
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			return err
		}
	}
	return nil
}

// The ring limit: records of size bytes whose last word is the seal, in a
// ring of rawRingBytes after a page that holds the receiver's consumed
// count; the receiver publishes that count every quarter ring, as the raw
// benchmark's receiver does.
func limitRing(s peerSpec) ([]float64, error) {
	fd, err := unix.MemfdCreate("seriema-limit", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	size := rawRingBase + rawRingBytes
	f := os.NewFile(uintptr(fd), "limit-ring")
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(mem)
	s.role = "ring"
	cmd, err := startPeer(s, f) // fd 3 in the sender
	if err != nil {
		return nil, err
	}
	defer cmd.Wait()
	fb := (*atomic.Uint64)(unsafe.Pointer(&mem[0]))
	slots := ringSlots(s.size)
	quarter := max(1, slots/4)
	var rates []float64
	for rep := 0; rep < s.reps; rep++ {
		run := rep + 1
		var start time.Time
		for i := 0; i < s.n; i++ {
			if i == s.n/10 {
				start = time.Now()
			}
			off := rawRingBase + ringSlot(i, slots)*s.size
			w := (*atomic.Uint64)(unsafe.Pointer(&mem[off+s.size-8]))
			var b dtutils.Backoff
			for w.Load() != seal(run, i) {
				b.Wait()
			}
			if s.size >= 16 && binary.LittleEndian.Uint64(mem[off:]) != uint64(i) {
				return nil, fmt.Errorf("limit: record %d of run %d is corrupt", i, run)
			}
			if (i+1)%quarter == 0 || i == s.n-1 {
				fb.Store(seal(run, i))
			}
		}
		rates = append(rates, float64(s.n-s.n/10)/time.Since(start).Seconds())
	}
	return rates, nil
}

func limitRingSender(s peerSpec) error {
	size := rawRingBase + rawRingBytes
	mem, err := unix.Mmap(3, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping the ring: %w", err)
	}
	defer unix.Munmap(mem)
	fb := &consumed{fb: (*atomic.Uint64)(unsafe.Pointer(&mem[0]))}
	slots := ringSlots(s.size)
	rec := make([]byte, s.size) // the record, built then copied in as raw's are
	for rep := 0; rep < s.reps; rep++ {
		run := rep + 1
		for i := 0; i < s.n; i++ {
			if i >= slots {
				fb.await(run, i-slots+1)
			}
			off := rawRingBase + ringSlot(i, slots)*s.size
			binary.LittleEndian.PutUint64(rec, uint64(i))
			binary.LittleEndian.PutUint64(rec[s.size-8:], seal(run, i))
			// The same sealing copy as a one-sided shm write: payload,
			// then the last word with a release store.
			dtutils.Publish(mem[off:off+s.size], rec)
		}
		fb.await(run, s.n)
	}
	return nil
}

// plainPingPong measures round trips of size-byte messages over a plain
// Go TCP connection to an echoing second process.
func plainPingPong(size, n int) (*LatencyResult, error) {
	c, done, err := acceptPeer(peerSpec{role: "echo", transport: "tcp", size: size, n: n, reps: 1})
	if err != nil {
		return nil, fmt.Errorf("tcp-plain: %w", err)
	}
	defer done()
	msg := make([]byte, max(size, 1))
	back := make([]byte, len(msg))
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		msg[i%len(msg)] = byte(i)
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, back); err != nil {
			return nil, err
		}
		d := time.Since(t0)
		if back[i%len(msg)] != byte(i) {
			return nil, fmt.Errorf("tcp-plain: echo %d is corrupt", i)
		}
		if i >= n/10 {
			lat = append(lat, float64(d.Nanoseconds()))
		}
	}
	return &LatencyResult{Mode: "ping_pong", Size: size, Transport: "tcp-plain", N: len(lat),
		P50ns: percentile(lat, 50), P99ns: percentile(lat, 99), P999ns: percentile(lat, 99.9)}, nil
}

func plainEcho(s peerSpec) error {
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, max(s.size, 1))
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
}
