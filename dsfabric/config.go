package dsfabric

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/numa"
)

// Config configures Start. The zero value is usable: every field documents
// its default.
type Config struct {
	// Procs is the number of processes a self-launched job has: the binary
	// re-executes itself Procs−1 times. Ignored under mpirun, srun or a PMI
	// launcher, which say the size. Default 1.
	Procs int
	// ThreadsPerProcess is the number of worker threads in every process.
	// Default 1.
	ThreadsPerProcess int
	// ServiceThreads is the number of goroutines serving send-based calls
	// in every process. Default 1.
	ServiceThreads int
	// Transport is "" to choose per pair of processes — shm when the peer's
	// shared memory is provably reachable (it runs on a machine with the same
	// host name and boot ID, and its shm socket hands over a probe region
	// whose nonce checks out, both ways), tcp otherwise — or "shm" or "tcp"
	// to force one (forced shm fails at Start, naming the unreachable rank),
	// or "ofi" for libfabric between every pair (builds with -tags ofi
	// only; see OFIProvider). Default "". Fabric.Transport tells what was
	// chosen.
	Transport string
	// OFIProvider is the libfabric provider of Transport "ofi": "tcp",
	// "shm", "verbs", "efa", "cxi", ... Default: the environment's
	// FI_PROVIDER, else "tcp". With tcp, endpoints bind to the address
	// this rank reached the coordinator from (several machines) or to
	// loopback (one machine), as the tcp transport does.
	OFIProvider string
	// OFIOneSided sends writes and reads over Transport "ofi" as libfabric
	// RMA into registered memory (dtutils.OFIConfig.OneSided) instead of
	// messages. Default false, unless SERIEMA_OFI_ONESIDED=1 is set.
	OFIOneSided bool
	// Handlers holds the handlers; register them before Start, identically in
	// every process. Default: an empty set (see Fabric.Handlers).
	Handlers *Handlers
	// Worker is the body each worker thread runs; it should poll its worker
	// (Worker.Poll) so that calls to it run. Default: Worker.Serve until the
	// fabric closes.
	Worker func(w *Worker)
	// HotPeriod is how long Worker.Serve keeps polling an idle worker
	// (spinning 2 µs, then yielding the processor) before it sleeps on the
	// worker's doorbell, which a send-based call rings. Longer answers a
	// steady trickle of calls faster and costs CPU when idle (mctsbench
	// idle measures both). Default 50 µs, the hot period of the service
	// threads' receive queue; at most 1 s.
	HotPeriod time.Duration
	// Pin pins each worker thread to a CPU chosen by Placement.
	Pin bool
	// Placement is the policy Pin uses (numa.Fill by default).
	Placement numa.Policy
	// BootstrapTimeout bounds the formation of the job: rank 0 waits this
	// long for every rank, others for rank 0. Default 30 s.
	BootstrapTimeout time.Duration
	// Listen is the local address of the tcp transport. Default: the
	// environment's SERIEMA_LISTEN, else ":0" (every interface) when the
	// coordinator is tcp (SERIEMA_COORD=host:port: ranks may be on several
	// machines), else "127.0.0.1:0" (a unix coordinator: one machine).
	// Endpoints advertise the listener's host, or, when it is unspecified
	// (":0", "0.0.0.0:0"), the address this rank reached the coordinator
	// from — an address its peers can reach, never loopback across hosts.
	Listen string
	// MaxMessage is the largest send-based message: 32-byte header,
	// arguments and buffer. Default 64 KiB.
	MaxMessage int
	// RecvBuffers is the number of receive buffers of MaxMessage bytes each
	// process posts (at least one per rank is posted whatever it says).
	// They are split evenly among the ranks as receive credits: how many
	// send-based messages a rank may have sent to this process and not yet
	// consumed before its sends wait. Default 128. Over tcp a sender
	// gets about its credits' worth of messages per round trip: with two
	// processes on the development VM, small sends ran at 1.1–1.3 M/s
	// with the default (64 credits) and 2.2–2.8 M/s with 512 or 2048
	// buffers, each MaxMessage bytes of registered memory
	// (docs/benchmarks.md, "Over tcp: a window of 4096 small writes").
	RecvBuffers int
	// Args are the arguments of self-launched ranks. Default os.Args[1:].
	Args []string
	// Stdout and Stderr receive the output of self-launched ranks. Default
	// os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Logger receives the fabric's events. Default slog.Default().
	Logger *slog.Logger

	// standingBy, when set (tests only), is told each interval a service
	// thread stands by for, and whether a worker's wake-up set it.
	standingBy func(d time.Duration, woken bool)
}

// DefaultConfig returns the defaults: the zero Config with every field
// filled as Start fills it (a new, empty handler set included).
func DefaultConfig() Config {
	var c Config
	c.fill()
	return c
}

// VerifyConfig checks c as Start does, after defaults.
func (c Config) VerifyConfig() error { return c.fill() }

func (c *Config) fill() error {
	if c.Procs == 0 {
		c.Procs = 1
	}
	if c.ThreadsPerProcess == 0 {
		c.ThreadsPerProcess = 1
	}
	if c.ServiceThreads == 0 {
		c.ServiceThreads = 1
	}
	if c.Handlers == nil {
		c.Handlers = NewHandlers()
	}
	if c.BootstrapTimeout == 0 {
		c.BootstrapTimeout = 30 * time.Second
	}
	if c.HotPeriod == 0 {
		c.HotPeriod = 50 * time.Microsecond
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = 64 << 10
	}
	if c.RecvBuffers == 0 {
		c.RecvBuffers = 128
	}
	if c.Args == nil {
		c.Args = os.Args[1:]
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	switch {
	case c.Procs < 1 || c.Procs > 1<<16:
		return fmt.Errorf("%w: Procs %d", ErrBadConfig, c.Procs)
	case c.ThreadsPerProcess < 1 || c.ThreadsPerProcess > 1<<12:
		return fmt.Errorf("%w: ThreadsPerProcess %d", ErrBadConfig, c.ThreadsPerProcess)
	case c.HotPeriod < 0 || c.HotPeriod > time.Second:
		return fmt.Errorf("%w: HotPeriod %v must be in (0, 1s]", ErrBadConfig, c.HotPeriod)
	case c.ServiceThreads < 1:
		return fmt.Errorf("%w: ServiceThreads %d", ErrBadConfig, c.ServiceThreads)
	case c.Transport != "" && c.Transport != "shm" && c.Transport != "tcp" && c.Transport != "ofi":
		return fmt.Errorf("%w: Transport %q (want \"\", shm, tcp or ofi)", ErrBadConfig, c.Transport)
	case c.Transport == "ofi" && !dtutils.OFIAvailable:
		return fmt.Errorf("%w: Transport ofi needs a build with -tags ofi: %w", ErrBadConfig, dtutils.ErrOFIUnavailable)
	case c.MaxMessage < callHeader+2*locSize || c.MaxMessage > 1<<30:
		return fmt.Errorf("%w: MaxMessage %d", ErrBadConfig, c.MaxMessage)
	case c.RecvBuffers < 1 || c.RecvBuffers > 1<<16:
		return fmt.Errorf("%w: RecvBuffers %d", ErrBadConfig, c.RecvBuffers)
	case c.BootstrapTimeout < 0:
		return fmt.Errorf("%w: BootstrapTimeout %v", ErrBadConfig, c.BootstrapTimeout)
	}
	return nil
}
