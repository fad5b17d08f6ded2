package dtutils

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/internal/jobtest"
)

// Cross-process tests re-execute the test binary as peers. Each peer prints
// "EP <endpoint> <locator of its region>", reads the other's, connects, runs
// its role, prints "DONE", waits for the other's DONE, checks its own memory
// and prints "RESULT ok" or "RESULT <failure>". The test relays the lines.
const peerEnv = "SERIEMA_DTUTILS_PEER" // role,transport,rank[,listen]

// peerProviders makes the providers of build-tagged transports (ofi) in
// peer processes, from the spec fields after the rank.
var peerProviders = map[string]func(proc *Process, args []string) (Provider, error){}

func TestMain(m *testing.M) {
	if spec := os.Getenv(peerEnv); spec != "" {
		os.Exit(peerMain(spec))
	}
	jobtest.Main(m)
}

const (
	peerRegion   = 32 << 20
	atomicsN     = 20000
	sealRecords  = 5000
	sealAreaBase = 4096
)

func peerMain(spec string) int {
	parts := strings.Split(spec, ",")
	role, transport := parts[0], parts[1]
	rank, _ := strconv.Atoi(parts[2])
	fail := func(format string, a ...any) int {
		fmt.Printf("RESULT "+format+"\n", a...)
		return 1
	}
	cfg := DefaultProcessConfig(uint32(rank))
	proc, err := NewProcess(cfg)
	if err != nil {
		return fail("process: %v", err)
	}
	defer proc.Close()
	var prov Provider
	switch transport {
	case "shm":
		prov, err = NewSHM(proc, SHMConfig{})
	case "tcp":
		c := DefaultTCPConfig()
		if len(parts) > 3 {
			c.Listen = parts[3]
		}
		prov, err = NewTCP(proc, c)
	default:
		mk := peerProviders[transport]
		if mk == nil {
			return fail("transport %q not in this build", transport)
		}
		prov, err = mk(proc, parts[3:])
	}
	if err != nil {
		return fail("provider: %v", err)
	}
	defer prov.Close()
	qp, err := prov.NewQueuePair()
	if err != nil {
		return fail("qp: %v", err)
	}
	region, err := proc.Registry().NewRegion(peerRegion, alloc.RegionConfig{})
	if err != nil {
		return fail("region: %v", err)
	}
	whole, _ := region.Locator(0, peerRegion)
	lb, _ := whole.MarshalBinary()
	fmt.Printf("EP %s %s\n", hex.EncodeToString(qp.Endpoint()), hex.EncodeToString(lb))
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	line := func() string {
		if !in.Scan() {
			return ""
		}
		return in.Text()
	}
	f := strings.Fields(line())
	if len(f) != 3 || f[0] != "EP" {
		return fail("bad peer line %q", f)
	}
	ep, _ := hex.DecodeString(f[1])
	plb, _ := hex.DecodeString(f[2])
	var peer alloc.Locator
	if err := peer.UnmarshalBinary(plb); err != nil {
		return fail("peer locator: %v", err)
	}
	if err := qp.Connect(ep); err != nil {
		return fail("connect: %v", err)
	}
	tx, err := NewTransmitter(qp, cfg.MaxUnsignaled, TransmitterConfig{})
	if err != nil {
		return fail("transmitter: %v", err)
	}
	mine := region.Bytes()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	word := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mine[off])) }

	switch role {
	case "hold":
		// Stay connected, serving the parent's operations, until killed.
		fmt.Println("READY")
		line()
		return 0
	case "atomics":
		// A write and a read-back of a rank-specific pattern.
		src, _ := region.Memory(1<<20, 4096)
		for i := range src.Bytes() {
			src.Bytes()[i] = byte(i + rank*100)
		}
		dst, _ := peer.Sub(2<<20, 4096)
		if err := tx.Write(src, dst); err != nil {
			return fail("write: %v", err)
		}
		back, _ := region.Memory(3<<20, 4096)
		if err := tx.Read(ctx, back, dst); err != nil {
			return fail("read: %v", err)
		}
		if string(back.Bytes()) != string(src.Bytes()) {
			return fail("read-back differs from write")
		}
		// Remote adds on the peer's word race the peer's own local adds.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < atomicsN; i++ {
				word(0).Add(1)
			}
		}()
		scratch, _ := region.Memory(64, 8)
		target, _ := peer.Sub(0, 8)
		var last uint64
		for i := 0; i < atomicsN; i++ {
			old, err := tx.FetchAdd(ctx, scratch, target, 1)
			if err != nil {
				return fail("fetch-add %d: %v", i, err)
			}
			if i > 0 && old <= last {
				return fail("fetch-add returned %d after %d", old, last)
			}
			last = old
		}
		wg.Wait()
	case "seal-send":
		// Sealed records of varying size at increasing offsets of the peer.
		ring, err := alloc.NewLinearCircular(zoneOf(proc), alloc.CircularConfig{UnitSize: 64 << 10, InitialUnits: 4, MaxUnits: 256, Align: 8})
		if err != nil {
			return fail("ring: %v", err)
		}
		off := uint64(sealAreaBase)
		for i := 0; i < sealRecords; i++ {
			n := sealSize(i)
			m, err := ring.Alloc(n)
			if errors.Is(err, alloc.ErrBusy) {
				tx.Flush(ctx)
				m, err = ring.Alloc(n)
			}
			if err != nil {
				return fail("alloc: %v", err)
			}
			b := m.Bytes()
			for j := 0; j < n-8; j++ {
				b[j] = byte(i*7 + j)
			}
			if n > 4200 {
				// Let the receiver catch up and wait on this record's seal,
				// so that it watches the long copy land.
				for t0 := time.Now(); time.Since(t0) < 50*time.Microsecond; {
				}
			}
			binary.LittleEndian.PutUint64(b[n-8:], sealOf(i))
			dst, _ := peer.Sub(off, uint64(n))
			if err := tx.Write(m, dst); err != nil {
				return fail("write %d: %v", i, err)
			}
			off += uint64(n)
		}
		if err := tx.Flush(ctx); err != nil {
			return fail("flush: %v", err)
		}
	case "seal-recv":
		off := sealAreaBase
		for i := 0; i < sealRecords; i++ {
			n := sealSize(i)
			// Spin (no sleeping back-off): the receiver must be looking
			// when a seal lands to see what lands after it.
			for spins := 0; word(off+n-8).Load() != sealOf(i); spins++ {
				if spins%1024 == 0 && ctx.Err() != nil {
					return fail("record %d never sealed", i)
				}
			}
			// Last byte first: a copy runs forwards, so the bytes next to
			// the seal are the last to land when the order is wrong.
			for j := n - 9; j >= 0; j-- {
				if mine[off+j] != byte(i*7+j) {
					return fail("record %d: byte %d read %d after its seal, want %d", i, j, mine[off+j], byte(i*7+j))
				}
			}
			off += n
		}
	default:
		return fail("unknown role %q", role)
	}
	fmt.Println("DONE")
	if l := line(); l != "DONE" {
		return fail("peer said %q instead of DONE", l)
	}
	if role == "atomics" {
		if got := word(0).Load(); got != 2*atomicsN {
			return fail("word holds %d after %d local and %d remote adds", got, atomicsN, atomicsN)
		}
		peerRank := 1 - rank
		for i := 0; i < 4096; i++ {
			if mine[2<<20+i] != byte(i+peerRank*100) {
				return fail("peer's write differs at byte %d", i)
			}
		}
	}
	fmt.Println("RESULT ok")
	// Stay until told to go, so the peer's last operations find us alive.
	line()
	return 0
}

