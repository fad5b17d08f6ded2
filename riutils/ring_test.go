package riutils

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/dtutils"
)

// twoThreads runs sender (thread 1) and receiver (thread 0) bodies in one
// process, where both rings can be inspected.
func twoThreads(t testing.TB, cfg Config, reg func(*dsfabric.Handlers), receiver, sender func(m *Messengers) error) {
	job(t, 1, 2, "", cfg, reg, func(m *Messengers) error {
		if m.ID() == 0 {
			return receiver(m)
		}
		return sender(m)
	})
}

// serveUntil is a receiver body: it runs its calls until stop is set, then
// reports any protocol error. It gives up after 20 s without a call: a
// sender that failed may never say stop.
func serveUntil(m *Messengers, stop *atomic.Bool) error {
	last := time.Now()
	for !stop.Load() {
		if m.Poll() > 0 {
			last = time.Now()
		} else if time.Since(last) > 20*time.Second {
			return errors.New("no call for 20 s, and the other thread never said stop")
		}
	}
	return m.Err()
}

// stalledReceiver is a receiver body that polls nothing until the sender
// sends, on accepted, how many calls it made; then it takes them all.
func stalledReceiver(seq *sequence, accepted <-chan int) func(m *Messengers) error {
	return func(m *Messengers) error {
		var n int
		select {
		case n = <-accepted:
		case <-time.After(30 * time.Second):
			return errors.New("the sender never said how many calls it made")
		}
		return awaitCalls(m, seq, int64(n), time.Now().Add(30*time.Second), "every accepted call must arrive once, in order")
	}
}

// unblockOnError, deferred by a sender that fails before it says how
// many calls it made, tells the stalled receiver to expect none, so that
// the test fails at once rather than after the receiver's 30 s wait.
func unblockOnError(accepted chan<- int, err *error) {
	if *err != nil {
		select {
		case accepted <- 0:
		default:
		}
	}
}

// withStalledReceiver runs sender on one thread of a two-thread job whose
// other thread polls only once sender has said, on accepted, how many calls
// it made; then every accepted call must arrive once, in order.
func withStalledReceiver(t *testing.T, cfg Config, sender func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) error) {
	t.Helper()
	withStalledSequence(t, cfg, &sequence{}, sender)
}

// withStalledSequence is withStalledReceiver with the caller's sequence
// (one that checks bodies, say).
func withStalledSequence(t *testing.T, cfg Config, seq *sequence, sender func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) error) {
	t.Helper()
	var h dsfabric.HandlerID
	accepted := make(chan int, 1)
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		stalledReceiver(seq, accepted),
		func(m *Messengers) error { return sender(m, h, accepted) })
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order or changed")
	}
}

// ringsSymmetric checks that the sender's handles and the receiver's chunks
// name the same memory in the same order.
func ringsSymmetric(s *sender, r *receiver) error {
	if len(s.chunks) != len(r.chunks) {
		return fmt.Errorf("sender ring has %d chunks, receiver ring %d", len(s.chunks), len(r.chunks))
	}
	reg := s.m.f.Process().Registry()
	for i, l := range s.chunks {
		b, err := reg.Resolve(l)
		if err != nil {
			return err
		}
		if unsafe.Pointer(&b[0]) != unsafe.Pointer(&r.chunks[i][0]) {
			return fmt.Errorf("slot %d: sender and receiver name different chunks", i)
		}
	}
	return nil
}

// TestMessengerGrowthAndFail (paper §4.4.1): a receiver that does not poll
// makes the sender grow its ring to MaxChunks; then Fail errors at once;
// both rings stay symmetric, and everything arrives once polling starts.
func TestMessengerGrowthAndFail(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 6, Policy: Fail}
	var seq sequence
	var h dsfabric.HandlerID
	sent := make(chan int, 1)
	var snd *Messengers
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			var n int
			select {
			case n = <-sent:
			case <-time.After(30 * time.Second):
				return errors.New("the sender never filled its ring")
			}
			if err := awaitCalls(m, &seq, int64(n), time.Now().Add(30*time.Second), "every call made before the ring was full must arrive"); err != nil {
				return err
			}
			s := snd.out[0]
			if len(m.rx.in) != 1 {
				return fmt.Errorf("%d incoming messengers, want 1", len(m.rx.in))
			}
			return ringsSymmetric(s, m.rx.in[0])
		},
		func(m *Messengers) error {
			snd = m
			var args [8]byte
			i := 0
			for ; ; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				err := m.Call(0, h, args[:])
				if errors.Is(err, ErrFull) {
					break
				}
				if err != nil {
					return err
				}
				if i > 100000 {
					return errors.New("never full")
				}
			}
			s := m.out[0]
			st := m.Stats()
			perChunk := (cfg.ChunkSize - recordsStart) / recordSize(8)
			if len(s.chunks) != cfg.MaxChunks || st.Grows != 2 || i != cfg.MaxChunks*perChunk {
				return fmt.Errorf("full after %d calls with %d chunks and %d grows; want %d calls, %d chunks, 2 grows", i, len(s.chunks), st.Grows, cfg.MaxChunks*perChunk, cfg.MaxChunks)
			}
			sent <- i
			return nil
		})
}

