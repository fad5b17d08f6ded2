package dtutils

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// engines returns how many progress engines p has.
func engines(p *Process) int {
	if l := p.progress.list.Load(); l != nil {
		return len(l.plain) + len(l.watched)
	}
	return 0
}

// TestProgressEngines: a tcp queue pair is a progress engine of its
// process while it is open; Progress counts only the engines that did
// something (callers back off on 0); a write completes while both sides
// poll; and a closed connection's engine leaves the list. (Whether
// Progress or an engine's own goroutine applies the write is a race: an
// engine watches its socket whenever polls pause for a millisecond, so
// the test does not ask which.)
func TestProgressEngines(t *testing.T) {
	a, b := tcpPair(t)
	if engines(a.proc) != 1 || engines(b.proc) != 1 {
		t.Fatalf("engines: %d and %d, want one per queue pair", engines(a.proc), engines(b.proc))
	}
	// Idle connections: nothing to do, and Progress says so.
	time.Sleep(10 * time.Millisecond) // the hellos' echoes, if any, settle
	for i := 0; i < 3; i++ {
		a.proc.Progress()
		b.proc.Progress()
	}
	if n := a.proc.Progress(); n != 0 {
		t.Fatalf("Progress on an idle connection = %d, want 0", n)
	}
	// A signaled write: b's Progress applies it and answers; a's Progress
	// reads the answer, and the completion is there.
	src := a.mem(t, 0, 64)
	fill(src.Bytes(), 3)
	if err := a.qp.Post(WorkRequest{Op: OpWrite, WRID: 9, Signaled: true, Local: src, Remote: b.loc(t, 0, 64)}); err != nil {
		t.Fatal(err)
	}
	var c [1]Completion
	deadline := time.Now().Add(10 * time.Second)
	for a.qp.CQ().Poll(c[:]) == 0 {
		b.proc.Progress()
		a.proc.Progress()
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
	}
	if c[0].Status != StatusSuccess || c[0].WRID != 9 {
		t.Fatalf("completion %+v", c[0])
	}
	if err := b.qp.Close(); err != nil {
		t.Fatal(err)
	}
	if n := engines(b.proc); n != 0 {
		t.Fatalf("after Close: %d engines, want 0", n)
	}
	if n := b.proc.Progress(); n != 0 {
		t.Fatalf("Progress with no engines = %d", n)
	}
}

// TestProgressIdleHandsOver: while a thread calls Progress at a polling
// rate, a tcp connection's engine goroutine stands by; after Process.Idle
// (a poller about to sleep on a doorbell) it watches the socket, even
// though the polls go on. Without the hint the engine also starts watching
// whenever the poller misses a stand-by interval, which a 2-core VM does
// every second or so: this test checks the hand-over happens, not how
// soon (scripts/mutate leaves the hint's removal out for that reason).
func TestProgressIdleHandsOver(t *testing.T) {
	a, _ := tcpPair(t)
	q := a.qp.(*tcpQP)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var polls atomic.Int64
	wg.Add(1)
	go func() { // a poller
		defer wg.Done()
		for ctx.Err() == nil {
			a.proc.Progress()
			polls.Add(1)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	// Let the engine see the polls and stand by.
	for start := time.Now(); q.watching.Load() || polls.Load() < 100_000; time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the engine kept watching the socket while a thread polled")
		}
	}
	a.proc.Idle()
	// Sleep between looks, leaving the cores to the poller: a watch lasts
	// at least one 20 ms poll(2) on an idle socket.
	deadline := time.Now().Add(5 * time.Second)
	for !q.watching.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the engine did not take the socket over after Idle")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// pipeEngine is a watchable engine over a non-blocking pipe: progress
// reads it (one system call, as a tcp connection's), flush reports the
// output a test queued.
type pipeEngine struct {
	r, w                int
	progressed, flushed atomic.Int64
	output              atomic.Bool
	mu                  sync.RWMutex // closed, and the descriptors' use
	closed              bool
}

func newPipeEngine(t testing.TB) *pipeEngine {
	t.Helper()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	e := &pipeEngine{r: fds[0], w: fds[1]}
	t.Cleanup(e.close)
	return e
}

// close closes the pipe once. Like a tcp queue pair's socket, the read
// end is not read once closed: a Progress holding an older set of
// engines may still call progress, and the number may be another pipe's
// by then.
func (e *pipeEngine) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		unix.Close(e.r)
		unix.Close(e.w)
	}
}

