package riutils

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
)

// TestStartConfigWorkerRefused: Start takes the worker body as its own
// argument; a dsfabric.Config.Worker as well is refused, not overridden.
func TestStartConfigWorkerRefused(t *testing.T) {
	_, err := Start(context.Background(), dsfabric.Config{Procs: 1, Worker: func(*dsfabric.Worker) {}}, DefaultConfig(), nil)
	if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("Start with Config.Worker set: %v, want ErrBadConfig", err)
	}
}

// TestStartThreadWithoutMessengers: a worker thread that cannot have its
// messengers fails Start, which closes the fabric, and no worker body
// runs: a job must not start with a thread that takes no calls (its
// callers would wait for it forever).
func TestStartThreadWithoutMessengers(t *testing.T) {
	injected := errors.New("injected: no memory for messengers")
	for _, failing := range []int{0, 2} {
		p, err := NewProcess(dsfabric.NewHandlers(), Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		p.beforeMessengers = func(th int) error {
			if th == failing {
				return injected
			}
			return nil
		}
		var ran atomic.Int32
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		j, err := start(ctx, dsfabric.Config{Procs: 1, ThreadsPerProcess: 3, Handlers: p.handlers, Logger: quiet}, p,
			func(w *dsfabric.Worker, m *Messengers) { ran.Add(1) })
		cancel()
		if j != nil {
			j.Close()
		}
		if !errors.Is(err, injected) {
			t.Fatalf("thread %d without messengers: Start returned %v, want the thread's error", failing, err)
		}
		if want := "worker thread " + strconv.Itoa(failing); !strings.Contains(err.Error(), want) {
			t.Errorf("Start's error %q does not name %q", err, want)
		}
		f := p.f.Load()
		if f == nil {
			t.Fatal("the process was never bound")
		}
		select {
		case <-f.Done():
		default:
			t.Error("Start failed but left the fabric running")
		}
		if n := ran.Load(); n != 0 {
			t.Errorf("%d worker bodies ran in a job whose Start failed", n)
		}
	}
}

// TestStartBodiesAfterEveryThread: when Start returns, every worker
// thread has its messengers, so a body may call any thread of the process
// at once (bodies start together, after the last thread is ready).
func TestStartBodiesAfterEveryThread(t *testing.T) {
	p, err := NewProcess(dsfabric.NewHandlers(), Config{ChunkSize: 8 << 10, ChunksPerAllocation: 2, MaxChunks: 2, Policy: Fail, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// Thread 2 is slow to get its messengers; no body may start before.
	var slowReady atomic.Bool
	p.beforeMessengers = func(th int) error {
		if th == 2 {
			time.Sleep(100 * time.Millisecond)
			slowReady.Store(true)
		}
		return nil
	}
	early := make(chan int, 3)
	j, err := start(context.Background(), dsfabric.Config{Procs: 1, ThreadsPerProcess: 3, Handlers: p.handlers, Logger: quiet}, p,
		func(w *dsfabric.Worker, m *Messengers) {
			if !slowReady.Load() {
				early <- w.Fabric().Names().ThreadRank(w.ID())
			}
			w.Serve(context.Background())
		})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if !slowReady.Load() {
		t.Error("Start returned before every thread had its messengers")
	}
	time.Sleep(50 * time.Millisecond)
	close(early)
	for th := range early {
		t.Errorf("thread %d's body started before thread 2 had its messengers", th)
	}
}
