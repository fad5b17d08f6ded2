package dtutils

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// TestMapRemote: over the transports that share memory, MapRemote gives the
// peer's memory itself (atomics from both sides meet), after the checks a
// one-sided Post makes; over the others it says ErrNotMapped; once the
// peer's queue pair closes, Err reports it.
func TestMapRemote(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			a, b := connectPair(t, tr.make, nil)
			loc := b.loc(t, 4096, 64)
			if tr.name != "loop" && tr.name != "shm" {
				if CanMapRemote(a.qp) {
					t.Fatal("CanMapRemote true over a transport that shares no memory")
				}
				if _, err := MapRemote(a.qp, loc); !errors.Is(err, ErrNotMapped) {
					t.Fatalf("MapRemote over %s: %v, want ErrNotMapped", tr.name, err)
				}
				if Mapped(a.qp, loc) {
					t.Fatalf("Mapped true over %s", tr.name)
				}
				return
			}
			if got := Mapped(a.qp, loc); got != (tr.name == "loop") {
				t.Fatalf("Mapped before first use = %v over %s (true only over loop)", got, tr.name)
			}
			if !CanMapRemote(a.qp) {
				t.Fatal("CanMapRemote false over a shared-memory transport")
			}
			m, err := MapRemote(a.qp, loc)
			if err != nil {
				t.Fatal(err)
			}
			if !Mapped(a.qp, loc) {
				t.Fatal("Mapped false after MapRemote")
			}
			if len(m.Bytes()) != 64 || m.Err() != nil {
				t.Fatalf("mapped %d bytes, Err %v; want 64, nil", len(m.Bytes()), m.Err())
			}
			// Both sides add to one word at once: no add is lost.
			mine := (*atomic.Uint64)(unsafe.Pointer(&m.Bytes()[8]))
			theirs := (*atomic.Uint64)(unsafe.Pointer(&b.buf.Bytes()[4096+8]))
			var wg sync.WaitGroup
			for _, w := range []*atomic.Uint64{mine, theirs} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 10000; i++ {
						w.Add(1)
					}
				}()
			}
			wg.Wait()
			if v := theirs.Load(); v != 20000 {
				t.Fatalf("word holds %d after 2×10000 adds from both sides, want 20000", v)
			}
			bad := map[string]func(){
				"key":      func() { loc.Key ^= 1 },
				"past-end": func() { loc.Offset = 4<<20 - 32 },
				"process":  func() { loc.Process = 9 },
				"region":   func() { loc.Region += 100 },
			}
			for name, f := range bad {
				good := loc
				f()
				if _, err := MapRemote(a.qp, loc); !errors.Is(err, ErrRemoteAccess) {
					t.Errorf("%s: %v, want ErrRemoteAccess", name, err)
				}
				loc = good
			}
			b.qp.Close()
			for end := time.Now().Add(5 * time.Second); m.Err() == nil && time.Now().Before(end); {
				time.Sleep(time.Millisecond)
			}
			if !errors.Is(m.Err(), ErrConnectionLost) {
				t.Fatalf("after the peer closed: Err %v, want ErrConnectionLost", m.Err())
			}
			if _, err := MapRemote(a.qp, loc); !errors.Is(err, ErrConnectionLost) {
				t.Fatalf("MapRemote after the peer closed: %v, want ErrConnectionLost", err)
			}
			a.qp.Close()
			if !errors.Is(m.Err(), ErrClosed) {
				t.Fatalf("after our queue pair closed: Err %v, want ErrClosed", m.Err())
			}
		})
	}
}

// TestProcessCloseTwice: a second Close of a process whose call engine
// runs does nothing. It rang the engine's bell again, in memory the first
// Close had unmapped, and faulted (found by an rdmo test that closed its
// target before the harness did).
func TestProcessCloseTwice(t *testing.T) {
	p, err := NewProcess(DefaultProcessConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetOperator(func(src uint32, req, reply []byte) int { return 0 }); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close: %v, want nothing done", err)
	}
}

// TestHoldKeepsMemoryMapped: a Hold keeps the process's memory and the
// peers' memory mapped past the provider's and the process's Close, so
// that an endpoint still holding slices of it reads instead of faulting;
// the last release unmaps it, and no hold is taken after Close.
func TestHoldKeepsMemoryMapped(t *testing.T) {
	for _, tr := range transports {
		if tr.name != "loop" && tr.name != "shm" {
			continue
		}
		t.Run(tr.name, func(t *testing.T) {
			a, b := connectPair(t, tr.make, nil)
			theirs := b.buf.Bytes()[64:72]
			copy(theirs, "peer mem")
			m, err := MapRemote(a.qp, b.loc(t, 64, 8))
			if err != nil {
				t.Fatal(err)
			}
			mine := a.buf.Bytes()[:8]
			copy(mine, "own mem!")
			releaseA, err := a.proc.Hold()
			if err != nil {
				t.Fatal(err)
			}
			releaseA2, err := a.proc.Hold()
			if err != nil {
				t.Fatal(err)
			}
			releaseB, err := b.proc.Hold() // over loop, the peer's memory is b's
			if err != nil {
				t.Fatal(err)
			}
			a.prov.Close()
			b.prov.Close()
			for _, p := range []*Process{a.proc, b.proc} {
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				if !p.Closed() {
					t.Error("Closed false after Close")
				}
				if _, err := p.Hold(); !errors.Is(err, ErrClosed) {
					t.Errorf("Hold after Close: %v, want ErrClosed", err)
				}
			}
			if string(mine) != "own mem!" || string(m.Bytes()) != "peer mem" {
				t.Fatalf("held memory reads %q and %q", mine, m.Bytes())
			}
			regions := func(p *Process) (n int64) {
				for _, st := range p.Registry().Stats() {
					n += st.Regions
				}
				return n
			}
			if regions(a.proc) == 0 {
				t.Fatal("the process's Close unmapped memory a hold kept")
			}
			releaseA()
			releaseA() // only the first counts: the second hold still keeps it
			if regions(a.proc) == 0 {
				t.Fatal("a release called twice counted twice")
			}
			releaseA2()
			releaseB()
			if n := regions(a.proc) + regions(b.proc); n != 0 {
				t.Errorf("%d regions still mapped after the last release", n)
			}
		})
	}
}
