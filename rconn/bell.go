package rconn

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// bell is a doorbell that a waiter parks on in Go's network poller, like a
// socket reader, instead of blocking an OS thread in a futex: a pipe whose
// read end the waiter reads, and whose write end anyone who wakes it
// writes a byte to. The peer reaches the write end through
// /proc/<pid>/fd/<fd> (pipes, unlike eventfds, reopen that way).
type bell struct {
	r   *os.File // read end, non-blocking, in the poller
	wfd int      // write end, non-blocking (this side wakes itself with it)
}

func newBell() (*bell, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("rconn: doorbell pipe: %w", err)
	}
	return &bell{r: os.NewFile(uintptr(p[0]), "rconn-bell"), wfd: p[1]}, nil
}

// lostRingWait bounds a wait on a bell (nanoseconds, one second), so that
// a lost ring costs that long, not forever. A variable only so that a
// test can lengthen it and see a missing ring as a hang; atomic because
// waiters of earlier tests may still be reading it.
var lostRingWait = func() *atomic.Int64 {
	var v atomic.Int64
	v.Store(int64(time.Second))
	return &v
}()

// wait parks until the bell rings, dl passes (zero, or later than
// lostRingWait from now: lostRingWait) or the bell is closed; it drains
// the rings that woke it.
func (b *bell) wait(dl time.Time) {
	if d := time.Now().Add(time.Duration(lostRingWait.Load())); dl.IsZero() || dl.After(d) {
		dl = d
	}
	b.r.SetReadDeadline(dl)
	var buf [64]byte
	b.r.Read(buf[:])
}

// ringBell wakes the waiter of the bell whose write end is fd. A full pipe
// already holds a ring.
func ringBell(fd int) {
	var one = [1]byte{1}
	unix.Write(fd, one[:])
}

// openBell opens the write end of the peer's bell.
func openBell(pid uint32, fd int32) (int, error) {
	w, err := unix.Open(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("rconn: opening the peer's doorbell: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(w, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		unix.Close(w)
		return -1, fmt.Errorf("%w: the peer's doorbell is not a pipe", ErrHandshake)
	}
	return w, nil
}
