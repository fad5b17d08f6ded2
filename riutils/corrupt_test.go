package riutils

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// TestCorruptRecordStopsOneMessenger (reliability): a deliberately corrupted
// but sealed record — from the wrong thread, with more argument bytes than
// payload, or a call-and-return with its reserved word set — injected into
// thread 0's stream to thread 2 makes thread 2 report a protocol error
// naming thread 0 and stop that messenger; not one call written after it
// runs, while thread 1's calls all run. So does a producer word saying the
// chunk finished before the records thread 2 has already read
// ("early-finish": the sender lost count, or is not our sender); thread 0
// forges it once thread 2 has read everything before it, and writes its
// next calls once thread 2 has stopped, as those calls would otherwise
// legitimately be read before the producer word. So, the same way, does a
// producer word finishing the chunk where thread 2 stands but saying the
// ring grew, when thread 0 never asked for chunks to grow it with
// ("grow-without-chunks").
func TestCorruptRecordStopsOneMessenger(t *testing.T) {
	for _, kind := range []string{"wrong-source", "argument-overrun", "return-reserved", "early-finish", "grow-without-chunks"} {
		t.Run(kind, func(t *testing.T) {
			// A forged producer word is read only once the records before
			// it are, and stops the receiver before any record after it.
			producerWord := kind == "early-finish" || kind == "grow-without-chunks"
			var hSeq dsfabric.HandlerID
			var seqs sequence
			var from [3]atomic.Int64
			var injected, stopped, finished atomic.Bool
			const before, after, others = 500, 500, 3000
			// Milliseconds when it works; a receiver that never stops is
			// the failure.
			deadline := time.Now().Add(20 * time.Second)
			await := func(cond func() bool) {
				for !cond() && time.Now().Before(deadline) {
					time.Sleep(100 * time.Microsecond)
				}
			}
			job(t, 1, 3, "", DefaultConfig(), func(hs *dsfabric.Handlers) {
				hSeq, _ = hs.Register("seq", func(c *dsfabric.Call, a []byte) ([]byte, error) {
					from[c.Src].Add(1)
					return seqs.handler(c, a)
				})
			}, func(m *Messengers) error {
				switch m.ID() {
				case 0:
					for i := 0; i < before; i++ {
						if err := m.Call(2, hSeq, binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
							return err
						}
					}
					if producerWord {
						await(func() bool { return from[0].Load() == before })
					}
					if err := injectCorrupt(m, 2, hSeq, kind); err != nil {
						return err
					}
					injected.Store(true)
					if producerWord {
						await(stopped.Load)
					}
					for i := before; i < before+after; i++ {
						if err := m.Call(2, hSeq, binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
							return err
						}
					}
					return nil
				case 1:
					for i := 0; i < others; i++ {
						if err := m.Call(2, hSeq, binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
							return err
						}
					}
					return nil
				default:
					for from[1].Load() < others || !injected.Load() || m.Err() == nil {
						if n := from[0].Load(); n > before {
							return fmt.Errorf("%d calls of thread 0 ran: the corrupt record was taken for a call", n)
						}
						if m.Poll() == 0 && time.Now().After(deadline) {
							return fmt.Errorf("timed out: %d from thread 0, %d from thread 1, error %v", from[0].Load(), from[1].Load(), m.Err())
						}
					}
					stopped.Store(true)
					for i := 0; i < 1000; i++ { // anything more from thread 0 would run now
						m.Poll()
					}
					finished.Store(true)
					err := m.Err()
					if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "thread 0") {
						return fmt.Errorf("error %v, want a protocol error naming thread 0", err)
					}
					if kind == "early-finish" && !strings.Contains(err.Error(), "chunk finished at") {
						return fmt.Errorf("error %v, want the early finish named", err)
					}
					if kind == "grow-without-chunks" && !strings.Contains(err.Error(), "no chunks were allocated") {
						return fmt.Errorf("error %v, want the growth without chunks named", err)
					}
					if from[0].Load() != before || from[1].Load() != others || seqs.bad.Load() != 0 {
						return fmt.Errorf("ran %d calls of thread 0 (want %d) and %d of thread 1 (want %d); %d out of order", from[0].Load(), before, from[1].Load(), others, seqs.bad.Load())
					}
					return nil
				}
			})
			if !finished.Load() {
				t.Error("the receiver never finished")
			}
		})
	}
}

// injectCorrupt writes one sealed but invalid record into m's messenger to
// dst, as a buggy or hostile sender would.
func injectCorrupt(m *Messengers, dst dsfabric.ThreadID, h dsfabric.HandlerID, kind string) error {
	s, err := m.sender(dst)
	if err != nil {
		return err
	}
	if kind == "early-finish" || kind == "grow-without-chunks" {
		// A producer word: finished at the chunk's first record, before
		// what the receiver read; or finished where it stands, saying the
		// ring grew, with no chunks ever asked for.
		pw := uint64(recordsStart) | prodRotate
		if kind == "grow-without-chunks" {
			pw = uint64(s.pos) | prodRotate | prodGrow
		}
		mem, err := m.alloc(s.tx, 8)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(mem.Bytes(), pw)
		loc, _ := s.chunks[s.cur].Sub(offProducer, 8)
		return s.tx.Write(mem, loc)
	}
	args := binary.LittleEndian.AppendUint64(nil, 1<<40)
	if kind == "return-reserved" { // a well-formed call-and-return but for its reserved word
		obj, err := m.NewRemoteObject(8)
		if err != nil {
			return err
		}
		a := binary.LittleEndian.AppendUint32(nil, uint32(h))
		a = binary.LittleEndian.AppendUint32(a, 1)
		a = binary.LittleEndian.AppendUint64(a, 1)
		a, _ = obj.loc.AppendBinary(a)
		args = append(a, args...)
	}
	size := recordSize(len(args))
	if ok, err := s.reserve(size, Retry); !ok || err != nil {
		return fmt.Errorf("no room for the corrupt record: %v", err)
	}
	mem, err := m.alloc(s.tx, size)
	if err != nil {
		return err
	}
	b := mem.Bytes()
	switch kind {
	case "wrong-source":
		putRecord(b, h, 1, args, nil) // claims to come from thread 1
	case "argument-overrun":
		putRecord(b, h, m.self, args, nil)
		binary.LittleEndian.PutUint32(b[12:], uint32(len(args)+64))
		binary.LittleEndian.PutUint64(b[size-recordSeal:], sealOf(binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])))
	case "return-reserved":
		putRecord(b, returnHandler, m.self, args, nil)
	}
	return s.write(mem)
}
