package riutils

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
)

// Mode is an Aggregator's way of batching, chosen at run time.
type Mode int

const (
	// Trad packs calls into a local batch in registered memory and sends the
	// whole batch as one record, in one write, when it holds FlushSize bytes
	// or on Flush. Nothing is copied: the batch is built where it is sent
	// from, with room for the outer header and seal reserved.
	Trad Mode = iota
	// Ovfl sends each call straight through its messenger and keeps calls
	// locally only while the messenger cannot progress: it batches them
	// then, as Trad does, in registered memory (the paper's local
	// aggregation of exceeding calls), and the kept batches go first, in
	// order, when the messenger can progress again.
	Ovfl
)

func (m Mode) String() string {
	if m == Ovfl {
		return "ovfl"
	}
	return "trad"
}

// AggregatorConfig configures an Aggregator.
type AggregatorConfig struct {
	// Mode is Trad (default) or Ovfl.
	Mode Mode
	// FlushSize is the batch size in bytes at which Trad sends, and the
	// size of the batches Ovfl keeps its exceeding calls in. Default 4 KiB.
	FlushSize int
	// MaxExceeding bounds the bytes Ovfl keeps locally. A call that would
	// pass it, or that finds the messengers' record memory used up (4 MiB
	// for records of up to 4 KiB, shared by the thread's Aggregators),
	// waits for room under policy Retry, running this thread's incoming
	// calls meanwhile as a full messenger's Call does, and fails with
	// ErrFull (the call not kept) under Fail and RetryAsync. It counts
	// the kept calls' bytes (inner records, or whole records for a call
	// too big for a batch). Default 256 KiB: kept calls are copied twice,
	// and a bound the caches hold keeps that cheap (a stream kept 8 MiB
	// deep ran at 60-75 ns a call in BenchmarkCall/ovfl, 256 KiB deep at
	// 37-41 ns, when each kept call was a record of its own).
	MaxExceeding int
}

// DefaultAggregatorConfig returns the defaults: Trad, 4 KiB batches, 256 KiB
// kept by Ovfl at most.
func DefaultAggregatorConfig() AggregatorConfig { return AggregatorConfig{}.withDefaults() }

func (c AggregatorConfig) withDefaults() AggregatorConfig {
	if c.FlushSize == 0 {
		c.FlushSize = 4 << 10
	}
	if c.MaxExceeding == 0 {
		c.MaxExceeding = 256 << 10
	}
	return c
}

// VerifyConfig checks c (after defaults); Messengers.Aggregator also checks
// that a batch fits the messengers' chunks.
func (c AggregatorConfig) VerifyConfig() error {
	c = c.withDefaults()
	switch {
	case c.Mode != Trad && c.Mode != Ovfl:
		return fmt.Errorf("%w: Mode %d", ErrBadConfig, c.Mode)
	case c.FlushSize < innerHeaderBuf || c.FlushSize%8 != 0 || c.FlushSize > 128<<10:
		return fmt.Errorf("%w: FlushSize %d (a multiple of 8, at most 128 KiB)", ErrBadConfig, c.FlushSize)
	case c.MaxExceeding < 0:
		return fmt.Errorf("%w: MaxExceeding %d", ErrBadConfig, c.MaxExceeding)
	}
	return nil
}

// Aggregator batches calls on top of a thread's Messengers (the paper's
// RDMAAggregator). Like its Messengers, it belongs to one thread.
type Aggregator struct {
	m   *Messengers
	cfg AggregatorConfig
	out map[dsfabric.ThreadID]*aggDst
	// The destination used last (entries of out are never removed).
	last   *aggDst
	lastID dsfabric.ThreadID
}

type aggDst struct {
	// The open batch: [outer header][inner records][room for the seal].
	// Trad's batch being filled; Ovfl's batch of kept calls being filled.
	batch alloc.Memory
	buf   []byte // batch.Bytes() while batch is open: one slice per batch, not per call
	used  int    // bytes of inner records in batch
	// The run the open batch ends with (docs/wire.md, "Batch"): runN calls
	// of runH with runNA argument bytes, counted in the header at runAt
	// (from the first inner record). runN 0: the last inner record is not
	// one a call can extend.
	runAt, runNA, runN int
	runH               dsfabric.HandlerID
	// Ovfl: sealed records kept, in order (closed batches and calls too
	// big for a batch), ahead of the open batch.
	queue  []keptRecord
	queued int // ovfl: bytes kept (queue and open batch; MaxExceeding)
}

// extends reports whether a call of h with na argument and nb buffer
// bytes extends the run d's open batch ends with.
func (d *aggDst) extends(h dsfabric.HandlerID, na, nb int) bool {
	return d.runN > 0 && nb == 0 && h == d.runH && na == d.runNA && d.runN < maxRunCalls
}

