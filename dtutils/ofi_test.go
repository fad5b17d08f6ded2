//go:build ofi

package dtutils

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/internal/jobtest"
	"golang.org/x/sys/unix"
)

// The ofi provider runs the whole transport suite (TestTransportSuite,
// the Transmitter hammer and the other tests that range over transports)
// through ofiMake, and the cross-process, two-host and fault tests below.
// The provider is FI_PROVIDER's, else tcp (tcp;ofi_rxm) on loopback.

func ofiMake(t testing.TB, pa, pb *Process) (Provider, Provider) {
	return ofiMakeWith(t, pa, pb, ofiTestConfig(""))
}

// ofiRMAMake: both ends with the one-sided path (OFIConfig.OneSided).
func ofiRMAMake(t testing.TB, pa, pb *Process) (Provider, Provider) {
	cfg := ofiTestConfig("")
	cfg.OneSided = true
	return ofiMakeWith(t, pa, pb, cfg)
}

func ofiMakeWith(t testing.TB, pa, pb *Process, cfg OFIConfig) (Provider, Provider) {
	a, err := NewOFI(pa, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewOFI(pb, cfg)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	return a, b
}

// ofiTestConfig binds tcp to node, or to loopback when node is empty and
// FI_PROVIDER does not choose otherwise.
func ofiTestConfig(node string) OFIConfig {
	cfg := DefaultOFIConfig()
	cfg.Logger = quietLog
	cfg.Node = node
	if node == "" && cfg.Provider == "tcp" {
		cfg.Node = "127.0.0.1"
	}
	return cfg
}

func init() {
	transports = append(transports, struct {
		name string
		make func(t testing.TB, pa, pb *Process) (Provider, Provider)
	}{"ofi", ofiMake}, struct {
		name string
		make func(t testing.TB, pa, pb *Process) (Provider, Provider)
	}{"ofi-rma", ofiRMAMake})
	for _, name := range []string{"ofi", "ofi-rma"} {
		peerProviders[name] = func(proc *Process, args []string) (Provider, error) {
			node := ""
			if len(args) > 0 {
				node = args[0]
			}
			cfg := ofiTestConfig(node)
			cfg.OneSided = name == "ofi-rma"
			return NewOFI(proc, cfg)
		}
	}
}

func TestOFICrossProcess(t *testing.T) {
	for _, tr := range []string{"ofi", "ofi-rma"} {
		t.Run(tr+"/Atomics", func(t *testing.T) {
			runPeers(t, startPeer(t, "atomics,"+tr+",0"), startPeer(t, "atomics,"+tr+",1"))
		})
		t.Run(tr+"/SealVisibility", func(t *testing.T) {
			runPeers(t, startPeer(t, "seal-recv,"+tr+",0"), startPeer(t, "seal-send,"+tr+",1"))
		})
	}
}

// TestOFITwoHostsOverNetns: as TestTwoHostsOverNetns, over libfabric's tcp
// provider bound to each namespace's address.
func TestOFITwoHostsOverNetns(t *testing.T) {
	if p := DefaultOFIConfig().Provider; p != "tcp" {
		t.Skipf("FI_PROVIDER=%s does not cross network namespaces", p)
	}
	h := jobtest.TwoHosts(t)
	for _, tr := range []string{"ofi", "ofi-rma"} {
		t.Run(tr, func(t *testing.T) {
			a := startPeer(t, "atomics,"+tr+",0,"+h.Addr[0], h.IP, "netns", "exec", h.NS[0])
			b := startPeer(t, "atomics,"+tr+",1,"+h.Addr[1], h.IP, "netns", "exec", h.NS[1])
			runPeers(t, a, b)
		})
	}
}

func TestOFIPeerClosesMidStream(t *testing.T) {
	if DefaultOFIConfig().Provider == "shm" {
		// A SIGSEGV inside fi_cq_read, about one run in three: an endpoint
		// of the same process closed under traffic. Across processes
		// (TestOFIPeerKilled) shm is fine.
		t.Skip("libfabric's shm provider can crash when an endpoint of the same process closes under traffic")
	}
	a, b := connectPair(t, ofiMake, nil)
	peerDiesMidStream(t, a, b)
}

// TestOFIPeerKilled: a peer process killed while operations are in flight
// (no close message, its sockets reset by the kernel) makes them complete
// with StatusConnectionLost, or later posts fail; nothing hangs.
func TestOFIPeerKilled(t *testing.T) {
	proc := newProcess(t, 0, nil)
	cfg := ofiTestConfig("")
	cfg.PeerTimeout = time.Second
	prov, err := NewOFI(proc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	qp, err := prov.NewQueuePair()
	if err != nil {
		t.Fatal(err)
	}
	region, err := proc.Registry().NewRegion(1<<20, alloc.RegionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	peer := startPeer(t, "hold,ofi,1")
	f := strings.Fields(peer.next(t, 30*time.Second))
	if len(f) != 3 || f[0] != "EP" {
		t.Fatalf("peer said %q", f)
	}
	ep, _ := hex.DecodeString(f[1])
	lb, _ := hex.DecodeString(f[2])
	var remote alloc.Locator
	if err := remote.UnmarshalBinary(lb); err != nil {
		t.Fatal(err)
	}
	whole, _ := region.Locator(0, 1<<20)
	wb, _ := whole.MarshalBinary()
	fmt.Fprintf(peer.stdin, "EP %s %s\n", hex.EncodeToString(qp.Endpoint()), hex.EncodeToString(wb))
	if err := qp.Connect(ep); err != nil {
		t.Fatal(err)
	}
	if l := peer.next(t, 30*time.Second); l != "READY" {
		t.Fatalf("peer said %q", l)
	}
	src, _ := region.Memory(0, 4096)
	dst, _ := remote.Sub(0, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var cs [64]Completion
	ok, lost, posted := 0, 0, 0
	for i := 0; ; i++ {
		if i == 200 {
			// A read the peer took and never answers, and nothing posted
			// after it: only a probe can tell the peer is gone.
			peer.cmd.Process.Signal(syscall.SIGSTOP)
			for t0 := time.Now(); !stopped(peer.cmd.Process.Pid); time.Sleep(time.Millisecond) {
				if time.Since(t0) > 5*time.Second {
					t.Fatal("peer did not stop")
				}
			}
			if err := qp.Post(WorkRequest{Op: OpRead, WRID: 1000, Signaled: true, Local: src, Remote: dst}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			peer.cmd.Process.Kill()
			n, err := qp.CQ().Wait(ctx, cs[:1])
			if err != nil || n != 1 || cs[0].Status != StatusConnectionLost || cs[0].WRID != 1000 {
				t.Fatalf("read pending at the kill: %v %+v", err, cs[0])
			}
			break
		}
		op := OpWrite
		if i%2 == 1 {
			op = OpRead // needs an answer: a hang if the loss went unnoticed
		}
		err := qp.Post(WorkRequest{Op: op, WRID: uint64(i), Signaled: true, Local: src, Remote: dst})
		if errors.Is(err, ErrConnectionLost) {
			break
		}
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		posted++
		n, err := qp.CQ().Wait(ctx, cs[:])
		if err != nil {
			t.Fatalf("hang after the peer was killed: %d posted, %d ok, %d lost: %v", posted, ok, lost, err)
		}
		for _, c := range cs[:n] {
			switch c.Status {
			case StatusSuccess:
				ok++
			case StatusConnectionLost:
				lost++
			default:
				t.Fatalf("unexpected %+v", c)
			}
		}
		if lost > 0 {
			break
		}
	}
	if ok < 200 {
		t.Fatalf("only %d operations completed before the kill", ok)
	}
	if err := qp.Post(WorkRequest{Op: OpNop, Signaled: true}); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("post after the loss: %v", err)
	}
	t.Logf("%d operations ok before the kill; the read pending at the kill reported lost", ok)
}

func TestOFIConfig(t *testing.T) {
	proc := newProcess(t, 0, nil)
	for _, c := range []OFIConfig{{MessageSize: 100}, {ReceiveBuffers: 1}, {SendBuffers: 1 << 20}} {
		if _, err := NewOFI(proc, c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := NewOFI(proc, OFIConfig{Provider: "no-such-provider"}); !errors.Is(err, ErrOFIUnavailable) {
		t.Errorf("unknown provider: %v", err)
	}
	if os.Getenv("FI_PROVIDER") == "" {
		p, err := NewOFI(proc, ofiTestConfig(""))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if name := p.(*ofiProvider).ProviderName(); !strings.HasPrefix(name, "tcp") {
			t.Errorf("default provider %q, want tcp", name)
		}
	}
}

// stopped reports whether process pid is stopped (state T in /proc).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'T'
}

// TestOFIDeliverInSequence: libfabric's reliable datagrams may arrive out
// of order; a queue pair's stream takes them in their sequence, holding
// the early ones until the gap before them fills.
func TestOFIDeliverInSequence(t *testing.T) {
	q := &ofiQP{}
	for _, seq := range []uint32{2, 0, 4, 3, 1, 5} {
		q.deliver(ofiMsg{buf: int(seq), n: 1, seq: seq, kind: ofiKindData})
	}
	var got []int
	for {
		m, ok := q.in.pop()
		if !ok {
			break
		}
		got = append(got, m.buf)
	}
	if fmt.Sprint(got) != "[0 1 2 3 4 5]" || len(q.early) != 0 || q.next != 6 {
		t.Fatalf("stream %v, %d held back, next %d; want [0 1 2 3 4 5], none, 6", got, len(q.early), q.next)
	}
}

// TestOFIConnectChecks: an endpoint without an address, or a second
// Connect of one queue pair, is refused with ErrBadEndpoint.
func TestOFIConnectChecks(t *testing.T) {
	pa, pb := newProcess(t, 0, nil), newProcess(t, 1, nil)
	a, b := ofiMake(t, pa, pb)
	panicked := false
	t.Cleanup(func() {
		if !panicked { // a panic in Connect may hold epLife, which Close takes
			a.Close()
			b.Close()
		}
	})
	qa, err := a.NewQueuePair()
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.NewQueuePair()
	if err != nil {
		t.Fatal(err)
	}
	// A panic is reported, not left to end the test binary.
	err = func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				panicked, err = true, fmt.Errorf("panic: %v", r)
			}
		}()
		return qa.Connect(endpoint{transport: transportOFI, rank: 1, token: 7}.marshal())
	}()
	if !errors.Is(err, ErrBadEndpoint) {
		t.Fatalf("an ofi endpoint without an address: %v", err)
	}
	if err := qa.Connect(qb.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := qa.Connect(qb.Endpoint()); !errors.Is(err, ErrBadEndpoint) {
		t.Fatalf("a second Connect: %v", err)
	}
}

// TestOFIBuffersRecycled: with two message buffers each way, a stream of
// small writes (sent by fi_inject where the provider allows, else
// fi_send) and messages for a queue pair the receiver does not know (a
// forged token: dropped) keep both sides' buffers in circulation: every
// write completes, and the receiver still hears its real peer.
func TestOFIBuffersRecycled(t *testing.T) {
	cfg := ofiTestConfig("")
	cfg.ReceiveBuffers, cfg.SendBuffers = 2, 2
	a, b := connectPair(t, func(t testing.TB, pa, pb *Process) (Provider, Provider) { return ofiMakeWith(t, pa, pb, cfg) }, nil)
	t.Logf("inject size %d", a.prov.(*ofiProvider).inject)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src, dst := a.mem(t, 0, 8), b.mem(t, 0, 8)
	var cs [4]Completion
	write := func(i int) {
		t.Helper()
		src.Bytes()[0] = byte(i)
		if err := a.qp.Post(WorkRequest{Op: OpWrite, WRID: uint64(i), Signaled: true, Local: src, Remote: dst.Locator()}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if n, err := a.qp.CQ().Wait(ctx, cs[:1]); err != nil || n != 1 || cs[0].Status != StatusSuccess {
			t.Fatalf("write %d never completed: %v %+v", i, err, cs[0])
		}
	}
	for i := 0; i < 50; i++ {
		write(i)
	}
	// A second queue pair from a, whose messages name a token b has
	// never issued.
	qa, err := a.prov.NewQueuePair()
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.prov.NewQueuePair()
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.Connect(qb.Endpoint()); err != nil {
		t.Fatal(err)
	}
	forged := qa.(*ofiQP)
	forged.peerToken.Store(forged.peerToken.Load() ^ 0x5a5a)
	for i := 0; i < 20; i++ {
		forged.wmu.Lock()
		for {
			if _, err := forged.send([]byte("stray")); err == nil {
				break
			} else if err != unix.EAGAIN || ctx.Err() != nil {
				forged.wmu.Unlock()
				t.Fatalf("stray message %d: %v (no send buffer came back: %v)", i, err, ctx.Err())
			}
			time.Sleep(time.Millisecond)
		}
		forged.wmu.Unlock()
	}
	for i := 50; i < 100; i++ {
		write(i)
	}
	if got := dst.Bytes()[0]; got != 99 {
		t.Fatalf("the last write left %d, want 99", got)
	}
}

// TestOFISlowOperatorNotLost: a peer whose engine is inside a long
// Operator still answers probes, so a call that takes four times
// PeerTimeout completes instead of failing its queue pair as lost, and
// the queue pair works after it.
func TestOFISlowOperatorNotLost(t *testing.T) {
	cfg := ofiTestConfig("")
	cfg.PeerTimeout = 200 * time.Millisecond
	a, b := connectPair(t, func(t testing.TB, pa, pb *Process) (Provider, Provider) { return ofiMakeWith(t, pa, pb, cfg) }, nil)
	const slow = 800 * time.Millisecond
	b.proc.SetOperator(func(src uint32, req, reply []byte) int {
		if len(req) > 0 && req[0] == 1 {
			time.Sleep(slow) // stands for a long computation
		}
		return copy(reply, req)
	})
	req := a.mem(t, 0, 8)
	for i, first := range []byte{1, 0} {
		req.Bytes()[0] = first
		start := time.Now()
		c := post(t, a.qp, WorkRequest{Op: OpCall, WRID: uint64(i), Local: req, Result: a.mem(t, 64, 8)})
		if c.Status != StatusSuccess || c.Bytes != 8 {
			t.Fatalf("call %d (first byte %d) after %v: %+v (%v)", i, first, time.Since(start).Round(time.Millisecond), c, c.Err())
		}
		if first == 1 && time.Since(start) < slow {
			t.Fatalf("the slow call returned after %v, before its Operator's %v", time.Since(start), slow)
		}
	}
}
