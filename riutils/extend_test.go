package riutils

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dsfabric"
)

func pattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
}

// TestOneSidedCallVariants (paper Table 1, §4.4): CallBufferWrite and
// CallBufferRead move buffers of 1…4096 bytes one-sided and the handler sees
// exactly those bytes; a Synchronizer is counted down by the callee's
// one-sided FetchAdd once each call ran. Over shm and tcp.
func TestOneSidedCallVariants(t *testing.T) {
	for _, tr := range testTransports {
		t.Run(tr, func(t *testing.T) {
			var hGet, hCheck, hCount, hStop dsfabric.HandlerID
			var stop atomic.Bool
			var ok, bad atomic.Int64
			var dest *alloc.Region
			job(t, 2, 1, tr, DefaultConfig(), func(hs *dsfabric.Handlers) {
				hGet, _ = hs.Register("getbuf", func(c *dsfabric.Call, a []byte) ([]byte, error) {
					if dest == nil {
						var err error
						if dest, err = c.Fabric.Process().Registry().NewRegion(8192, alloc.RegionConfig{Name: "test-dest"}); err != nil {
							return nil, err
						}
					}
					l, _ := dest.Locator(0, 8192)
					return l.AppendBinary(nil)
				})
				hCheck, _ = hs.Register("check", func(c *dsfabric.Call, a []byte) ([]byte, error) {
					seed, n := int(binary.LittleEndian.Uint32(a)), int(binary.LittleEndian.Uint32(a[4:]))
					want := make([]byte, n)
					pattern(want, seed)
					if string(c.Buffer) != string(want) {
						bad.Add(1)
						return nil, fmt.Errorf("buffer of %d bytes differs (seed %d)", len(c.Buffer), seed)
					}
					ok.Add(1)
					return nil, nil
				})
				hCount, _ = hs.Register("count", func(c *dsfabric.Call, a []byte) ([]byte, error) {
					return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(ok.Load())), uint64(bad.Load())), nil
				})
				hStop, _ = hs.Register("stop", func(c *dsfabric.Call, a []byte) ([]byte, error) { stop.Store(true); return nil, nil })
			}, func(m *Messengers) error {
				if m.ID() == 1 {
					return serveUntil(m, &stop)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				stopped := false
				defer func() {
					if !stopped { // a failure: release the callee now, not after its 60 s
						m.Call(1, hStop, nil)
					}
				}()
				obj, _ := m.NewRemoteObject(64)
				raw, err := m.CallReturn(ctx, 1, hGet, nil, obj)
				if err != nil {
					return err
				}
				var d alloc.Locator
				if err := d.UnmarshalBinary(raw); err != nil {
					return err
				}
				src, err := m.f.Process().Registry().NewRegion(8192, alloc.RegionConfig{Name: "test-orig"})
				if err != nil {
					return err
				}
				sy, err := m.NewSynchronizer(0)
				if err != nil {
					return err
				}
				defer sy.Close()
				const rounds = 150
				for _, variant := range []string{"write", "read"} {
					for i := 0; i < rounds; i++ {
						n := 1 + (i*97)%4096
						orig, _ := src.Memory(0, n)
						pattern(orig.Bytes(), i)
						args := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(i)), uint32(n))
						sy.Add(1)
						if variant == "write" {
							err = m.CallBufferWrite(1, hCheck, args, orig, d, sy)
						} else {
							err = m.CallBufferRead(1, hCheck, args, orig, d, sy)
						}
						if err != nil {
							return fmt.Errorf("%s %d: %w", variant, i, err)
						}
						// orig changes next round: wait until the callee ran.
						if err := sy.Wait(ctx); err != nil {
							return fmt.Errorf("%s %d: waiting: %w (count %d)", variant, i, err, sy.Count())
						}
					}
				}
				// CallSync: many calls, one wait.
				orig, _ := src.Memory(0, 16)
				pattern(orig.Bytes(), 3)
				sy.Add(100)
				for i := 0; i < 100; i++ {
					if err := m.CallSync(1, hCheck, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 3), 16), orig.Bytes(), sy); err != nil {
						return err
					}
				}
				if err := sy.Wait(ctx); err != nil {
					return fmt.Errorf("CallSync: %w (count %d)", err, sy.Count())
				}
				// Bad destinations fail before anything is sent.
				wrong := d
				wrong.Process = 0
				if err := m.CallBufferWrite(1, hCheck, nil, orig, wrong, nil); !errors.Is(err, alloc.ErrOutOfRange) {
					return fmt.Errorf("destination in the wrong process: %v", err)
				}
				small, _ := d.Sub(0, 8)
				if err := m.CallBufferRead(1, hCheck, nil, orig, small, nil); !errors.Is(err, alloc.ErrOutOfRange) {
					return fmt.Errorf("destination too small: %v", err)
				}
				// A closed synchronizer is refused by every call and by
				// Wait before anything is sent: its counter is the next
				// one's, which a callee counting it down would end early.
				closed, err := m.NewSynchronizer(1)
				if err != nil {
					return err
				}
				closed.Close()
				next, err := m.NewSynchronizer(1) // closed's counter, reused
				if err != nil {
					return err
				}
				args16 := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 3), 16)
				for name, call := range map[string]func() error{
					"CallSync":        func() error { return m.CallSync(1, hCheck, args16, orig.Bytes(), closed) },
					"CallBufferWrite": func() error { return m.CallBufferWrite(1, hCheck, args16, orig, d, closed) },
					"CallBufferRead":  func() error { return m.CallBufferRead(1, hCheck, args16, orig, d, closed) },
					"Wait":            func() error { return closed.Wait(ctx) },
				} {
					if err := call(); !errors.Is(err, ErrClosed) {
						return fmt.Errorf("%s with a closed synchronizer: %v, want ErrClosed", name, err)
					}
				}
				if closed.Count() != 0 {
					return fmt.Errorf("a closed synchronizer's Count: %d, want 0", closed.Count())
				}
				if err := func() (err error) {
					defer func() {
						if recover() == nil {
							err = errors.New("Add on a closed synchronizer did not panic")
						}
					}()
					closed.Add(1)
					return nil
				}(); err != nil {
					return err
				}
				res, err := m.CallReturn(ctx, 1, hCount, nil, obj)
				if err != nil {
					return err
				}
				if next.Count() != 1 { // every call before hCount has run
					return fmt.Errorf("the synchronizer that reused a closed one's counter counts %d, want 1", next.Count())
				}
				next.Close()
				if o, b := binary.LittleEndian.Uint64(res), binary.LittleEndian.Uint64(res[8:]); o != 2*rounds+100 || b != 0 {
					return fmt.Errorf("callee checked %d buffers right and %d wrong, want %d and 0", o, b, 2*rounds+100)
				}
				if err := synchronizerSlots(m); err != nil {
					return err
				}
				stopped = true
				return m.Call(1, hStop, nil)
			})
		})
	}
}

