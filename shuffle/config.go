package shuffle

import "fmt"

// Design is how an endpoint moves a buffer (seed 004, §5).
type Design uint8

const (
	// WR: the sender writes the buffer into a slot of the receiver's ring
	// with one-sided writes, then its header; the receiver polls the
	// headers (sealed-buffer polling) and hands the slot back by writing
	// its count of consumed buffers into the sender's memory (the credit).
	WR Design = iota + 1
	// RD: the sender writes only a descriptor (where the buffer lies in
	// its memory) into the receiver's ring; the receiver pulls the buffer
	// with a one-sided read, then returns the credit as WR does.
	RD
	// SR: two-sided. The receiver posts receive buffers (Depth per source)
	// on its process's shared receive queue; the sender sends each buffer
	// with one Send whose immediate names the source and carries the
	// flags; the receiver returns credits by Send too (seed 004's SR with
	// credits in messages). An SR endpoint needs a dtutils.Process of its
	// own: every receive completion of that process is taken as the
	// endpoint's, and its ReceiveSlots must hold Depth buffers per
	// connection (Wiring makes such processes).
	SR
)

func (d Design) String() string {
	switch d {
	case WR:
		return "wr"
	case RD:
		return "rd"
	case SR:
		return "sr"
	}
	return fmt.Sprintf("Design(%d)", uint8(d))
}

// ParseDesign parses "wr", "rd" or "sr".
func ParseDesign(s string) (Design, error) {
	switch s {
	case "wr":
		return WR, nil
	case "rd":
		return RD, nil
	case "sr":
		return SR, nil
	}
	return 0, fmt.Errorf("%w: design %q (want wr, rd or sr)", ErrBadConfig, s)
}

// Config configures an endpoint. Zero fields mean their defaults. Both
// ends of a connection must use the same Design, BufferBytes and Depth.
type Config struct {
	// Design is the transfer protocol. Default WR.
	Design Design
	// BufferBytes is the size of a transmission buffer: the batching
	// threshold, a buffer is sent when the next record does not fit.
	// Default 16 KiB (seed 000's best); at least 64, at most 16 MiB.
	BufferBytes int
	// Depth is the number of buffers in flight per connection (sent, not
	// yet released by the receiver); a sender with none left blocks in
	// Acquire or PutData (back-pressure, no spill); 1…4096. Default:
	// DefaultWindowBytes / BufferBytes, at least 2 (128 at the default
	// buffer size). Memory grows with it: a receiver registers Depth
	// buffers per source (twice that for RD and SR), a sender about Depth
	// per destination, so a job of many endpoints per process (ME with
	// many threads) may want less.
	Depth int
	// Adaptive makes a receiver adapt, per source, the window of buffers
	// the sender may have in flight (at most Depth) to how fast its
	// consumers take them (seed 004 §6): a window doubles when a consumer
	// waited for a buffer that the window had held back (the sender marks
	// a buffer sent after it waited for credit), and at the end of a
	// window's worth of buffers taken without that, gives back all but one
	// of the fewest buffers it found waiting beyond the one taken (a
	// consumer slower than the producer needs only one buffer ready), but
	// never goes below one more than the largest window that starved the
	// consumers (ReceiverStats.Floors). Starts at 2. Default false: the window is always Depth (the fixed-depth
	// mode). It is the receiver's choice; the sender obeys the window
	// either way. The ring memory is registered for Depth regardless:
	// the window bounds what is in flight, not what is registered.
	Adaptive bool
	// NoMap makes an RD receiver copy each buffer with a one-sided read
	// even where the sender's memory is mapped into its process (shm, and
	// loop within one process). By default it reads the buffer in place
	// there (dtutils.MapRemote): no copy, the read's completion not waited
	// for; the sender keeps the buffer until the receiver releases it, as
	// with a read. Over tcp and ofi the read is always a copy.
	NoMap bool
}

// DefaultWindowBytes is what a connection may have in flight by default
// (Config.Depth is this over BufferBytes). It is sized in time, not in
// buffers: at 2 GB/s, 2 MiB lasts about a millisecond, a scheduling
// quantum, so that a sender whose receiver lost its core for one keeps
// sending instead of going to sleep. With 512 KiB (Depth 32 of 16 KiB,
// the default until 2026-11-27) two processes on two cores switched
// contexts a fifth to a half more often, and in medians of five
// interleaved rounds repartitioned 16 % slower and broadcast at half the rate
// (docs/benchmarks.md, shuffle notes of that day).
const DefaultWindowBytes = 2 << 20

// initialWindow is where an adaptive window starts.
const initialWindow = 2

// window is the window a receiver grants first.
func (c Config) window() int {
	if c.Adaptive {
		return min(initialWindow, c.Depth)
	}
	return c.Depth
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Design == 0 {
		c.Design = WR
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = 16 << 10
	}
	if c.Depth == 0 {
		c.Depth = max(2, min(DefaultWindowBytes/max(c.BufferBytes, 1), 4096))
	}
	return c
}

// VerifyConfig checks c after defaults.
func (c Config) VerifyConfig() error {
	c = c.withDefaults()
	switch {
	case c.Design != WR && c.Design != RD && c.Design != SR:
		return fmt.Errorf("%w: Design %d", ErrBadConfig, c.Design)
	case c.BufferBytes < 64 || c.BufferBytes > 16<<20 || c.BufferBytes%8 != 0:
		return fmt.Errorf("%w: BufferBytes %d (want 64…16 MiB, a multiple of 8)", ErrBadConfig, c.BufferBytes)
	case c.Depth < 1 || c.Depth > 4096:
		return fmt.Errorf("%w: Depth %d (want 1…4096)", ErrBadConfig, c.Depth)
	}
	return nil
}
