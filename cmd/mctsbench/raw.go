package main

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
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// The raw benchmark (the paper's max-raw, and its Fig. 2 over sizes): one
// sender thread in one process writes S-byte sealed records into a ring in
// the receiver's memory through a dtutils.Transmitter; the receiver polls
// each record's seal (its last word), reads the payload, and every quarter
// ring pushes its consumed count into the sender's memory with a one-sided
// write. No serialization, no dispatch: the per-message limit the higher
// layers are measured against.

const (
	rawRingBytes = 4 << 20
	rawRingBase  = 4096                   // the feedback word lives below the ring
	rawRoleEnv   = "SERIEMA_MICRO_SENDER" // set in the self-launched sender
)

// rawSpec is what both processes agree on.
type rawSpec struct {
	transport string
	sizes     []int
	n, reps   int
}

func (s rawSpec) warmup() int { return s.n / 10 }

// encode and parseRawSpec carry the spec to the self-launched sender in
// its environment: "transport;8,64;n;reps".
func (s rawSpec) encode() string {
	sz := make([]string, len(s.sizes))
	for i, v := range s.sizes {
		sz[i] = strconv.Itoa(v)
	}
	return fmt.Sprintf("%s;%s;%d;%d", s.transport, strings.Join(sz, ","), s.n, s.reps)
}

func parseRawSpec(v string) (rawSpec, error) {
	f := strings.Split(v, ";")
	if len(f) != 4 {
		return rawSpec{}, fmt.Errorf("bad %s=%q", rawRoleEnv, v)
	}
	sizes, err := parseSizes(f[1])
	if err != nil {
		return rawSpec{}, err
	}
	n, err1 := strconv.Atoi(f[2])
	reps, err2 := strconv.Atoi(f[3])
	if err := errors.Join(err1, err2); err != nil {
		return rawSpec{}, err
	}
	return rawSpec{transport: f[0], sizes: sizes, n: n, reps: reps}, nil
}

// senderMain runs the self-launched sender and returns its exit code.
func senderMain(env string, stdin io.Reader, stdout, stderr io.Writer) int {
	spec, err := parseRawSpec(env)
	if err == nil {
		err = runRawSender(spec, stdin, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench micro (sender, rank 1): %v\n", err)
		return 1
	}
	return 0
}

// ringSlots is the number of size-byte records in the ring: the largest
// power of two that fits, so that ringSlot is a mask. The limit and raw
// loops both index their ring this way; a 64-bit division per record
// measured a third of the raw sender's time.
func ringSlots(size int) int {
	n := 1
	for 2*n*size <= rawRingBytes {
		n *= 2
	}
	return n
}

// ringSlot is i % slots for slots from ringSlots.
func ringSlot(i, slots int) int { return i & (slots - 1) }

// seal marks record i of run r; it never equals a stale seal of another run.
func seal(run, i int) uint64 { return uint64(run)<<40 | uint64(i+1) }

// rawEndpoint is one process's side: process, provider, queue pair,
// transmitter and its region.
type rawEndpoint struct {
	proc   *dtutils.Process
	prov   dtutils.Provider
	qp     dtutils.QueuePair
	tx     *dtutils.Transmitter
	region *alloc.Region
	zone   *alloc.ZoneAllocator
}

func newRawEndpoint(rank uint32, transport string) (*rawEndpoint, error) {
	cfg := dtutils.DefaultProcessConfig(rank)
	proc, err := dtutils.NewProcess(cfg)
	if err != nil {
		return nil, err
	}
	e := &rawEndpoint{proc: proc}
	e.prov, err = newLocalProvider(proc, transport)
	if err == nil {
		e.qp, err = e.prov.NewQueuePair()
	}
	if err == nil {
		e.region, err = proc.Registry().NewRegion(rawRingBase+rawRingBytes, alloc.RegionConfig{Name: "micro"})
	}
	if err == nil {
		e.zone, err = alloc.NewZoneAllocator(proc.Registry(), alloc.ZoneConfig{SuperchunkSize: 64 << 20, ChunkSize: 2 << 20})
	}
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// newLocalProvider returns a provider of transport for a process whose
// peers run on this machine ("" means shm).
func newLocalProvider(proc *dtutils.Process, transport string) (dtutils.Provider, error) {
	switch transport {
	case "shm", "":
		return dtutils.NewSHM(proc, dtutils.SHMConfig{})
	case "tcp":
		return dtutils.NewTCP(proc, dtutils.DefaultTCPConfig())
	case "ofi":
		oc := dtutils.DefaultOFIConfig()
		if strings.HasPrefix(oc.Provider, "tcp") {
			oc.Node = "127.0.0.1" // both processes are on this machine
		}
		return dtutils.NewOFI(proc, oc)
	}
	return nil, fmt.Errorf("unknown transport %q (want shm, tcp or ofi)", transport)
}

// hello is the line each side sends: endpoint and region locator.
func (e *rawEndpoint) hello() string {
	l, _ := e.region.Locator(0, e.region.Size())
	b, _ := l.MarshalBinary()
	return "HELLO " + hex.EncodeToString(e.qp.Endpoint()) + " " + hex.EncodeToString(b)
}

// connect parses the peer's hello and connects; it returns the peer's region.
func (e *rawEndpoint) connect(line string) (alloc.Locator, error) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "HELLO" {
		return alloc.Locator{}, fmt.Errorf("unexpected line from peer: %q", line)
	}
	ep, err1 := hex.DecodeString(f[1])
	lb, err2 := hex.DecodeString(f[2])
	var l alloc.Locator
	if err := errors.Join(err1, err2, l.UnmarshalBinary(lb)); err != nil {
		return l, fmt.Errorf("peer hello: %w", err)
	}
	if err := e.qp.Connect(ep); err != nil {
		return l, err
	}
	tx, err := dtutils.NewTransmitter(e.qp, e.proc.Config().MaxUnsignaled, dtutils.TransmitterConfig{})
	e.tx = tx
	return l, err
}

func (e *rawEndpoint) close() {
	if e.prov != nil {
		e.prov.Close()
	}
	e.proc.Close()
}

func (e *rawEndpoint) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&e.region.Bytes()[off]))
}