func (e *pipeEngine) progress() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return false
	}
	e.progressed.Add(1)
	var b [64]byte
	n, _ := unix.Read(e.r, b[:])
	return n > 0
}
func (e *pipeEngine) idle()       {}
func (e *pipeEngine) readFD() int { return e.r }
func (e *pipeEngine) flush() bool { e.flushed.Add(1); return e.output.Swap(false) }
func (e *pipeEngine) arrive(t testing.TB) {
	t.Helper()
	if _, err := unix.Write(e.w, []byte{1}); err != nil {
		t.Fatal(err)
	}
}

// plainEngine has no descriptor: it is driven at every Progress call.
type plainEngine struct{ progressed atomic.Int64 }

func (e *plainEngine) progress() bool { e.progressed.Add(1); return false }
func (e *plainEngine) idle()          {}

// TestProgressReadsOnlyReadable: with defaultWatchFrom engines on
// descriptors or more, Progress reads only those the kernel reports
// readable (one epoll_wait, not a read per connection) and writes the
// others' queued output; engines without a descriptor are driven at every
// call; with fewer, each is read at every call (cheaper there); a removed
// engine is no longer read, and the epoll instance goes once they are
// fewer again.
func TestProgressReadsOnlyReadable(t *testing.T) {
	p := newProcess(t, 0, nil)
	readyInUse := func() bool {
		p.progress.mu.Lock()
		defer p.progress.mu.Unlock()
		return p.progress.ready != nil
	}
	var es []*pipeEngine
	for range defaultWatchFrom - 1 {
		e := newPipeEngine(t)
		p.progress.add(e)
		es = append(es, e)
	}
	for i := 0; i < 3; i++ {
		p.Progress()
	}
	for i, e := range es {
		if n := e.progressed.Load(); n != 3 {
			t.Fatalf("below the threshold: engine %d read %d times in 3 calls, want 3", i, n)
		}
	}
	if readyInUse() {
		t.Fatal("an epoll instance below the threshold")
	}
	es = append(es, newPipeEngine(t))
	p.progress.add(es[len(es)-1])
	plain := &plainEngine{}
	p.progress.add(plain)
	if !readyInUse() {
		t.Fatal("no epoll instance at the threshold")
	}
	for _, e := range es {
		e.progressed.Store(0)
	}
	for i := 0; i < 5; i++ {
		if n := p.Progress(); n != 0 {
			t.Fatalf("Progress with nothing readable = %d", n)
		}
	}
	for i, e := range es {
		if n, f := e.progressed.Load(), e.flushed.Load(); n != 0 || f != 5 {
			t.Fatalf("idle engine %d: read %d times, flushed %d in 5 calls; want 0 and 5", i, n, f)
		}
	}
	if n := plain.progressed.Load(); n != 5 {
		t.Fatalf("an engine without a descriptor was driven %d times in 5 calls, want 5", n)
	}
	reads := func() (n []int64) {
		for _, e := range es {
			n = append(n, e.progressed.Load())
		}
		return n
	}
	es[1].arrive(t)
	if n := p.Progress(); n != 1 || fmt.Sprint(reads()) != "[0 1 0 0]" {
		t.Fatalf("one readable engine: Progress = %d, reads %v; want 1, and only it read", n, reads())
	}
	if n := p.Progress(); n != 0 || es[1].progressed.Load() != 1 {
		t.Fatalf("after its input was read: Progress = %d, engine read %d times; want 0 and 1", n, es[1].progressed.Load())
	}
	es[2].output.Store(true)
	if n := p.Progress(); n != 1 {
		t.Fatalf("an engine with queued output: Progress = %d, want 1 (its flush)", n)
	}
	extra := newPipeEngine(t) // the threshold stays met without es[1]
	p.progress.add(extra)
	extra.arrive(t)
	if p.Progress(); extra.progressed.Load() != 1 {
		t.Fatalf("an engine added past the threshold: read %d times with input waiting, want 1", extra.progressed.Load())
	}
	p.progress.remove(es[1])
	es[1].arrive(t)
	p.Progress()
	if n := es[1].progressed.Load(); n != 1 {
		t.Fatalf("a removed engine was read again (%d reads)", n)
	}
	p.progress.remove(extra)
	if readyInUse() {
		t.Fatal("the epoll instance outlived the threshold")
	}
	before := reads()
	p.Progress()
	for i, n := range reads() {
		if i != 1 && n != before[i]+1 {
			t.Fatalf("below the threshold again: reads %v after %v, want one more each", reads(), before)
		}
	}
}