// TestMessengerRetryResumes: with Retry a full messenger blocks the caller
// until the receiver polls, then carries on in order, within MaxChunks.
func TestMessengerRetryResumes(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 4, Policy: Retry}
	var seq sequence
	var h dsfabric.HandlerID
	const n = 20000
	armed, blocked, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			hook := func() { once.Do(func() { close(blocked) }) }
			m.p.retryWaits.Store(&hook)
			close(armed)
			// Stopped until the sender fills the messenger and waits.
			select {
			case <-blocked:
			case <-finished:
				return errors.New("the sender finished without waiting for the stopped receiver")
			case <-time.After(30 * time.Second):
				return errors.New("the sender never waited for the stopped receiver")
			}
			return awaitCalls(m, &seq, n, time.Now().Add(30*time.Second), "Retry must resume and deliver every call once, in order")
		},
		func(m *Messengers) error {
			<-armed
			defer close(finished)
			var args [8]byte
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				if err := m.Call(0, h, args[:]); err != nil {
					return err
				}
			}
			select {
			case <-blocked:
			default:
				return errors.New("every call went through without waiting for the stopped receiver")
			}
			if c := len(m.out[0].chunks); c > cfg.MaxChunks {
				return fmt.Errorf("%d chunks, above MaxChunks %d", c, cfg.MaxChunks)
			}
			return nil
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
}

// TestMessengerExactChunkEnd: records that end exactly at a chunk's end,
// and the largest call a chunk holds; one byte more is refused.
func TestMessengerExactChunkEnd(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 4, Policy: Retry}
	const payload = 176 // record of 200 bytes: 40 fill the 8000-byte area exactly
	if (cfg.ChunkSize-recordsStart)%recordSize(payload) != 0 {
		t.Fatal("test sizes do not tile the chunk")
	}
	var got [3]int
	var h, hb dsfabric.HandlerID
	const n = 1000
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) {
		h, _ = hs.Register("exact", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if len(a) == payload && binary.LittleEndian.Uint64(a) == uint64(got[0]) {
				got[0]++
			}
			return nil, nil
		})
		hb, _ = hs.Register("big", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if len(a)+len(c.Buffer) == cfg.MaxPayload() && len(c.Buffer) == 100 && c.Buffer[99] == 7 {
				got[1]++
			}
			return nil, nil
		})
	}, func(m *Messengers) error {
		for got[0] < n || got[1] < 1 {
			m.Poll()
		}
		return m.Err()
	}, func(m *Messengers) error {
		args := make([]byte, payload)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(args, uint64(i))
			if err := m.Call(0, h, args); err != nil {
				return err
			}
			if m.out[0].pos == cfg.ChunkSize && (i+1)%40 != 0 {
				return fmt.Errorf("chunk full after %d records", i+1)
			}
		}
		buf := make([]byte, 100)
		buf[99] = 7
		if err := m.CallBuffer(0, hb, make([]byte, cfg.MaxPayload()-100), buf); err != nil {
			return fmt.Errorf("largest call: %w", err)
		}
		if err := m.Call(0, hb, make([]byte, cfg.MaxPayload()+1)); !errors.Is(err, ErrTooLarge) {
			return fmt.Errorf("call one byte over a chunk: %v", err)
		}
		return nil
	})
}