func zoneOf(p *Process) *alloc.ZoneAllocator {
	z, _ := alloc.NewZoneAllocator(p.Registry(), alloc.ZoneConfig{SuperchunkSize: 8 << 20, ChunkSize: 64 << 10})
	return z
}

// sealSize: 16 … 4104 bytes, 8-aligned, and every 32nd record 32 KiB: a
// copy that long leaves microseconds in which a seal stored too early
// shows before the bytes next to it.
func sealSize(i int) int {
	if i%32 == 31 {
		return 32<<10 + 8
	}
	return 16 + 8*((i*37)%512)
}

func sealOf(i int) uint64 { return uint64(i+1) ^ 0xa5a5_5a5a_0000_0000 }

// peerProc is a running peer and its output.
type peerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startPeer runs the test binary as a peer; wrap prefixes the command (for
// ip netns exec).
func startPeer(t *testing.T, spec string, wrap ...string) *peerProc {
	t.Helper()
	args := append(wrap, os.Args[0], "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), peerEnv+"="+spec)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &peerProc{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	return p
}

func (p *peerProc) next(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatal("peer exited early")
		}
		return l
	case <-time.After(timeout):
		t.Fatal("peer silent")
	}
	return ""
}

// runPeers relays the protocol between two peers and checks both results.
func runPeers(t *testing.T, a, b *peerProc) {
	t.Helper()
	for _, pair := range [][2]*peerProc{{a, b}, {b, a}} {
		l := pair[0].next(t, 30*time.Second)
		if !strings.HasPrefix(l, "EP ") {
			t.Fatalf("expected an endpoint, got %q", l)
		}
		fmt.Fprintln(pair[1].stdin, l)
	}
	for _, pair := range [][2]*peerProc{{a, b}, {b, a}} {
		l := pair[0].next(t, 90*time.Second)
		if l != "DONE" {
			t.Fatalf("peer: %q", l)
		}
		fmt.Fprintln(pair[1].stdin, l)
	}
	for i, p := range []*peerProc{a, b} {
		if l := p.next(t, 30*time.Second); l != "RESULT ok" {
			t.Fatalf("peer %d: %s", i, l)
		}
	}
	for _, p := range []*peerProc{a, b} {
		fmt.Fprintln(p.stdin, "BYE")
	}
}

// TestCrossProcessAtomics (docs/design.md §4): two processes FetchAdd on each
// other's word while each adds to its own locally: both words sum exactly.
func TestCrossProcessAtomics(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			runPeers(t, startPeer(t, "atomics,"+tr+",0"), startPeer(t, "atomics,"+tr+",1"))
		})
	}
}

// TestCrossProcessSealVisibility (docs/design.md §4 visibility contract): a reader
// polling seal words in another process never sees a seal before the
// payload that precedes it.
func TestCrossProcessSealVisibility(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			runPeers(t, startPeer(t, "seal-recv,"+tr+",0"), startPeer(t, "seal-send,"+tr+",1"))
		})
	}
}