// TestProgressReadyHammer: engines come and go while threads call
// Progress (the readiness path starts and stops with them, the epoll
// instance made again each time); every input that arrives on an engine
// still registered is read, and nothing races (-race).
func TestProgressReadyHammer(t *testing.T) {
	p := newProcess(t, 0, nil)
	var stay []*pipeEngine // with the round's engine, the threshold
	for range defaultWatchFrom - 1 {
		stay = append(stay, newPipeEngine(t))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p.Progress()
			}
		}()
	}
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for i := 0; i < rounds; i++ {
		if i%50 == 0 { // removed every 50 rounds: the instance closes, then comes back
			for _, e := range stay {
				p.progress.add(e)
			}
		}
		e := newPipeEngine(t)
		p.progress.add(e)
		e.arrive(t)
		deadline := time.Now().Add(10 * time.Second)
		for e.progressed.Load() == 0 {
			if time.Now().After(deadline) {
				cancel()
				wg.Wait()
				t.Fatalf("round %d: input on a registered engine was never read", i)
			}
			time.Sleep(10 * time.Microsecond)
		}
		p.progress.remove(e)
		e.close() // as a connection does once removed; hundreds stay under the descriptor limit
		if i%50 == 49 {
			for _, e := range stay {
				p.progress.remove(e)
			}
		}
	}
	cancel()
	wg.Wait()
	if n := engines(p); n != 0 {
		t.Fatalf("%d engines left", n)
	}
}

// BenchmarkProgressIdle: one Progress call over n idle engines on
// descriptors (non-blocking pipes standing for tcp connections), reading
// each ("reads", as before the readiness path) or asking epoll which are
// readable ("ready"). Compare the two at the same n: the ratio is the
// claim, not the times.
func BenchmarkProgressIdle(b *testing.B) {
	for _, n := range []int{1, 4, 16, 64} {
		for _, mode := range []string{"reads", "ready"} {
			b.Run(fmt.Sprintf("engines=%d/%s", n, mode), func(b *testing.B) {
				p := newProcess(b, 0, nil)
				if mode == "reads" {
					p.progress.watchFrom = 1 << 30
				} else {
					p.progress.watchFrom = 1
				}
				for i := 0; i < n; i++ {
					p.progress.add(newPipeEngine(b))
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.Progress()
				}
			})
		}
	}
}

// TestWatchBound: a watching engine's wait in poll(2) doubles while
// nothing happens, up to its maximum, and is back at watchTimeout after
// anything happened; threads count as polling again by their rate of
// Progress calls, not by a count that one long wait would always reach.
func TestWatchBound(t *testing.T) {
	var calls atomic.Uint64
	w := newWatch(&calls, 160)
	var got []int
	for range 5 {
		got = append(got, w.timeout)
		w.waited(false)
	}
	if want := []int{watchTimeout, 40, 80, 160, 160}; !slices.Equal(got, want) {
		t.Fatalf("bounds of empty waits: %v, want %v", got, want)
	}
	w.waited(true)
	if w.timeout != watchTimeout {
		t.Fatalf("after an eventful wait the bound is %d ms, want %d", w.timeout, watchTimeout)
	}

	// Less than standBy since the count began: too early to say.
	w = newWatch(&calls, 160)
	calls.Add(1 << 20)
	if w.since = time.Now().Add(standBy / 2); w.pollersBack() { // ahead: the look comes early whatever the scheduler does
		t.Fatal("pollersBack before standBy passed")
	}
	// A thread sleeping on a 1 ms timer over a one-second wait: a thousand
	// calls, far over activeCalls, but not a polling rate.
	w = newWatch(&calls, 160)
	w.since = time.Now().Add(-time.Second)
	calls.Add(1000)
	if w.pollersBack() {
		t.Fatal("1000 Progress calls in a second counted as polling")
	}
	if w.mark != calls.Load() || time.Since(w.since) > time.Second/2 {
		t.Fatal("the count did not start again after a look that found no pollers")
	}
	// Polling threads: twice the rate over the same second.
	w.since = time.Now().Add(-time.Second)
	calls.Add(2 * activeCalls * 1000 / watchTimeout)
	if !w.pollersBack() {
		t.Fatal("polling threads (twice activeCalls per watchTimeout) not noticed")
	}
	// Within watchTimeout, activeCalls are enough.
	w.since = time.Now().Add(-2 * standBy)
	calls.Add(activeCalls)
	if !w.pollersBack() {
		t.Fatal("activeCalls Progress calls over 2 ms not counted as polling")
	}
}