func TestConfigChecks(t *testing.T) {
	for _, c := range []Config{
		{ChunkSize: 1000, ChunksPerAllocation: 2, MaxChunks: 8},
		{ChunkSize: 9 << 10, ChunksPerAllocation: 2, MaxChunks: 8}, // not whole pages
		{ChunkSize: 8192, ChunksPerAllocation: 9, MaxChunks: 8},
		{ChunkSize: 8192, ChunksPerAllocation: 1, MaxChunks: 1},
		{ChunkSize: 8192, ChunksPerAllocation: 1, MaxChunks: 4, Policy: 7},
		{ChunkSize: 8192, ChunksPerAllocation: 1, MaxChunks: 4, MaxAsyncBytes: -1},
		{ChunkSize: 2 << 30, ChunksPerAllocation: 1, MaxChunks: 4}, // past 1 GiB
	} {
		if err := c.VerifyConfig(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v accepted: %v", c, err)
		}
	}
	if err := DefaultConfig().VerifyConfig(); err != nil {
		t.Fatal(err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	c := make([]byte, 8192)
	b := c[recordsStart : recordsStart+recordSize(13)]
	putRecord(b, 77, 5, []byte("hello"), []byte("world!!!"))
	var rec record
	st, err := parseRecord(c, recordsStart, &rec)
	if st != recOK || err != nil || rec.handler != 77 || rec.src != 5 || string(rec.args) != "hello" || string(rec.buf) != "world!!!" || rec.size != len(b) {
		t.Fatalf("%+v %d %v", rec, st, err)
	}
	// Any change to the header breaks the seal: never a false record.
	for i := 0; i < recordHeader; i++ {
		c[recordsStart+i] ^= 0x40
		if st, _ := parseRecord(c, recordsStart, &rec); st == recOK {
			t.Fatalf("flipped header byte %d still parses", i)
		}
		c[recordsStart+i] ^= 0x40
	}
	if st, _ := parseRecord(c, len(c)-16, &rec); st != recNone {
		t.Fatal("a tail too short for a record must read as nothing")
	}
	if st, _ := parseRecord(c, recordsStart+4, &rec); st != recCorrupt {
		t.Fatal("misaligned offset accepted")
	}
}

func FuzzRecordParse(f *testing.F) {
	c := make([]byte, 1024)
	putRecord(c[recordsStart:recordsStart+recordSize(3)], 1, 2, []byte("abc"), nil)
	f.Add(c, recordsStart)
	f.Add(make([]byte, 300), 296)
	f.Fuzz(func(t *testing.T, data []byte, pos int) {
		recordRoundTrip(t, data, pos)
		if len(data)%8 != 0 {
			data = data[:len(data)&^7]
		}
		var rec record
		st, err := parseRecord(data, pos, &rec)
		switch st {
		case recOK:
			end := pos + rec.size
			if err != nil || end > len(data) || pos < recordsStart {
				t.Fatalf("record [%d,%d) of %d bytes accepted", pos, end, len(data))
			}
			if recordHeader+len(rec.args)+len(rec.buf)+recordSeal > rec.size {
				t.Fatal("payload larger than the record")
			}
		case recCorrupt:
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("corrupt without ErrProtocol: %v", err)
			}
		}
	})
}

// recordRoundTrip: a record made by putRecord from arguments and a buffer
// cut from data parses back to the same handler, source, arguments and
// buffer (encode, decode, equal).
func recordRoundTrip(t *testing.T, data []byte, cut int) {
	if len(data) < 8 {
		return
	}
	h, src := dsfabric.HandlerID(binary.LittleEndian.Uint32(data)), dsfabric.ThreadID(binary.LittleEndian.Uint32(data[4:]))
	if h == 0 {
		h = 1 // Register never hands out ID 0: a zero header word means no record
	}
	body := data[8:]
	k := 0
	if len(body) > 0 {
		k = int(uint(cut) % uint(len(body)+1))
	}
	args, buf := body[:k], body[k:]
	c := make([]byte, recordsStart+recordSize(len(body))+8)
	putRecord(c[recordsStart:recordsStart+recordSize(len(body))], h, src, args, buf)
	var rec record
	st, err := parseRecord(c, recordsStart, &rec)
	if st != recOK || err != nil || rec.handler != h || rec.src != src || !bytes.Equal(rec.args, args) || !bytes.Equal(rec.buf, buf) || rec.size != recordSize(len(body)) {
		t.Fatalf("record (handler %#x, src %d, %d + %d bytes) parsed back as %+v, state %v, %v", h, src, len(args), len(buf), rec, st, err)
	}
}

// TestInnerRecordFormat: in a trad batch, a call without a buffer takes an
// 8-byte header (an 8-byte call: 16 bytes, where the first format took
// 24), a call with one takes 16; both parse back, and the forms no writer
// makes (a buffer flag with an empty buffer, a nonzero reserved word, a
// header cut short) are protocol errors.
func TestInnerRecordFormat(t *testing.T) {
	for _, c := range []struct {
		na, nb, size int
	}{{8, 0, 16}, {0, 0, 8}, {33, 0, 48}, {8, 5, 32}, {0, 1, 24}} {
		if got := innerSize(c.na, c.nb); got != c.size {
			t.Errorf("inner record of %d + %d bytes takes %d, want %d", c.na, c.nb, got, c.size)
		}
		args, buf := bytes.Repeat([]byte{0xa}, c.na), bytes.Repeat([]byte{0xb}, c.nb)
		b := bytes.Repeat([]byte{0xff}, c.size+8)
		putInner(b, 7, args, buf)
		h, a, bu, size, err := nextInner(b)
		if err != nil || h != 7 || !bytes.Equal(a, args) || !bytes.Equal(bu, buf) || size != c.size {
			t.Errorf("%d + %d bytes parsed back as handler %d, %q, %q, size %d, %v", c.na, c.nb, h, a, bu, size, err)
		}
		if pad := b[innerHeaderFor(c.nb)+c.na+c.nb : c.size]; !bytes.Equal(pad, make([]byte, len(pad))) {
			t.Errorf("%d + %d bytes: padding %x not zeroed", c.na, c.nb, pad)
		}
	}
	// A run: three calls of 5 argument bytes under one header.
	run := make([]byte, innerHeader+3*8+8)
	binary.LittleEndian.PutUint32(run, 9)
	binary.LittleEndian.PutUint32(run[4:], runWord(5, 3))
	for i := 0; i < 3; i++ {
		putArgs(run[innerHeader+8*i:innerHeader+8*i+8], []byte{byte(i), 1, 2, 3, 4})
	}
	h, args, na, stride, count, size, err := nextRun(run)
	if err != nil || h != 9 || na != 5 || stride != 8 || count != 3 || size != innerHeader+24 || args[16] != 2 || args[21] != 0 {
		t.Errorf("run parsed back as handler %d, %d bytes × %d (stride %d), size %d, %v", h, na, count, stride, size, err)
	}
	overrun := bytes.Clone(run[:innerHeader+16])
	withFlag := bytes.Clone(run)
	binary.LittleEndian.PutUint32(withFlag[4:], runWord(5, 3)|innerHasBuf)
	for name, b := range map[string][]byte{"run overruns the batch": overrun, "run with a buffer flag": withFlag, "run header cut short": run[:6]} {
		if _, _, _, _, _, _, err := nextRun(b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}

	withBuf := make([]byte, 32)
	putInner(withBuf, 7, []byte("ab"), []byte("cd"))
	emptyBuf, reserved, overrun := bytes.Clone(withBuf), bytes.Clone(withBuf), make([]byte, 16)
	binary.LittleEndian.PutUint32(emptyBuf[8:], 0)
	reserved[12] = 1
	binary.LittleEndian.PutUint32(overrun[4:], 9)
	for name, b := range map[string][]byte{
		"flag, empty buffer": emptyBuf,
		"reserved word":      reserved,
		"header cut short":   withBuf[:12],
		"arguments overrun":  overrun,
	} {
		if _, _, _, _, err := nextInner(b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

// FuzzInnerParse: nextInner, which reads the inner records of a batch
// written by another process, either refuses with ErrProtocol or returns a
// record inside b, a multiple of 8 bytes, whose header and contents fit;
// and an inner record made from arguments and a buffer cut from data
// parses back to them.
func FuzzInnerParse(f *testing.F) {
	plain, withBuf := make([]byte, 64), make([]byte, 64)
	putInner(plain, 3, []byte("args"), nil)
	putInner(withBuf, 3, []byte("args"), []byte("buffer"))
	f.Add(plain, 2)
	f.Add(withBuf, 4)
	f.Add([]byte{1, 2, 3, 4, 0, 0, 0, 0x80}, 0)
	run := make([]byte, innerHeader+16)
	binary.LittleEndian.PutUint32(run[4:], runWord(8, 2))
	f.Add(run, 0)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		if len(data) >= innerHeader && binary.LittleEndian.Uint32(data[4:])&innerRun != 0 {
			h, args, na, stride, count, size, err := nextRun(data)
			if err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("error not wrapping ErrProtocol: %v", err)
				}
			} else if size > len(data) || size%8 != 0 || count < 1 || na > stride || stride != (na+7)&^7 || len(args) != count*stride || size != innerHeader+len(args) || h != dsfabric.HandlerID(binary.LittleEndian.Uint32(data)) {
				t.Fatalf("run of %d calls of %d bytes (stride %d), size %d, accepted in %d bytes", count, na, stride, size, len(data))
			}
			return
		}
		if h, args, buf, size, err := nextInner(data); err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error not wrapping ErrProtocol: %v", err)
			}
		} else if size > len(data) || size%8 != 0 || innerHeaderFor(len(buf))+len(args)+len(buf) > size || h != dsfabric.HandlerID(binary.LittleEndian.Uint32(data)) {
			t.Fatalf("inner record of %d + %d bytes, size %d, accepted in %d bytes", len(args), len(buf), size, len(data))
		}
		k := 0
		if len(data) > 0 {
			k = int(uint(cut) % uint(len(data)+1))
		}
		args, buf := data[:k], data[k:]
		c := make([]byte, innerSize(len(args), len(buf)))
		putInner(c, 5, args, buf)
		h, a, bu, size, err := nextInner(c)
		if err != nil || h != 5 || !bytes.Equal(a, args) || !bytes.Equal(bu, buf) || size != len(c) {
			t.Fatalf("%d + %d bytes parsed back as %d + %d, size %d of %d, %v", len(args), len(buf), len(a), len(bu), size, len(c), err)
		}
	})
}