// runRaw is the receiver (rank 0): it launches the sender and measures.
func runRaw(spec rawSpec) ([]Result, error) {
	for _, s := range spec.sizes {
		if s < 8 || s%8 != 0 || s > rawRingBytes/4 {
			return nil, fmt.Errorf("raw: size %d must be a multiple of 8 between 8 and %d", s, rawRingBytes/4)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	e, err := newRawEndpoint(0, spec.transport)
	if err != nil {
		return nil, err
	}
	defer e.close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), rawRoleEnv+"="+spec.encode())
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("raw: launching the sender: %w", err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			fmt.Fprintf(os.Stderr, "raw: sender (rank 1): %v\n", err)
		}
	}()
	out := bufio.NewReader(stdout)
	fmt.Fprintln(stdin, e.hello())
	line, err := out.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("raw: sender (rank 1) exited before saying hello: %w", err)
	}
	peer, err := e.connect(strings.TrimSpace(line))
	if err != nil {
		return nil, err
	}
	feedback, _ := peer.Sub(0, 8)
	fbMem, _ := e.region.Memory(0, 8) // our copy of the count we push
	ctx := context.Background()
	var results []Result
	run := 0
	for _, size := range spec.sizes {
		var rates []float64
		for rep := 0; rep < spec.reps; rep++ {
			run++
			slots := ringSlots(size)
			quarter := max(1, slots/4)
			var start time.Time
			for i := 0; i < spec.n; i++ {
				if i == spec.warmup() {
					start = time.Now()
				}
				off := rawRingBase + ringSlot(i, slots)*size
				w := e.word(off + size - 8)
				b := dtutils.Backoff{Idle: e.proc.Idle}
				for w.Load() != seal(run, i) {
					// A thread that polls memory drives the transport's
					// progress (over tcp the record is read off the socket).
					if e.proc.Progress() == 0 {
						b.Wait()
					}
				}
				// Read the payload: its first word is the record's number.
				if p := binary.LittleEndian.Uint64(e.region.Bytes()[off:]); size >= 16 && p != uint64(i) {
					return nil, fmt.Errorf("raw: record %d of run %d carries payload %d", i, run, p)
				}
				if (i+1)%quarter == 0 || i == spec.n-1 {
					// fbMem may still be in flight from the last push: the
					// Transmitter copies or applies it in order, so reuse is
					// safe only after Flush; one push per quarter ring is rare.
					if err := e.tx.Flush(ctx); err != nil {
						return nil, err
					}
					binary.LittleEndian.PutUint64(fbMem.Bytes(), seal(run, i))
					if err := e.tx.Write(fbMem, feedback); err != nil {
						return nil, err
					}
				}
			}
			el := time.Since(start)
			rates = append(rates, float64(spec.n-spec.warmup())/el.Seconds())
		}
		results = append(results, newResult("raw", transportName(spec.transport), size, spec.n, rates))
	}
	e.tx.Flush(ctx)
	return results, nil
}