// synchronizerSlots checks m's pool of synchronizer counters (one is open
// already): it holds syncSlotCount, the next is ErrFull, and closed ones
// are used again — twice the pool opened and closed one at a time.
func synchronizerSlots(m *Messengers) error {
	var open []*Synchronizer
	defer func() {
		for _, s := range open {
			s.Close()
		}
	}()
	for i := 1; i < syncSlotCount; i++ {
		s, err := m.NewSynchronizer(0)
		if err != nil {
			return fmt.Errorf("synchronizer %d of %d: %w", i+1, syncSlotCount, err)
		}
		open = append(open, s)
	}
	if _, err := m.NewSynchronizer(0); !errors.Is(err, ErrFull) {
		return fmt.Errorf("synchronizer %d of %d: %v, want ErrFull", syncSlotCount+1, syncSlotCount, err)
	}
	for _, s := range open {
		s.Close()
	}
	open = nil
	for i := 0; i < 2*syncSlotCount; i++ {
		s, err := m.NewSynchronizer(1)
		if err != nil {
			return fmt.Errorf("synchronizer %d opened after closing the one before: %w", i, err)
		}
		s.Close()
	}
	return nil
}

// TestPoller (§4.4, process-level consumer): thread 1 of rank 0 never
// polls; a Poller runs its calls — 5000 sequenced calls from each of the
// two threads of rank 1, and call-and-return — on the thread's behalf.
func TestPoller(t *testing.T) {
	var hSeq, hEcho, hStop dsfabric.HandlerID
	var seqs sequence
	var wrongDst atomic.Int64
	var stopped = make(chan struct{})
	var stops atomic.Int64
	const calls = 5000
	job(t, 2, 2, "", DefaultConfig(), func(hs *dsfabric.Handlers) {
		hSeq, _ = hs.Register("seq", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if c.Dst != 1 {
				wrongDst.Add(1)
			}
			return seqs.handler(c, a)
		})
		hEcho, _ = hs.Register("echo", func(c *dsfabric.Call, a []byte) ([]byte, error) { return a, nil })
		hStop, _ = hs.Register("stop", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if stops.Add(1) == 2 { // both senders are done
				close(stopped)
			}
			return nil, nil
		})
	}, func(m *Messengers) error {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		switch m.ID() {
		case 0:
			return nil
		case 1:
			pl, err := m.p.NewPoller(1)
			if err != nil {
				return err
			}
			// Reported at the end: returning now would leave the
			// senders' calls to thread 1 unserved until their deadline.
			var second error
			if _, err := m.p.NewPoller(1); !errors.Is(err, ErrBadConfig) {
				second = fmt.Errorf("a second Poller for thread 1: %v, want ErrBadConfig", err)
			}
			pctx, pcancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { pl.Serve(pctx); close(done) }()
			select { // this thread does not poll at all
			case <-stopped:
			case <-ctx.Done():
				pcancel()
				<-done
				return fmt.Errorf("stop never came: %d calls ran", seqs.total.Load())
			}
			pcancel()
			<-done
			if got := seqs.total.Load(); got != 2*calls || seqs.bad.Load() != 0 || wrongDst.Load() != 0 {
				return fmt.Errorf("%d calls ran (want %d), %d out of order, %d with the wrong Dst", got, 2*calls, seqs.bad.Load(), wrongDst.Load())
			}
			if s := pl.Stats(); s.Received < 2*calls {
				return fmt.Errorf("poller counted %d calls", s.Received)
			}
			if second != nil {
				return second
			}
			return pl.Err()
		default: // threads 2 and 3, on rank 1
			for i := 0; i < calls; i++ {
				if err := m.Call(1, hSeq, binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
					return err
				}
			}
			obj, _ := m.NewRemoteObject(16)
			if r, err := m.CallReturn(ctx, 1, hEcho, []byte("hi"), obj); err != nil || string(r) != "hi" {
				return fmt.Errorf("call and return through the poller: %q %v", r, err)
			}
			return m.Call(1, hStop, nil)
		}
	})
}