// TestMessengerRetryAsyncKeepsOrder: with RetryAsync a full messenger keeps
// calls locally without blocking, within MaxAsyncBytes (ErrFull past it),
// and delivers them in order once the receiver polls.
func TestMessengerRetryAsyncKeepsOrder(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: RetryAsync, MaxAsyncBytes: 64 << 10}
	withStalledReceiver(t, cfg, func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) error {
		var args [8]byte
		i := 0
		var err error
		for ; i < 100000; i++ {
			binary.LittleEndian.PutUint64(args[:], uint64(i))
			if err = m.Call(0, h, args[:]); err != nil {
				break
			}
		}
		accepted <- i // the receiver takes them whatever the verdict, and ends
		if !errors.Is(err, ErrFull) || m.Kept() == 0 || m.Kept() > cfg.MaxAsyncBytes {
			return fmt.Errorf("after %d calls: %v with %d bytes kept; want ErrFull within %d", i, err, m.Kept(), cfg.MaxAsyncBytes)
		}
		if err := m.Flush(); err != nil {
			return err
		}
		if m.Kept() != 0 {
			return fmt.Errorf("%d bytes kept after Flush", m.Kept())
		}
		return nil
	})
}

// TestSealSeparatesNeighbours: headers or sequence numbers that differ in
// one bit (consecutive sequence numbers, neighbouring threads) never share a
// seal. A weaker mix once lost bit 0 and let a stale reply pass for a new one.
func TestSealSeparatesNeighbours(t *testing.T) {
	seen := map[uint64][2]uint64{}
	for h0 := uint64(0); h0 < 64; h0++ {
		for h1 := uint64(0); h1 < 1024; h1++ {
			s := sealOf(h0, h1)
			if p, dup := seen[s]; dup {
				t.Fatalf("sealOf(%d,%d) == sealOf(%d,%d)", h0, h1, p[0], p[1])
			}
			seen[s] = [2]uint64{h0, h1}
			for b := 0; b < 64; b++ {
				if sealOf(h0^1<<b, h1) == s || sealOf(h0, h1^1<<b) == s {
					t.Fatalf("flipping bit %d of (%d,%d) keeps the seal", b, h0, h1)
				}
			}
		}
	}
}

