package dtutils

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Progress engines. A transport whose remote operations need a local CPU to
// land (tcp: bytes in a socket must be read and applied) registers an
// engine with its Process. Every thread that polls — a receiving worker, a
// waiter for a reply or a completion — drives the engines itself through
// Process.Progress, so an operation lands on a thread that is already
// running instead of waiting for a goroutine to be scheduled: on a machine
// whose cores are all busy polling, that hand-off used to cost tens of
// microseconds per hop and milliseconds at the tail. Each engine still has
// its own goroutine for when nobody polls.
//
// This is libfabric's manual-progress model (FI_PROGRESS_MANUAL): the
// application's polls make progress.

// progressor is one engine.
type progressor interface {
	// progress does whatever is ready without blocking and reports whether
	// it did anything. It must be cheap when nothing is ready and must not
	// wait for a lock another progress call holds.
	progress() bool
	// idle says that a thread is about to sleep on a doorbell rather than
	// keep polling: the engine should watch for itself now.
	idle()
}

// watchable is an engine whose input arrives on a file descriptor (a tcp
// connection): with several of them, Progress asks the kernel which are
// readable, in one epoll_wait, and reads only those; the others only
// write what is queued for them.
type watchable interface {
	progressor
	// readFD is the descriptor input arrives on, or -1 (an engine that
	// reads through something else: it is driven at every call).
	readFD() int
	// flush writes what is queued without blocking and reports whether it
	// wrote anything.
	flush() bool
}

type progressList struct {
	mu   sync.Mutex
	list atomic.Pointer[progressSet] // copy-on-write: Progress takes no lock
	// calls counts Progress calls: an engine's fallback goroutine stands by
	// while it keeps changing (some thread polls) and watches the socket
	// itself once it stops.
	calls atomic.Uint64
	// ready is the epoll instance the watchable engines are registered
	// with while there are at least watchFrom of them (mu), else nil.
	ready   *readySet
	noEpoll bool // epoll refused once: engines are read at every call
	nextID  int32
	// watchFrom is how many watchable engines make Progress use ready
	// (defaultWatchFrom when 0); tests set 1 to run a whole suite over the
	// readiness path.
	watchFrom int
}

// defaultWatchFrom is where the readiness path starts: 4 tcp connections,
// a job of 3 processes (a process has two to each peer: dsfabric's and the
// messengers'). Below it, reading each costs less than what epoll adds:
// with 2, a tcp call-and-return's p50 measured 8.1–9.9 µs over the
// readiness path against 7.4–8.0 reading both, nine interleaved runs.
const defaultWatchFrom = 4

// progressSet is one version of a process's engines.
type progressSet struct {
	plain   []progressor        // engines without a descriptor
	watched []watchedEngine     // engines with one
	byID    map[int32]watchable // watched, by id, when ready is in use
	ready   *readySet           // nil: every engine is read at every call
}

type watchedEngine struct {
	id int32 // the epoll registration's data
	fd int
	e  watchable
}

// readySet is an epoll instance of readable engines. Its descriptor is
// closed under mu, so that a Progress holding an older set never waits on
// a number the process has reused (another epoll instance included).
type readySet struct {
	mu sync.RWMutex
	fd int // -1 once closed
}

// wait returns the engines readable now (level-triggered: one that is
// not drained comes back at the next call); false when the set is closed
// or epoll failed, and then the caller reads every engine.
func (r *readySet) wait(evs []unix.EpollEvent) (int, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.fd < 0 {
		return 0, false
	}
	for {
		n, err := unix.EpollWait(r.fd, evs, 0)
		if err == unix.EINTR {
			continue
		}
		return n, err == nil
	}
}

// close closes the instance, which ends every registration in it.
func (r *readySet) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

func (r *readySet) register(w watchedEngine) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: w.id}
	return unix.EpollCtl(r.fd, unix.EPOLL_CTL_ADD, w.fd, &ev)
}

func (l *progressList) add(p progressor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := &progressSet{}
	if cur := l.list.Load(); cur != nil {
		next.plain = append(next.plain, cur.plain...)
		next.watched = append(next.watched, cur.watched...)
	}
	if w, ok := p.(watchable); ok && w.readFD() >= 0 {
		we := watchedEngine{id: l.nextID, fd: w.readFD(), e: w}
		l.nextID++
		next.watched = append(next.watched, we)
		if l.ready != nil && l.ready.register(we) != nil {
			l.noEpoll = true
			l.stopReady()
		}
	} else {
		next.plain = append(next.plain, p)
	}
	l.store(next)
}

func (l *progressList) remove(p progressor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.list.Load()
	if cur == nil {
		return
	}
	next := &progressSet{}
	for _, q := range cur.plain {
		if q != p {
			next.plain = append(next.plain, q)
		}
	}
	for _, w := range cur.watched {
		if progressor(w.e) != p {
			next.watched = append(next.watched, w)
		} else if l.ready != nil {
			// Before the engine closes its descriptor: a registration lives
			// as long as the open file, which a dup'd socket may outlive.
			unix.EpollCtl(l.ready.fd, unix.EPOLL_CTL_DEL, w.fd, nil)
		}
	}
	l.store(next)
}

// stopReady closes the epoll instance: every engine is read at every call.
func (l *progressList) stopReady() {
	if l.ready != nil {
		l.ready.close()
		l.ready = nil
	}
}