// TestPollerAllThreads: a Poller for which no thread is named serves every
// thread of its process, each call running with its own thread as Dst.
func TestPollerAllThreads(t *testing.T) {
	var hCount dsfabric.HandlerID
	var ran [2]atomic.Int64
	var wrongDst atomic.Int64
	ready, served := make(chan struct{}), make(chan struct{})
	const calls = 200
	job(t, 1, 2, "", DefaultConfig(), func(hs *dsfabric.Handlers) {
		hCount, _ = hs.Register("count", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			if c.Dst != dsfabric.ThreadID(a[0]) {
				wrongDst.Add(1)
			}
			ran[a[0]].Add(1)
			return nil, nil
		})
	}, func(m *Messengers) error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if m.ID() == 0 { // sends to both threads, polling nothing
			select {
			case <-ready:
			case <-ctx.Done():
				return ctx.Err()
			}
			for i := 0; i < calls; i++ {
				for dst := range 2 {
					if err := m.Call(dsfabric.ThreadID(dst), hCount, []byte{byte(dst)}); err != nil {
						return err
					}
				}
			}
			<-served
			return nil
		}
		defer close(served)
		pl, err := m.p.NewPoller()
		close(ready)
		if err != nil {
			return err
		}
		if th := pl.Threads(); len(th) != 2 || th[0] != 0 || th[1] != 1 {
			return fmt.Errorf("a Poller for no named thread serves %v, want [0 1]", th)
		}
		for ran[0].Load()+ran[1].Load() < 2*calls {
			if pl.Poll() == 0 {
				if ctx.Err() != nil {
					return fmt.Errorf("the Poller ran %d and %d calls, want %d each", ran[0].Load(), ran[1].Load(), calls)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		if ran[0].Load() != calls || ran[1].Load() != calls || wrongDst.Load() != 0 {
			return fmt.Errorf("ran %d and %d calls, %d with the wrong Dst", ran[0].Load(), ran[1].Load(), wrongDst.Load())
		}
		return pl.Err()
	})
}

// TestNestedPollRunsNothing: a handler that polls (directly, as a call that
// waits for room would) runs no calls: none runs twice or out of order.
func TestNestedPollRunsNothing(t *testing.T) {
	var hSeq dsfabric.HandlerID
	var seqs sequence
	var mm *Messengers
	var nestedRan atomic.Int64
	job(t, 1, 1, "", DefaultConfig(), func(hs *dsfabric.Handlers) {
		hSeq, _ = hs.Register("seq", func(c *dsfabric.Call, a []byte) ([]byte, error) {
			nestedRan.Add(int64(mm.Poll()))
			return seqs.handler(c, a)
		})
	}, func(m *Messengers) error {
		mm = m
		for i := 0; i < 2000; i++ {
			if err := m.Call(0, hSeq, binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
				return err
			}
			if i%7 == 0 {
				m.Poll()
			}
		}
		for deadline := time.Now().Add(30 * time.Second); seqs.total.Load() < 2000; {
			if m.Poll() == 0 && (seqs.bad.Load() > 0 || time.Now().After(deadline)) {
				break
			}
		}
		if seqs.total.Load() != 2000 || seqs.bad.Load() != 0 || nestedRan.Load() != 0 {
			return fmt.Errorf("%d ran, %d out of order, %d run by nested polls", seqs.total.Load(), seqs.bad.Load(), nestedRan.Load())
		}
		return nil
	})
}

// FuzzParseExt: extension arguments from a peer never panic the parser, and
// whatever parses re-encodes to the same header.
func FuzzParseExt(f *testing.F) {
	l := alloc.Locator{RegionRef: alloc.RegionRef{Process: 1, Region: 2}, Offset: 8, Length: 64, Key: 9}
	f.Add(putExt(nil, 7, extWrite|extNotify, l, alloc.Locator{}, l))
	f.Add(putExt(nil, 7, extRead, l, l, alloc.Locator{}))
	f.Fuzz(func(t *testing.T, a []byte) {
		e, err := parseExt(a)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error not wrapping ErrProtocol: %v", err)
			}
			return
		}
		if got := putExt(nil, e.handler, e.flags, e.dest, e.orig, e.sync); string(got) != string(a[:extHeader]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", got, a[:extHeader])
		}
	})
}

