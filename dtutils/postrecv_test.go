package dtutils

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
)

// TestPostRecvHeldSlot (docs/wire.md, "Rings"): the counts of posted and
// polled receives can leave a slot in the shared receive queue while its
// cell is still held by a consumer that claimed the descriptor and has not
// handed the cell back (descheduled in between, or dead there). PostRecv
// then waits for the cell: it succeeds once the cell comes back, even
// after the ring's own wait (claimedCellWait) gave up, and fails with
// ErrQueueFull after about a second when it never does, leaving the
// posted count as it was.
func TestPostRecvHeldSlot(t *testing.T) {
	const slots = 4
	p := newProcess(t, 0, func(c *ProcessConfig) { c.ReceiveSlots = slots })
	r, err := p.Registry().NewRegion(slots*64+64, alloc.RegionConfig{Name: "recv"})
	if err != nil {
		t.Fatal(err)
	}
	mem := func(i int) alloc.Memory {
		m, err := r.Memory(i*64, 64)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for i := 0; i < slots; i++ {
		if err := p.PostRecv(mem(i), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer claims the oldest descriptor and keeps its cell; another
	// receive (taken by a consumer after it) completed and was polled, so
	// the counts leave a slot, and the next enqueue lands on the held cell.
	held, k := p.srq.claimSome(1)
	if k != 1 {
		t.Fatalf("claimed %d descriptors, want 1", k)
	}
	p.polled.Add(1)

	posted := p.posted.Load()
	start := time.Now()
	err = p.PostRecv(mem(slots), 100)
	if !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "still held") {
		t.Fatalf("PostRecv with the slot's cell never given back: %v, want ErrQueueFull (still held)", err)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("gave up after %v, want about a second", took)
	}
	if got := p.posted.Load(); got != posted {
		t.Errorf("posted count %d after the failure, want %d", got, posted)
	}

	// The cell comes back after the ring's own wait is over: PostRecv's
	// retries take it.
	go func() {
		time.Sleep(claimedCellWait + 150*time.Millisecond)
		p.srq.releaseCell(held)
	}()
	if err := p.PostRecv(mem(slots), 101); err != nil {
		t.Fatalf("PostRecv once the cell came back: %v", err)
	}
	var wrids []uint64
	var e [recvDescSize]byte
	for p.srq.dequeue(e[:]) {
		wrids = append(wrids, getRecvDesc(e[:]).wrid)
	}
	if want := []uint64{1, 2, 3, 101}; !slices.Equal(wrids, want) {
		t.Fatalf("descriptors in the queue: %v, want %v", wrids, want)
	}
}