// store starts or stops the readiness path as next's watchable engines
// reach watchFrom or fall below it, and publishes next.
func (l *progressList) store(next *progressSet) {
	from := l.watchFrom
	if from == 0 {
		from = defaultWatchFrom
	}
	switch want := len(next.watched) >= from && !l.noEpoll; {
	case !want:
		l.stopReady()
	case l.ready == nil:
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			l.noEpoll = true
			break
		}
		l.ready = &readySet{fd: fd}
		for _, w := range next.watched {
			if l.ready.register(w) != nil {
				l.noEpoll = true
				l.stopReady()
				break
			}
		}
	}
	next.ready = l.ready
	if next.ready != nil {
		next.byID = make(map[int32]watchable, len(next.watched))
		for _, w := range next.watched {
			next.byID[w.id] = w.e
		}
	}
	l.list.Store(next)
}

// Progress drives every progress engine of the process once, without
// blocking, and reports how many made progress. Poll loops call it; it
// costs one atomic load when no transport of the process needs it (shm,
// loop), one non-blocking system call with one tcp connection, and with
// several one epoll_wait and a read of each readable one.
func (p *Process) Progress() int {
	s := p.progress.list.Load()
	if s == nil || len(s.plain)+len(s.watched) == 0 {
		return 0
	}
	p.progress.calls.Add(1)
	n := 0
	for _, e := range s.plain {
		if e.progress() {
			n++
		}
	}
	if s.ready != nil {
		return n + s.progressReady()
	}
	return n + s.progressEach()
}

// progressEach drives every watchable engine: a read of each.
func (s *progressSet) progressEach() int {
	n := 0
	for _, w := range s.watched {
		if w.e.progress() {
			n++
		}
	}
	return n
}

// readyBatch is how many readable engines one Progress call reads; the
// rest are reported again at the next (level-triggered, in turn).
const readyBatch = 32

// progressReady drives the watchable engines from the threshold: those
// the kernel reports readable make progress (read and write), the others
// only write what is queued.
func (s *progressSet) progressReady() int {
	var evs [readyBatch]unix.EpollEvent
	k, ok := s.ready.wait(evs[:])
	if !ok {
		return s.progressEach()
	}
	n := 0
	for _, ev := range evs[:k] {
		// An engine registered after s was loaded is not in it: it is read
		// at the next call.
		if e, ok := s.byID[ev.Fd]; ok && e.progress() {
			n++
		}
	}
	for _, w := range s.watched {
		if w.e.flush() {
			n++
		}
	}
	return n
}

// Idle tells the progress engines that the calling thread stops polling
// and will sleep until a doorbell rings: each engine watches its socket
// itself from now on, instead of after its stand-by interval.
func (p *Process) Idle() {
	if l := p.progress.list.Load(); l != nil {
		for _, e := range l.plain {
			e.idle()
		}
		for _, w := range l.watched {
			w.e.idle()
		}
	}
}

// watch is the watching phase of an engine goroutine: whether threads of
// the process poll again, and how long its next wait in poll(2) may be.
//
// The bound grows while nothing happens: an engine woke every
// watchTimeout (20 ms) to look for pollers, 50 wake-ups a second per tcp
// connection, which made an idle 16-process tcp job spend 7 % of a core
// per process (`mctsbench idle -procs 16 -transport tcp`). The look is
// needed only to hand the socket back to pollers, which costs nothing
// while no traffic comes: the first wake-up after pollers return finds
// them, since every eventful wait sets the bound back to watchTimeout.
type watch struct {
	calls   *atomic.Uint64
	mark    uint64    // calls when the count began
	since   time.Time // when it began
	timeout int       // ms: the bound of the next wait
	max     int       // ms: the bound stops growing there
}

// newWatch begins watching: the count starts now and the first wait is
// bounded by watchTimeout.
func newWatch(calls *atomic.Uint64, maxTimeout int) watch {
	return watch{calls: calls, mark: calls.Load(), since: time.Now(), timeout: watchTimeout, max: maxTimeout}
}

// pollersBack reports whether threads poll again: activeCalls Progress
// calls since the count began, once standBy has passed, and over a count
// longer than watchTimeout as many per watchTimeout (one wait may now
// span a second, in which a thread sleeping on a 1 ms timer makes a
// thousand calls: not polling). Once standBy has passed without that the
// count starts again.
func (w *watch) pollersBack() bool {
	el := time.Since(w.since)
	if el < standBy {
		return false
	}
	need := uint64(activeCalls)
	if per := watchTimeout * time.Millisecond; el > per {
		need = need * uint64(el) / uint64(per)
	}
	now := w.calls.Load()
	if now-w.mark >= need {
		return true
	}
	w.mark, w.since = now, time.Now()
	return false
}

// waited records how a wait ended: an eventful one (readable, writable, a
// kick) sets the next bound back to watchTimeout, an empty one doubles it
// up to max.
func (w *watch) waited(eventful bool) {
	if eventful {
		w.timeout = watchTimeout
		return
	}
	w.timeout = min(2*w.timeout, w.max)
}

// standByWhilePolled is the stand-by phase of an engine goroutine: it
// returns true once threads of the process stop polling (fewer than
// activeCalls Progress calls in a standBy interval) or hint fires, and
// false when done closes. tick, if set, runs every interval. timer must
// be armed for standBy; it is re-armed on each tick.
func standByWhilePolled(calls *atomic.Uint64, timer *time.Timer, hint, done <-chan struct{}, tick func()) bool {
	for last := calls.Load(); ; {
		select {
		case <-done:
			return false
		case <-hint:
			return true
		case <-timer.C:
			timer.Reset(standBy)
			if tick != nil {
				tick()
			}
			now := calls.Load()
			if now-last < activeCalls {
				return true
			}
			last = now
		}
	}
}