// TestSynchronizerWaitRunsIncomingCalls (docs/design.md §5, Synchronizer): a thread
// waiting on its Synchronizer still runs the calls made to it. Thread 1
// takes thread 0's counted call only after thread 0 has run thread 1's
// ping, so a Wait that only slept would never return.
func TestSynchronizerWaitRunsIncomingCalls(t *testing.T) {
	var hPing, hWork dsfabric.HandlerID
	var pinged, worked atomic.Bool
	deadline := time.Now().Add(20 * time.Second)
	job(t, 1, 2, "", DefaultConfig(), func(hs *dsfabric.Handlers) {
		hPing, _ = hs.Register("ping", func(*dsfabric.Call, []byte) ([]byte, error) { pinged.Store(true); return nil, nil })
		hWork, _ = hs.Register("work", func(*dsfabric.Call, []byte) ([]byte, error) { worked.Store(true); return nil, nil })
	}, func(m *Messengers) error {
		if m.ID() == 1 {
			if err := m.Call(0, hPing, nil); err != nil {
				return err
			}
			for !pinged.Load() { // not polling: thread 0's call waits
				if time.Now().After(deadline) {
					return errors.New("thread 0 never ran the ping while it waited on its Synchronizer")
				}
				time.Sleep(100 * time.Microsecond)
			}
			for !worked.Load() {
				if m.Poll() == 0 && time.Now().After(deadline) {
					return errors.New("thread 0's counted call never came")
				}
			}
			return m.Err()
		}
		s, err := m.NewSynchronizer(1)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := m.CallSync(1, hWork, nil, nil, s); err != nil {
			return err
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := s.Wait(ctx); err != nil {
			return fmt.Errorf("Wait: %w (pinged %v)", err, pinged.Load())
		}
		if !pinged.Load() || !worked.Load() {
			return fmt.Errorf("Wait returned with pinged %v, worked %v", pinged.Load(), worked.Load())
		}
		return nil
	})
}