// TestShutdownHandshake (docs/design.md §6): from the sender's side, every call
// written before Shutdown runs, the handshake completes and a later call
// opens a new messenger; from the receiver's side, the sender's next call
// completes the handshake and fails with ErrClosed, as do later ones.
func TestShutdownHandshake(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 4, Policy: Retry}
	var seq sequence
	var h dsfabric.HandlerID
	phase := make(chan int)
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			requested, ended := false, false
			var unknown error
			for !ended || len(m.rx.in) > 0 {
				select {
				case n, ok := <-phase:
					if !ok {
						ended, phase = true, nil
					} else if n == 1500 {
						if err := awaitCalls(m, &seq, int64(n), time.Now().Add(30*time.Second), "calls before the shutdown request must arrive"); err != nil {
							return err
						}
						requested = true // ask the sender to close
						if err := m.RequestShutdown(1); err != nil {
							return err
						}
						// Thread 0 never calls itself in this test: there is
						// no messenger from it to shut. Reported once the
						// handshake is over, which returning now would hang.
						if err := m.RequestShutdown(0); !errors.Is(err, ErrNoMessenger) {
							unknown = fmt.Errorf("RequestShutdown of a thread with no messenger here: %v, want ErrNoMessenger", err)
						}
					}
				default:
				}
				m.Poll()
			}
			if !requested {
				return errors.New("never reached the second phase")
			}
			if unknown != nil {
				return unknown
			}
			return m.Err()
		},
		func(m *Messengers) error {
			ctx := context.Background()
			var args [8]byte
			send := func(i int) error {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				return m.Call(0, h, args[:])
			}
			for i := 0; i < 1000; i++ {
				if err := send(i); err != nil {
					return err
				}
			}
			if err := m.Shutdown(ctx, 0); err != nil {
				return err
			}
			if seq.total.Load() != 1000 || len(m.out) != 0 {
				return fmt.Errorf("after Shutdown: %d calls ran, %d messengers open", seq.total.Load(), len(m.out))
			}
			for i := 1000; i < 1500; i++ { // a new messenger; numbering goes on
				if err := send(i); err != nil {
					return err
				}
			}
			phase <- 1500
			var err error
			i := 1500
			for ; i < 1_000_000; i++ {
				if err = send(i); err != nil {
					break
				}
				m.Poll()
			}
			close(phase)
			if !errors.Is(err, ErrClosed) {
				return fmt.Errorf("after the receiver's request: %v, want ErrClosed", err)
			}
			if err := send(i + 1); !errors.Is(err, ErrClosed) {
				return fmt.Errorf("a later call: %v, want ErrClosed", err)
			}
			// Bounded: an Open that set up a messenger to the closed thread
			// could wait for its answer for good (seen once, under the load
			// of a full make mutate, where the mutation that drops this
			// check was caught only by the time limit).
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := m.Open(octx, 0); !errors.Is(err, ErrClosed) || len(m.out) != 0 {
				return fmt.Errorf("Open of the thread that closed its messenger: %v with %d messengers set up, want ErrClosed and none", err, len(m.out))
			}
			if int(seq.total.Load()) != i {
				return fmt.Errorf("%d calls ran, want %d (all before ErrClosed)", seq.total.Load(), i)
			}
			return nil
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
}

