package dsfabric

import (
	"context"
	"errors"
	"github.com/seriema-go/seriema/dtutils"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSynchronizer(t *testing.T) {
	var calls atomic.Int32
	s := NewSynchronizer(100, Executed, func() { calls.Add(1) })
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.Done() }()
	}
	s.Wait()
	wg.Wait()
	if calls.Load() != 1 || s.Count() != 0 {
		t.Fatalf("callback ran %d times, count %d", calls.Load(), s.Count())
	}
	select {
	case <-s.C():
	default:
		t.Fatal("C not closed at zero")
	}
	pending := NewSynchronizer(1, Transmitted, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := pending.WaitContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitContext on an unfinished synchronizer: %v", err)
	}
	ctx0, cancel0 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel0()
	if zero := NewSynchronizer(0, Transmitted, nil); zero.WaitContext(ctx0) != nil {
		t.Fatal("a synchronizer created at zero is not done")
	}
}

// TestSynchronizerAdd: Add raises the count before more calls, many
// goroutines at once; an Add that brings the count to zero finishes it;
// misuse that would lose a notification panics (an Add once done, a count
// below zero), as sync.WaitGroup's does.
func TestSynchronizerAdd(t *testing.T) {
	var calls atomic.Int32
	s := NewSynchronizer(1, Executed, func() { calls.Add(1) })
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.Add(2) }()
	}
	wg.Wait()
	if s.Count() != 101 {
		t.Fatalf("count %d after 50 × Add(2) on 1, want 101", s.Count())
	}
	for i := 0; i < 100; i++ {
		s.Done()
	}
	select {
	case <-s.C():
		t.Fatal("done with one notification still expected")
	default:
	}
	s.Add(-1)
	select {
	case <-s.C():
	default:
		t.Fatal("an Add that brought the count to zero did not finish it")
	}
	if calls.Load() != 1 {
		t.Fatalf("callback ran %d times, want 1", calls.Load())
	}
	panics := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	panics("Add on a done synchronizer", func() { s.Add(1) })
	panics("Add on one made at zero", func() { NewSynchronizer(0, Transmitted, nil).Add(1) })
	panics("Add below zero", func() { NewSynchronizer(1, Transmitted, nil).Add(-2) })
	if calls.Load() != 1 {
		t.Fatalf("callback ran %d times after misuse, want 1", calls.Load())
	}
}

// TestConfigHotPeriod: the default hot period, and the bounds Start checks.
func TestConfigHotPeriod(t *testing.T) {
	var c Config
	if err := c.fill(); err != nil || c.HotPeriod != 50*time.Microsecond {
		t.Fatalf("default HotPeriod %v, %v", c.HotPeriod, err)
	}
	for _, d := range []time.Duration{-time.Microsecond, 2 * time.Second} {
		c := Config{HotPeriod: d}
		if err := c.fill(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("HotPeriod %v accepted: %v", d, err)
		}
	}
}

// TestConfigTransport: the transports Start knows, and ofi only in builds
// that have it.
func TestConfigTransport(t *testing.T) {
	for _, tr := range []string{"", "shm", "tcp"} {
		c := Config{Transport: tr}
		if err := c.fill(); err != nil {
			t.Errorf("Transport %q: %v", tr, err)
		}
	}
	c := Config{Transport: "ofi"}
	if err := c.fill(); (err == nil) != dtutils.OFIAvailable || err != nil && !errors.Is(err, dtutils.ErrOFIUnavailable) {
		t.Errorf("Transport ofi with OFIAvailable %v: %v", dtutils.OFIAvailable, err)
	}
	c = Config{Transport: "verbs"}
	if err := c.fill(); !errors.Is(err, ErrBadConfig) {
		t.Errorf("Transport verbs accepted: %v", err)
	}
}

// TestDefaultConfig: the defaults Start fills, and VerifyConfig as Start checks.
func TestDefaultConfig(t *testing.T) {
	d := DefaultConfig()
	if d.Procs != 1 || d.ThreadsPerProcess != 1 || d.Handlers == nil || d.MaxMessage != 64<<10 || d.VerifyConfig() != nil {
		t.Errorf("defaults %+v", d)
	}
	for name, c := range map[string]Config{
		"Procs -1": {Procs: -1},
		// A message must hold its header and two locators (a buffer call).
		"MaxMessage too small":  {MaxMessage: callHeader + 2*locSize - 1},
		"MaxMessage over 1 GiB": {MaxMessage: 1<<30 + 1},
	} {
		if err := c.VerifyConfig(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