// cost is the bytes of batch a call of h with na argument and nb buffer
// bytes takes: the arguments alone when it extends the run, else an inner
// record.
func (d *aggDst) cost(h dsfabric.HandlerID, na, nb int) int {
	if d.extends(h, na, nb) {
		return padded(na)
	}
	return innerSize(na, nb)
}

// put writes a call into the open batch, which has room for its cost, and
// returns that cost; the caller adds it to used. A stream of calls of one
// handler with one argument size becomes a run: each call after the first
// costs its arguments and one store into the run's header, not a header
// of its own (an 8-byte call: 8 bytes instead of 16).
func (d *aggDst) put(h dsfabric.HandlerID, args, buf []byte) int {
	na := len(args)
	if d.extends(h, na, len(buf)) {
		stride := padded(na)
		at := recordHeader + d.used
		putArgs(d.buf[at:at+stride:at+stride], args)
		d.runN++
		binary.LittleEndian.PutUint32(d.buf[recordHeader+d.runAt+4:], runWord(na, d.runN))
		return stride
	}
	n := putInner(d.buf[recordHeader+d.used:], h, args, buf)
	d.runN = 0
	if len(buf) == 0 && na <= maxRunArgs && h != extHandler {
		// A one-call run is a plain inner record: the header's run bit is
		// set only when a second call extends it.
		d.runAt, d.runH, d.runNA, d.runN = d.used, h, na, 1
	}
	return n
}

// closed forgets the open batch once it is sent or queued.
func (d *aggDst) closed() {
	d.batch, d.buf, d.used, d.runN = alloc.Memory{}, nil, 0, 0
}

// keptRecord is a sealed record Ovfl keeps, and the bytes it counts
// against MaxExceeding.
type keptRecord struct {
	mem alloc.Memory
	n   int
}

// Aggregator returns an aggregator over m.
func (m *Messengers) Aggregator(cfg AggregatorConfig) (*Aggregator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.VerifyConfig(); err != nil {
		return nil, err
	}
	if recordSize(cfg.FlushSize) > m.p.cfg.ChunkSize-recordsStart {
		return nil, fmt.Errorf("%w: FlushSize %d does not fit a chunk of %d bytes", ErrBadConfig, cfg.FlushSize, m.p.cfg.ChunkSize)
	}
	return &Aggregator{m: m, cfg: cfg, out: map[dsfabric.ThreadID]*aggDst{}}, nil
}

func (a *Aggregator) dst(t dsfabric.ThreadID) *aggDst {
	if a.last != nil && a.lastID == t {
		return a.last // a stream of calls to one thread skips the map
	}
	d, ok := a.out[t]
	if !ok {
		d = &aggDst{}
		a.out[t] = d
	}
	a.last, a.lastID = d, t
	return d
}

// Call runs h with args on thread dst, batched per the mode.
func (a *Aggregator) Call(dst dsfabric.ThreadID, h dsfabric.HandlerID, args []byte) error {
	return a.CallBuffer(dst, h, args, nil)
}

// CallBuffer is Call with a buffer side by side.
func (a *Aggregator) CallBuffer(dst dsfabric.ThreadID, h dsfabric.HandlerID, args, buf []byte) error {
	if a.m.proc.Closed() {
		return errFabricClosed // the batches are in its unmapped memory
	}
	d := a.dst(dst)
	if a.cfg.Mode == Ovfl {
		if d.queued == 0 && a.m.keeper == nil {
			// Ovfl's common case is write's path (Messengers.CallBuffer),
			// with no call frame more than write has: each frame's spills
			// are stores queued behind the record's stores into the
			// receiver's lines, and with two more frames a sender in step
			// with its receiver stalled at the first of them (40 % of its
			// profile) and stayed in step. Calling Messengers.call here
			// instead (own inlined away) was one frame more and measured
			// worse: ovfl / write 0.71–1.01 against 0.97–1.04, six
			// interleaved rounds.
			if err := a.m.checkSize(len(args) + len(buf)); err != nil {
				return err
			}
			s, err := a.m.sender(dst)
			if err != nil {
				return err
			}
			if ok, err := a.m.callTo(s, h, args, buf, Fail); ok || err != nil {
				return err
			}
			return a.overflow(dst, d, h, args, buf)
		}
		return a.ovfl(dst, d, h, args, buf)
	}
	in := d.cost(h, len(args), len(buf))
	if in > a.cfg.FlushSize {
		// Too big to batch: flush what is batched (order), send it alone.
		if err := a.flush(dst, d); err != nil {
			return err
		}
		return a.m.CallBuffer(dst, h, args, buf)
	}
	if d.used+in > a.cfg.FlushSize {
		if err := a.flush(dst, d); err != nil {
			return err
		}
	}
	if d.batch.IsZero() {
		s, err := a.m.sender(dst)
		if err != nil {
			return err
		}
		if d.batch, err = a.m.alloc(s.tx, recordSize(a.cfg.FlushSize)); err != nil {
			return err
		}
		d.buf = d.batch.Bytes()
	}
	d.used += d.put(h, args, buf)
	if d.used >= a.cfg.FlushSize {
		// The call is batched either way: a full messenger only delays it
		// to the next call or Flush.
		if err := a.flush(dst, d); err != nil && !errors.Is(err, ErrFull) {
			return err
		}
	}
	return nil
}