// TestRetryAsyncHelperSends: calls RetryAsync keeps go out from its helper
// goroutine while the calling thread makes no riutils call at all, in
// order, and Stats counts them.
func TestRetryAsyncHelperSends(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: RetryAsync, MaxAsyncBytes: 1 << 20}
	var seq sequence
	var h dsfabric.HandlerID
	accepted := make(chan int, 1)
	released := make(chan struct{})
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			err := stalledReceiver(&seq, accepted)(m)
			close(released)
			return err
		},
		func(m *Messengers) error {
			var args [8]byte
			n := 0
			for ; m.Kept() < 64<<10; n++ {
				binary.LittleEndian.PutUint64(args[:], uint64(n))
				if err := m.Call(0, h, args[:]); err != nil {
					return err
				}
			}
			accepted <- n
			select { // no Poll, no Flush, no call: only the helper can send
			case <-released:
			case <-time.After(60 * time.Second):
				return fmt.Errorf("kept calls never arrived: %d of %d ran, %d bytes still kept", seq.total.Load(), n, m.Kept())
			}
			if err := m.Flush(); err != nil {
				return err
			}
			if m.Kept() != 0 || m.Stats().Calls != int64(n) {
				return fmt.Errorf("after the helper: %d bytes kept, %d calls counted, want 0 and %d", m.Kept(), m.Stats().Calls, n)
			}
			// The thread drives the messenger again.
			binary.LittleEndian.PutUint64(args[:], uint64(n))
			return m.Call(0, h, args[:])
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
}

// TestShutdownReturnsChunks: a thread that opens and shuts a messenger 40
// times does not grow the receiver's memory: a shut-down messenger's chunks
// serve the next one.
func TestShutdownReturnsChunks(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 4, Policy: Retry}
	var seq sequence
	var h dsfabric.HandlerID
	var done atomic.Bool
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			return serveUntil(m, &done)
		},
		func(m *Messengers) error {
			defer done.Store(true)
			var args [8]byte
			var after2 int64
			for round := 0; round < 40; round++ {
				for i := 0; i < 100; i++ { // 100 × 24 B: one chunk and a bit
					binary.LittleEndian.PutUint64(args[:], uint64(round*100+i))
					if err := m.Call(0, h, args[:]); err != nil {
						return err
					}
				}
				if err := m.Shutdown(context.Background(), 0); err != nil {
					return err
				}
				m.p.zoneMu.Lock()
				used := m.p.zone.Stats().BumpBytes
				m.p.zoneMu.Unlock()
				if round == 1 {
					after2 = used
				} else if round > 1 && used != after2 {
					return fmt.Errorf("round %d: the chunk zone grew from %d to %d bytes", round, after2, used)
				}
			}
			if seq.total.Load() != 4000 {
				return fmt.Errorf("%d calls ran, want 4000", seq.total.Load())
			}
			return nil
		})
}

// FuzzAllocMessages: the chunk-allocation request and reply decoders
// refuse malformed input with ErrProtocol, never panic, and what the
// request decoder accepts encodes back the same.
func FuzzAllocMessages(f *testing.F) {
	loc := alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 2}, Offset: 64, Length: 8, Key: 9}
	f.Add(allocReq{src: 3, dst: 4, count: 2, size: 1 << 20, feedback: loc}.marshal())
	reply, _ := loc.AppendBinary(appendAllocReply(nil, 1))
	f.Add(reply)
	for _, bad := range []alloc.Locator{{RegionRef: loc.RegionRef, Length: 16, Key: 9}, {RegionRef: alloc.RegionRef{Process: 2, Region: 2}, Length: 8, Key: 9}} {
		b, _ := bad.AppendBinary(appendAllocReply(nil, 1)) // a chunk of the wrong size, or elsewhere
		f.Add(b)
	}
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := parseAllocReq(b); err == nil {
			if !bytes.Equal(r.marshal(), b) {
				t.Fatal("request re-encoding differs")
			}
		} else if !errors.Is(err, ErrProtocol) {
			t.Fatalf("request error not wrapping ErrProtocol: %v", err)
		}
		for want := 0; want <= 2; want++ {
			locs, err := parseAllocReply(b, want, 8, 1)
			if err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("reply error not wrapping ErrProtocol: %v", err)
				}
				continue
			}
			if len(locs) != want {
				t.Fatalf("reply of %d locators for %d", len(locs), want)
			}
			for _, l := range locs {
				if l.Length != 8 || l.Process != 1 {
					t.Fatalf("accepted a chunk %v: want 8 bytes of rank 1", l)
				}
			}
		}
	})
}