// consumed is a sender's view of the receiver's feedback word. It reads
// the word, a cache line the receiver writes, only when the count it last
// read does not cover the slot about to be reused, as the producer of an
// SPSC ring caches its consumer's index: the limit and raw senders both
// use it, so neither pays a cross-core read per record.
type consumed struct {
	fb       *atomic.Uint64
	progress func() int // if not nil, drives the transport while waiting
	idle     func()
	run      int
	seen     int // the count last read for run
}

// await returns once the receiver consumed count records of run.
func (c *consumed) await(run, count int) {
	if run != c.run {
		c.run, c.seen = run, 0
	}
	b := dtutils.Backoff{Idle: c.idle}
	for c.seen < count {
		if v := c.fb.Load(); v>>40 == uint64(run) {
			c.seen = int(v & (1<<40 - 1))
			if c.seen >= count {
				return
			}
		}
		if c.progress == nil || c.progress() == 0 {
			b.Wait()
		}
	}
}

// runRawSender is rank 1, started by runRaw with the same flags.
func runRawSender(spec rawSpec, in io.Reader, out io.Writer) error {
	e, err := newRawEndpoint(1, spec.transport)
	if err != nil {
		return err
	}
	defer e.close()
	rd := bufio.NewReader(in)
	line, err := rd.ReadString('\n')
	if err != nil {
		return fmt.Errorf("sender: no hello from the receiver: %w", err)
	}
	fmt.Fprintln(out, e.hello())
	peer, err := e.connect(strings.TrimSpace(line))
	if err != nil {
		return err
	}
	ring, err := alloc.NewLinearCircular(e.zone, alloc.CircularConfig{UnitSize: 256 << 10, InitialUnits: 8, MaxUnits: 256, Align: 8})
	if err != nil {
		return err
	}
	ctx := context.Background()
	fb := &consumed{fb: e.word(0), progress: e.proc.Progress, idle: e.proc.Idle}
	run := 0
	for _, size := range spec.sizes {
		for rep := 0; rep < spec.reps; rep++ {
			run++
			slots := ringSlots(size)
			for i := 0; i < spec.n; i++ {
				// The receiver must have consumed the record this slot held.
				if i >= slots {
					fb.await(run, i-slots+1)
				}
				m, err := ring.Alloc(size)
				if err != nil && errors.Is(err, alloc.ErrBusy) {
					if err := e.tx.Flush(ctx); err != nil {
						return err
					}
					m, err = ring.Alloc(size)
				}
				if err != nil {
					return err
				}
				b := m.Bytes()
				binary.LittleEndian.PutUint64(b, uint64(i)) // payload varies per record
				binary.LittleEndian.PutUint64(b[size-8:], seal(run, i))
				dst, _ := peer.Sub(uint64(rawRingBase+ringSlot(i, slots)*size), uint64(size))
				if err := e.tx.Write(m, dst); err != nil {
					return err
				}
			}
			// Between runs the ring is reused from slot 0: wait until the
			// receiver has consumed this run entirely.
			fb.await(run, spec.n)
		}
	}
	if err := e.tx.Flush(ctx); err != nil {
		return err
	}
	io.Copy(io.Discard, rd) // until the receiver closes our stdin
	return nil
}