// flush seals dst's batch as one record and writes it.
func (a *Aggregator) flush(dst dsfabric.ThreadID, d *aggDst) error {
	if d.used == 0 {
		return nil
	}
	s, err := a.m.sender(dst)
	if err != nil {
		return err
	}
	if err := a.m.own(s); err != nil {
		return err
	}
	size := a.sealBatch(d)
	ok, err := s.reserve(size, a.m.p.cfg.Policy)
	if err == nil && !ok {
		err = fmt.Errorf("%w: thread %d has not consumed %d chunks", ErrFull, dst, a.m.p.cfg.MaxChunks)
	}
	if err != nil {
		return err // the batch stays: a later Flush retries it
	}
	rec, _ := d.batch.Slice(0, size)
	if err := s.write(rec); err != nil {
		return err // as above: a failed write releases nothing
	}
	d.closed() // rec's write released the handout
	return nil
}

// sealBatch writes the outer header and seal of d's open batch, which holds
// d.used bytes of inner records, and returns the record's size. The batch
// stays open: a later call may reseal it with more.
func (a *Aggregator) sealBatch(d *aggDst) int {
	size := recordSize(d.used)
	b := d.batch.Bytes()
	binary.LittleEndian.PutUint32(b[0:], uint32(d.used))
	binary.LittleEndian.PutUint32(b[4:], uint32(batchHandler))
	binary.LittleEndian.PutUint32(b[8:], uint32(a.m.self))
	binary.LittleEndian.PutUint32(b[12:], uint32(d.used))
	binary.LittleEndian.PutUint64(b[size-recordSeal:], sealOf(binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])))
	return size
}

// ovfl sends straight through, keeping calls locally while it cannot.
func (a *Aggregator) ovfl(dst dsfabric.ThreadID, d *aggDst, h dsfabric.HandlerID, args, buf []byte) error {
	if d.queued != 0 && !a.stuck(dst, d) {
		if err := a.drain(dst, d, Fail); err != nil {
			return err
		}
	}
	if d.queued == 0 {
		ok, err := a.m.call(dst, h, args, buf, Fail)
		if ok || err != nil {
			return err
		}
	}
	return a.overflow(dst, d, h, args, buf)
}

// overflow keeps a call that found dst's messenger full (or calls kept
// before it).
func (a *Aggregator) overflow(dst dsfabric.ThreadID, d *aggDst, h dsfabric.HandlerID, args, buf []byte) error {
	atBound, err := a.keep(dst, d, h, args, buf)
	if atBound && a.m.p.cfg.Policy == Retry {
		// Wait for room as a full messenger does under Retry: send what
		// is kept, in order, then this call straight through.
		if err := a.drain(dst, d, Retry); err != nil {
			return err
		}
		_, err := a.m.call(dst, h, args, buf, Retry)
		return err
	}
	return err
}

// stuck reports that dst's messenger has no room for the first record
// kept for it (the open batch when nothing else is), a cheap check before
// draining: while it holds, draining would only fail, and would cut the
// open batch short.
func (a *Aggregator) stuck(dst dsfabric.ThreadID, d *aggDst) bool {
	size := recordSize(d.used)
	if len(d.queue) != 0 {
		size = d.queue[0].mem.Len()
	}
	s, err := a.m.sender(dst)
	return err == nil && s.stuck(size)
}