// TestAggregatorConfig: defaults, and VerifyConfig's refusals.
func TestAggregatorConfig(t *testing.T) {
	if d := DefaultAggregatorConfig(); d.Mode != Trad || d.FlushSize != 4<<10 || d.MaxExceeding != 256<<10 || d.VerifyConfig() != nil {
		t.Errorf("defaults %+v", d)
	}
	for _, c := range []AggregatorConfig{{Mode: 9}, {FlushSize: 12}, {FlushSize: 1 << 20}, {MaxExceeding: -1}} {
		if err := c.VerifyConfig(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestRetryAsyncOrderWhileDraining (§4.4.1, per-sender FIFO): a receiver
// that polls in bursts makes the sender's ring fill and empty again and
// again, so that its calls are kept and sent by the helper while the
// thread goes on calling; a call made while others are kept goes after
// them, never ahead, even when the ring has room for it.
func TestRetryAsyncOrderWhileDraining(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: RetryAsync, MaxAsyncBytes: 256 << 10}
	const n, stall = 100000, 10 * time.Second
	var seq sequence
	var h dsfabric.HandlerID
	var done atomic.Bool // the receiver ended
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			defer done.Store(true)
			got, since := int64(0), time.Now()
			for seq.total.Load() < n {
				if seq.bad.Load() != 0 {
					return fmt.Errorf("calls out of order after %d: a call made while others were kept overtook them", seq.total.Load())
				}
				if g := seq.total.Load(); g != got {
					got, since = g, time.Now()
				} else if time.Since(since) > stall {
					return fmt.Errorf("%d of %d calls arrived, none for %v", g, n, stall)
				}
				for end := time.Now().Add(200 * time.Microsecond); time.Now().Before(end); {
					m.Poll()
				}
				time.Sleep(300 * time.Microsecond)
			}
			return m.Err()
		},
		func(m *Messengers) error {
			var args [8]byte
			kept := 0
			since := time.Now()
			for i := 0; i < n; {
				if done.Load() {
					return nil // the receiver gave up: its error is the test's
				}
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				err := m.Call(0, h, args[:])
				if errors.Is(err, ErrFull) {
					if time.Since(since) > stall {
						return fmt.Errorf("call %d: MaxAsyncBytes kept for %v", i, stall)
					}
					time.Sleep(50 * time.Microsecond) // MaxAsyncBytes kept: let the helper catch up
					continue
				}
				since = time.Now()
				if err != nil {
					return err
				}
				if m.Kept() > 0 {
					kept++
				}
				i++
			}
			if kept < n/10 {
				return fmt.Errorf("only %d of %d calls found others kept: the test did not exercise RetryAsync", kept, n)
			}
			return m.Flush()
		})
}

// TestRetryAsyncKeepsLargeCalls: a kept call as large as a chunk allows
// is sent by the helper like a small one (its own memory holds any call
// a chunk holds), and every call arrives, in order.
func TestRetryAsyncKeepsLargeCalls(t *testing.T) {
	cfg := Config{ChunkSize: 1 << 20, ChunksPerAllocation: 2, MaxChunks: 2, Policy: RetryAsync, MaxAsyncBytes: 8 << 20}
	buf := make([]byte, 300<<10)
	withStalledReceiver(t, cfg, func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) error {
		var args [8]byte
		const calls = 12 // 3 per chunk: 6 written, 6 kept
		for i := 0; i < calls; i++ {
			binary.LittleEndian.PutUint64(args[:], uint64(i))
			if err := m.CallBuffer(0, h, args[:], buf); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		if m.Kept() < len(buf) {
			return fmt.Errorf("%d bytes kept after %d calls of %d bytes: the test needs some kept", m.Kept(), calls, len(buf))
		}
		accepted <- calls
		if err := m.Flush(); err != nil {
			return fmt.Errorf("sending the kept calls: %w", err)
		}
		return nil
	})
}

// TestRetryAsyncHelperFailureReported: once the helper fails to send kept
// calls (injected here: a lost connection does it in a job), the thread's
// next call and Flush return that failure instead of keeping calls that
// would never go out.
func TestRetryAsyncHelperFailureReported(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: RetryAsync, MaxAsyncBytes: 1 << 20}
	injected := errors.New("injected helper failure")
	withStalledReceiver(t, cfg, func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) error {
		var args [8]byte
		n := 0
		for ; m.Kept() == 0; n++ {
			binary.LittleEndian.PutUint64(args[:], uint64(n))
			if err := m.Call(0, h, args[:]); err != nil {
				return err
			}
		}
		accepted <- 0 // what arrives is not this test's concern
		m.keeper.mu.Lock()
		m.keeper.err = injected
		m.keeper.mu.Unlock()
		binary.LittleEndian.PutUint64(args[:], uint64(n))
		if err := m.Call(0, h, args[:]); !errors.Is(err, injected) {
			return fmt.Errorf("a call after the helper failed: %v, want its failure", err)
		}
		if err := m.Flush(); !errors.Is(err, injected) {
			return fmt.Errorf("Flush after the helper failed: %v, want its failure", err)
		}
		return nil
	})
}

// TestRetryAsyncHoldLostToClose: the first call RetryAsync keeps starts
// the helper, which must first hold the process's memory; a hold refused
// (the fabric's Close won the race, injected here) fails that call with
// ErrClosed and keeps nothing, since no helper would ever send it. The
// messenger is not harmed: once holds succeed again the same call is kept
// and arrives, in order after those written before.
func TestRetryAsyncHoldLostToClose(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: RetryAsync, MaxAsyncBytes: 1 << 20}
	withStalledReceiver(t, cfg, func(m *Messengers, h dsfabric.HandlerID, accepted chan<- int) (err error) {
		defer unblockOnError(accepted, &err)
		holds := 0
		m.keeper.hold = func() (func(), error) {
			holds++
			return nil, fmt.Errorf("%w: injected", dtutils.ErrClosed)
		}
		var args [8]byte
		n := 0
		for ; ; n++ {
			if n > 1<<16 {
				return errors.New("the messenger never filled")
			}
			binary.LittleEndian.PutUint64(args[:], uint64(n))
			if err = m.Call(0, h, args[:]); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrClosed) || holds != 1 {
			return fmt.Errorf("the call whose hold was refused: %v after %d holds, want ErrClosed after 1", err, holds)
		}
		m.keeper.mu.Lock()
		run := m.keeper.run
		m.keeper.mu.Unlock()
		if m.Kept() != 0 || run {
			return fmt.Errorf("after the refused hold: %d bytes kept, helper running %v; want nothing kept and no helper", m.Kept(), run)
		}
		m.keeper.hold = m.proc.Hold
		if err = m.Call(0, h, args[:]); err != nil {
			return fmt.Errorf("the same call once holds succeed: %w", err)
		}
		if m.Kept() == 0 {
			return errors.New("the call after the refused hold was written at once: the test did not reach the keeper")
		}
		accepted <- n + 1
		return m.Flush()
	})
}

// TestRetryAsyncThenAggregatorAndShutdown (§4.4.1 per-sender FIFO, §4.4.2):
// while RetryAsync's helper holds calls for a destination, Shutdown of that
// messenger is refused (the calls would be lost), and an Aggregator's
// batch to it waits for the helper to hand the sender back, so that it
// goes after the kept calls; then Shutdown succeeds, and every call has
// arrived once, in order.
func TestRetryAsyncThenAggregatorAndShutdown(t *testing.T) {
	cfg := Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: RetryAsync, MaxAsyncBytes: 256 << 10}
	var seq sequence
	var h dsfabric.HandlerID
	var stop atomic.Bool
	accepted := make(chan int, 1)
	twoThreads(t, cfg, func(hs *dsfabric.Handlers) { h, _ = hs.Register("seq", seq.handler) },
		func(m *Messengers) error {
			if err := stalledReceiver(&seq, accepted)(m); err != nil {
				return err
			}
			return serveUntil(m, &stop) // Shutdown waits for the receiver's acknowledgement
		},
		func(m *Messengers) (err error) {
			defer stop.Store(true)
			defer unblockOnError(accepted, &err)
			var args [8]byte
			i := 0
			call := func(c func(dsfabric.ThreadID, dsfabric.HandlerID, []byte) error) error {
				binary.LittleEndian.PutUint64(args[:], uint64(i))
				i++
				return c(0, h, args[:])
			}
			for m.Kept() == 0 { // until the ring is full and the helper holds calls
				if err := call(m.Call); err != nil {
					return err
				}
			}
			for k := 0; k < 100; k++ {
				if err := call(m.Call); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// A short context: without the refusal Shutdown would wait for
			// the helper, which waits for the receiver, which waits for us.
			short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
			err = m.Shutdown(short, 0)
			cancelShort()
			if !errors.Is(err, ErrKept) {
				return fmt.Errorf("Shutdown with %d bytes kept: %v, want a refusal", m.Kept(), err)
			}
			a, err := m.Aggregator(AggregatorConfig{Mode: Trad, FlushSize: 4096})
			if err != nil {
				return err
			}
			for k := 0; k < 100; k++ { // under FlushSize: batched, not written
				if err := call(a.Call); err != nil {
					return err
				}
			}
			if m.Kept() == 0 {
				return errors.New("the helper sent kept calls to a receiver that does not poll")
			}
			accepted <- i
			if err := a.Flush(); err != nil {
				return err
			}
			if n := m.Kept(); n != 0 {
				return fmt.Errorf("the batch was written with %d bytes still kept ahead of it", n)
			}
			return m.Shutdown(ctx, 0)
		})
	if seq.bad.Load() != 0 {
		t.Fatal("calls out of order")
	}
}