// keep adds a call to dst's kept calls: into the open batch, or as a
// record of its own when it is too big for a batch. atBound reports that
// it was not kept because MaxExceeding or the messengers' record memory
// would be passed; err is then ErrFull.
func (a *Aggregator) keep(dst dsfabric.ThreadID, d *aggDst, h dsfabric.HandlerID, args, buf []byte) (atBound bool, err error) {
	in := d.cost(h, len(args), len(buf))
	if in > a.cfg.FlushSize {
		n := recordSize(len(args) + len(buf))
		if d.queued+n > a.cfg.MaxExceeding {
			return true, a.exceeding(dst, d)
		}
		a.closeBatch(d) // order: the open batch goes before this call
		mem, atBound, err := a.keptMemory(dst, d, n)
		if err != nil {
			return atBound, err
		}
		b := mem.Bytes()
		sealRecord(b, h, a.m.self, len(args), copyBody(b, args, buf))
		d.queue = append(d.queue, keptRecord{mem, n})
		d.queued += n
		return false, nil
	}
	full := d.used+in > a.cfg.FlushSize
	if full {
		in = innerSize(len(args), len(buf)) // in a new batch: no run to extend
	}
	if d.queued+in > a.cfg.MaxExceeding {
		return true, a.exceeding(dst, d)
	}
	if full {
		a.closeBatch(d)
	}
	if d.batch.IsZero() {
		mem, atBound, err := a.keptMemory(dst, d, recordSize(a.cfg.FlushSize))
		if err != nil {
			return atBound, err
		}
		d.batch, d.buf = mem, mem.Bytes()
	}
	in = d.put(h, args, buf)
	d.used += in
	d.queued += in
	return false, nil
}

// exceeding is the error of a call that would pass MaxExceeding.
func (a *Aggregator) exceeding(dst dsfabric.ThreadID, d *aggDst) error {
	return fmt.Errorf("%w: %d bytes already kept for thread %d (MaxExceeding %d)", ErrFull, d.queued, dst, a.cfg.MaxExceeding)
}

// keptMemory allocates size bytes of record memory for kept calls. Kept
// calls hold their records until sent, so the record memory can run out
// before MaxExceeding does: atBound, and ErrFull.
func (a *Aggregator) keptMemory(dst dsfabric.ThreadID, d *aggDst, size int) (mem alloc.Memory, atBound bool, err error) {
	s, err := a.m.sender(dst)
	if err != nil {
		return alloc.Memory{}, false, err
	}
	mem, err = a.m.alloc(s.tx, size)
	if errors.Is(err, alloc.ErrBusy) {
		return alloc.Memory{}, true, fmt.Errorf("%w: %d bytes kept for thread %d fill the messengers' record memory: %v", ErrFull, d.queued, dst, err)
	}
	return mem, false, err
}

// closeBatch seals ovfl's open batch, if any, and queues it behind the
// other kept records. The record shares the batch's handout (and so its
// unused tail): its write releases both, and nothing else may, since the
// kept record waits in the unit.
func (a *Aggregator) closeBatch(d *aggDst) {
	if d.used == 0 {
		return
	}
	rec, _ := d.batch.Slice(0, a.sealBatch(d))
	d.queue = append(d.queue, keptRecord{rec, d.used})
	d.closed()
}

// drain sends kept calls in order while the messenger progresses; when
// all of them went, the open batch goes too.
func (a *Aggregator) drain(dst dsfabric.ThreadID, d *aggDst, policy Policy) error {
	if d.queued == 0 {
		return nil
	}
	s, err := a.m.sender(dst)
	if err != nil {
		return err
	}
	if err := a.m.own(s); err != nil {
		return err
	}
	sent := 0
	for {
		if len(d.queue) == sent {
			if d.used == 0 {
				break
			}
			// Room for everything before it: the messenger progresses,
			// so the open batch need not wait to fill.
			a.closeBatch(d)
		}
		k := d.queue[sent]
		ok, err := s.reserve(k.mem.Len(), policy)
		if err != nil || !ok {
			d.dropSent(sent)
			return err
		}
		if err := s.write(k.mem); err != nil {
			d.dropSent(sent)
			return err
		}
		d.queued -= k.n
		sent++
	}
	d.dropSent(sent)
	return nil
}

// dropSent removes the first n kept calls, moving the rest to the front of
// the array so that it is reused rather than reallocated.
func (d *aggDst) dropSent(n int) {
	k := copy(d.queue, d.queue[n:])
	clear(d.queue[k:])
	d.queue = d.queue[:k]
}

// Exceeding returns the bytes Ovfl keeps locally for all destinations.
func (a *Aggregator) Exceeding() int {
	n := 0
	for _, d := range a.out {
		n += d.queued
	}
	return n
}

// Flush sends every batched (Trad) or kept (Ovfl) call, waiting for room
// per the messengers' policy.
func (a *Aggregator) Flush() error {
	if a.m.proc.Closed() {
		for _, d := range a.out {
			if d.used > 0 || d.queued > 0 {
				return fmt.Errorf("%w: calls batched or kept were not sent", errFabricClosed)
			}
		}
		return nil
	}
	for dst, d := range a.out {
		var err error
		if a.cfg.Mode == Trad {
			err = a.flush(dst, d)
		} else {
			err = a.drain(dst, d, a.m.p.cfg.Policy)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
