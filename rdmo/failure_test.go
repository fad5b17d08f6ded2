package rdmo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seriema-go/seriema/alloc"
	"github.com/seriema-go/seriema/dtutils"
)

// Tests of §3.1's failure model: every way an RDMO can be refused or lost
// reaches the initiator as a distinct error, and nothing hangs.

// testType has methods that break their bounds on purpose, and one that
// holds the engine until released (only a test may block a method).
func testType(release <-chan struct{}, entered chan<- struct{}) Type {
	return Type{Name: "test", MinSize: 8, Methods: []Method{
		{Name: "echo", MaxInput: 16, MaxOutput: 16, MaxCost: 4, Body: func(x *Ctx, in, out []byte) (Code, int) {
			return OK, copy(out, in)
		}},
		{Name: "spin", MaxInput: 0, MaxOutput: 0, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			for {
				x.Step()
			}
		}},
		{Name: "stray", MaxInput: 0, MaxOutput: 0, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			return OK, int(x.Load(x.Len()))
		}},
		{Name: "panic", MaxInput: 0, MaxOutput: 0, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			panic("boom")
		}},
		{Name: "hold", MaxInput: 0, MaxOutput: 0, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			entered <- struct{}{}
			<-release
			return OK, 0
		}},
		{Name: "engine-code", MaxInput: 0, MaxOutput: 0, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			return CodeBadMethod, 0 // a method may not claim an engine code
		}},
		{Name: "steps", MaxInput: 0, MaxOutput: 0, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			for i := 0; i < 1000; i++ { // ten times its budget, then it would return
				x.Step()
			}
			return OK, 0
		}},
		{Name: "fill", MaxInput: 0, MaxOutput: 4, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			for i := range out { // the room it is given, which is MaxOutput at most
				out[i] = 0xa5
			}
			return OK, len(out)
		}},
		{Name: "overclaim", MaxInput: 0, MaxOutput: 4, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			return OK, len(out) + 1
		}},
		{Name: "read-past-end", MaxInput: 0, MaxOutput: 0, MaxCost: 100, Body: func(x *Ctx, in, out []byte) (Code, int) {
			var b [8]byte
			x.Read(x.Len()-4, b[:])
			return OK, 0
		}},
	}}
}

// testInstance registers testType on w's engine and creates an instance
// of it at the start of w's memory: its capability, and the channels of
// its hold method.
func testInstance(t *testing.T, w *world) (good Capability, release, entered chan struct{}) {
	t.Helper()
	release, entered = make(chan struct{}), make(chan struct{}, 4)
	if err := w.engine.Register(testType(release, entered)); err != nil {
		t.Fatal(err)
	}
	m, _ := w.instance(t, 0, 64)
	return w.create(t, "test", m), release, entered
}

func TestSection3_1_Failures(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{initiators: 3, procCfg: func(c *dtutils.ProcessConfig) { c.CallSlots = 2 }})
		ctx := testCtx(t)
		good, release, entered := testInstance(t, w)
		c := w.initiator[0].client
		check := func(what string, cp Capability, method uint16, in []byte, wantCode Code, wantErr error) {
			t.Helper()
			code, _, err := c.Do(ctx, cp, method, in)
			if code != wantCode || !errors.Is(err, wantErr) {
				t.Errorf("%s: code %v err %v; want %v, %v", what, code, err, wantCode, wantErr)
			}
		}
		if code, out, err := c.Do(ctx, good, 0, []byte("hello")); code != OK || err != nil || string(out) != "hello" {
			t.Fatalf("echo: %v %q %v", code, out, err)
		}
		wrong := good
		wrong.Secret ^= 1
		check("wrong secret", wrong, 0, nil, CodeBadCapability, ErrBadCapability)
		check("unknown id", Capability{Process: 0, ID: good.ID + 1000, Secret: good.Secret}, 0, nil, CodeBadCapability, ErrBadCapability)
		check("unknown method", good, 99, nil, CodeBadMethod, ErrBadMethod)
		check("input beyond MaxInput", good, 0, make([]byte, 17), CodeInputTooLarge, ErrInputTooLarge)
		// Before the endless spin, which a budget that does not stop it
		// would turn into a hang (so fatal): a method that would return
		// after ten times its budget is stopped at its budget.
		if code, _, err := c.Do(ctx, good, 6, nil); code != CodeOverBudget || !errors.Is(err, ErrOverBudget) {
			t.Fatalf("a method running ten times its budget: %v %v; want %v, %v", code, err, CodeOverBudget, ErrOverBudget)
		}
		check("over budget", good, 1, nil, CodeOverBudget, ErrOverBudget)
		if code, out, err := c.Do(ctx, good, 7, nil); code != OK || err != nil || len(out) != 4 {
			t.Errorf("a method filling its output: %v, %d bytes, %v; want OK and MaxOutput (4) bytes", code, len(out), err)
		}
		check("more output claimed than room", good, 8, nil, CodeFault, ErrFault)
		check("a read across the instance's end", good, 9, nil, CodeFault, ErrFault)
		check("out of bounds", good, 2, nil, CodeFault, ErrFault)
		check("panic", good, 3, nil, CodeFault, ErrFault)
		check("engine code from a method", good, 5, nil, CodeFault, ErrFault)
		if _, _, err := c.Do(ctx, good, 0, make([]byte, c.MaxInput()+1)); !errors.Is(err, ErrInputTooLarge) {
			t.Errorf("input beyond CallBytes: %v", err)
		}
		if _, _, err := c.Do(ctx, Capability{Process: 42}, 0, nil); !errors.Is(err, ErrNoRoute) {
			t.Errorf("capability of an unknown process: %v", err)
		}
		// The engine still serves after all that.
		if code, _, err := c.Do(ctx, good, 0, nil); code != OK || err != nil {
			t.Fatalf("echo after failures: %v %v", code, err)
		}

		// Over ofi, one endpoint has one engine: a held method would hold
		// every connection, and peers' probes then declare it lost.
		// Methods may not block; only this test's does.
		if w.tprov.Transport() != "ofi" {
			checkBusy(t, ctx, w, good, c, release, entered)
		}
		// Revocation: later RDMOs are refused.
		if err := w.engine.Revoke(good); err != nil {
			t.Fatal(err)
		}
		check("revoked", good, 0, nil, CodeBadCapability, ErrBadCapability)
		if err := w.engine.Revoke(good); !errors.Is(err, ErrBadCapability) {
			t.Errorf("second revoke: %v", err)
		}

		// Target death: its transport closes; RDMOs fail, none hang.
		w.tprov.Close()
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var err error
		for err == nil {
			_, _, err = c.Do(dctx, good, 0, nil)
			if errors.Is(err, ErrBadCapability) {
				err = nil // loop: the target's process state lives on in-process
				time.Sleep(5 * time.Millisecond)
			}
		}
		if !errors.Is(err, ErrTargetLost) {
			t.Errorf("RDMO to a closed target: %v", err)
		}
	})
}

// TestRevokeWaitsForRunning (§3.1, revocation): Revoke returns only once
// the RDMO the engine is running on the instance has finished, so the
// memory is the owner's when it returns; memory released without Revoke
// revokes its instances the same way, and later RDMOs are refused with
// CodeBadCapability instead of running on unmapped memory. The engine's
// Close after its process's (whose registry released the revocation words
// first) touches none of them. The test type's methods are not Direct:
// with direct mode too they run at the engine, and its instances have
// revocation words.
func TestRevokeWaitsForRunning(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{})
		ctx := testCtx(t)
		good, release, entered := testInstance(t, w)
		c := w.initiator[0].client
		held := make(chan error, 1)
		go func() {
			code, _, err := c.Do(ctx, good, 4, nil)
			if err == nil && code != OK {
				err = fmt.Errorf("code %v", code)
			}
			held <- err
		}()
		<-entered
		revoked := make(chan error, 1)
		go func() { revoked <- w.engine.Revoke(good) }()
		select {
		case err := <-revoked:
			close(release)
			t.Fatalf("Revoke returned (%v) while an RDMO still ran on the instance", err)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		if err := <-revoked; err != nil {
			t.Fatal(err)
		}
		if err := <-held; err != nil {
			t.Errorf("the RDMO admitted before the revocation: %v", err)
		}

		r, err := w.target.Registry().NewRegion(4096, alloc.RegionConfig{Name: "released-instance"})
		if err != nil {
			t.Fatal(err)
		}
		m2, _ := r.Memory(0, 64)
		other := w.create(t, "test", m2)
		if code, _, err := c.Do(ctx, other, 0, []byte("x")); code != OK || err != nil {
			t.Fatalf("echo before the release: %v %v", code, err)
		}
		if err := w.target.Registry().Release(r); err != nil {
			t.Fatal(err)
		}
		if code, _, err := c.Do(ctx, other, 0, []byte("x")); code != CodeBadCapability || !errors.Is(err, ErrBadCapability) {
			t.Errorf("an RDMO on released memory: %v %v, want CodeBadCapability", code, err)
		}
		if err := w.engine.Revoke(other); !errors.Is(err, ErrBadCapability) {
			t.Errorf("Revoke after the release: %v, want ErrBadCapability (the release revoked it)", err)
		}

		last, _ := w.instance(t, 64, 64)
		w.create(t, "test", last)
		if tr.direct {
			// A closing process releases its regions in any order: here
			// the revocation words go first, then the instance's memory.
			w.engine.mu.Lock()
			words := w.engine.valid.regions[0]
			w.engine.mu.Unlock()
			if err := w.target.Registry().Release(words); err != nil {
				t.Fatal(err)
			}
		}
		w.tprov.Close()
		if err := w.target.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.engine.Close(); err != nil {
			t.Errorf("the engine's Close after its process's: %v", err)
		}
	})
}

func TestNoEngine(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{noEngine: true})
		_, _, err := w.initiator[0].client.Do(testCtx(t), Capability{Process: 0, ID: 1}, 0, nil)
		if !errors.Is(err, ErrNoEngine) {
			t.Fatalf("RDMO to a process without engine: %v", err)
		}
	})
}

func TestRegistrationRefusals(t *testing.T) {
	w := newWorld(t, testTransports[0], worldConfig{})
	body := func(x *Ctx, in, out []byte) (Code, int) { return OK, 0 }
	for _, tc := range []struct {
		what string
		typ  Type
	}{
		{"no name", Type{Methods: []Method{{MaxCost: 1, Body: body}}}},
		{"no methods", Type{Name: "a"}},
		{"no body", Type{Name: "a", Methods: []Method{{MaxCost: 1}}}},
		{"cost above the engine's", Type{Name: "a", Methods: []Method{{MaxCost: 1 << 20, Body: body}}}},
		{"zero cost", Type{Name: "a", Methods: []Method{{Body: body}}}},
		{"output beyond CallBytes", Type{Name: "a", Methods: []Method{{MaxCost: 1, MaxOutput: 4096, Body: body}}}},
		{"input beyond CallBytes", Type{Name: "a", Methods: []Method{{MaxCost: 1, MaxInput: 4096, Body: body}}}},
		{"duplicate", Type{Name: SlottedPageType, Methods: []Method{{MaxCost: 1, Body: body}}}},
		{"a name of 256 bytes", Type{Name: strings.Repeat("n", maxTypeName+1), Methods: []Method{{MaxCost: 1, Body: body}}}},
		{"too many methods", Type{Name: "a", Methods: slices.Repeat([]Method{{MaxCost: 1, Body: body}}, maxMethods+1)}},
	} {
		if err := w.engine.Register(tc.typ); !errors.Is(err, ErrBadType) {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
	m, _ := w.instance(t, 1, 64)
	if _, err := w.engine.Create(SlottedPageType, m); !errors.Is(err, ErrBadConfig) {
		t.Errorf("misaligned instance: %v", err)
	}
	if _, err := w.engine.Create("nope", m); !errors.Is(err, ErrBadType) {
		t.Errorf("unregistered type: %v", err)
	}
	if _, err := w.engine.Create(SlottedPageType, alloc.Memory{}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("an instance in no memory: %v", err)
	}
	// Memory of another process (an initiator's) is no place for an
	// instance: its RDMOs would run on memory the engine does not own.
	other, err := w.initiator[0].proc.Registry().NewRegion(4096, alloc.RegionConfig{Name: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	om, _ := other.Memory(0, 4096)
	if _, err := w.engine.Create(SlottedPageType, om); !errors.Is(err, ErrBadConfig) {
		t.Errorf("an instance in another process's memory: %v", err)
	}
	if _, err := NewEngine(w.target, EngineConfig{}); err == nil {
		t.Error("a second engine on one process was accepted")
	}
	// Revoke takes only the capability itself: not one naming another
	// process, nor one with another secret; the capability still works.
	pm, _ := w.instance(t, 0, 4096)
	InitSlottedPage(pm.Bytes(), 16)
	c := w.create(t, SlottedPageType, pm)
	for name, bad := range map[string]Capability{
		"another process": {Process: c.Process + 1, ID: c.ID, Secret: c.Secret},
		"another secret":  {Process: c.Process, ID: c.ID, Secret: c.Secret + 1},
	} {
		if err := w.engine.Revoke(bad); !errors.Is(err, ErrBadCapability) {
			t.Errorf("Revoke of a capability with %s: %v, want ErrBadCapability", name, err)
		}
	}
	if _, code, err := w.initiator[0].client.SlottedAppend(testCtx(t), c, tuple(0, 1)); err != nil || code != OK {
		t.Errorf("the capability after refused revokes: %v %v", code, err)
	}
	if err := w.engine.Revoke(c); err != nil {
		t.Errorf("Revoke of the capability itself: %v", err)
	}
	w.engine.Close()
	if _, err := w.engine.Create(SlottedPageType, pm); !errors.Is(err, ErrClosed) {
		t.Errorf("Create on a closed engine: %v, want ErrClosed", err)
	}
}

// TestConfigChecks: the configurations' bounds, refused with ErrBadConfig.
func TestConfigChecks(t *testing.T) {
	const procCallBytes = 4096
	for name, err := range map[string]error{
		"MaxCost over 2^20":                 EngineConfig{MaxCost: maxEngineCost + 1}.VerifyConfig(),
		"MaxInflight over 2^16":             ClientConfig{MaxInflight: 1<<16 + 1}.VerifyConfig(procCallBytes),
		"CallBytes under a header each way": ClientConfig{CallBytes: requestHeader + replyHeader - 1}.VerifyConfig(procCallBytes),
		"CallBytes over the process's":      ClientConfig{CallBytes: procCallBytes + 1}.VerifyConfig(procCallBytes),
	} {
		if !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, err := range map[string]error{
		"engine defaults":         EngineConfig{}.VerifyConfig(),
		"MaxCost 2^20":            EngineConfig{MaxCost: maxEngineCost}.VerifyConfig(),
		"client defaults":         DefaultClientConfig().VerifyConfig(procCallBytes),
		"CallBytes the process's": ClientConfig{CallBytes: procCallBytes}.VerifyConfig(procCallBytes),
	} {
		if err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}

func TestAsync(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{})
		ctx := testCtx(t)
		mem, _ := w.instance(t, 0, accumHeader+8*2)
		if err := InitAccumulator(mem.Bytes(), []uint64{0}, 1); err != nil {
			t.Fatal(err)
		}
		acc := w.create(t, AccumulatorType, mem)
		c := w.initiator[0].client
		const n = 500 // more than MaxInflight: Start waits for room
		in := appendLE(nil, 0, 1)
		got := map[uint64]bool{}
		var res [16]Result
		for i := 0; i < n; i++ {
			for {
				sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
				err := c.Start(sctx, acc, MethodAccumulate, in, uint64(i))
				cancel()
				if err == nil {
					break
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatal(err)
				}
				k := c.Poll(res[:])
				for _, r := range res[:k] {
					got[r.Tag] = r.Err == nil && r.Code == OK && le(r.Output) == 1
				}
			}
		}
		for len(got) < n {
			k, err := c.Wait(ctx, res[:])
			if err != nil {
				t.Fatalf("%d of %d results: %v", len(got), n, err)
			}
			for _, r := range res[:k] {
				got[r.Tag] = r.Err == nil && r.Code == OK && le(r.Output) == 1
			}
		}
		for i := uint64(0); i < n; i++ {
			if !got[i] {
				t.Fatalf("result %d missing or failed", i)
			}
		}
		if s := Accumulators(mem.Bytes())[0]; s != n {
			t.Fatalf("sum %d after %d RDMOs", s, n)
		}
	})
}

func checkBusy(t *testing.T, ctx context.Context, w *world, good Capability, c *Client, release chan struct{}, entered chan struct{}) {
	// Full queue: two RDMOs held in the engine (running over tcp and
	// loop, queued behind the first over shm) fill CallSlots = 2; one
	// more is refused. Which one is refused depends on timing (over shm
	// a probe may queue before the second held RDMO), so every call
	// runs in its own goroutine: at least one must be refused, and
	// every other must succeed once released.
	var wg sync.WaitGroup
	var busy atomic.Int32
	run := func(cl *Client, method uint16) chan struct{} {
		done := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			code, _, err := cl.Do(ctx, good, method, nil)
			switch {
			case errors.Is(err, ErrBusy):
				busy.Add(1)
			case code != OK || err != nil:
				t.Errorf("RDMO %d: %v %v", method, code, err)
			}
		}()
		return done
	}
	run(w.initiator[1].client, 4)
	<-entered
	run(w.initiator[2].client, 4)
	select {
	case <-entered:
	case <-time.After(200 * time.Millisecond): // queued (shm)
	}
	for deadline := time.Now().Add(10 * time.Second); busy.Load() == 0 && time.Now().Before(deadline); {
		select {
		case <-run(c, 0):
		case <-time.After(100 * time.Millisecond): // queued: the queue is full now
		}
	}
	close(release)
	wg.Wait()
	if busy.Load() == 0 {
		t.Error("no RDMO refused while two held the queue of CallSlots 2")
	}

}

// TestClientProcessClosed: the client's process closes (providers first,
// as a job's teardown does) while an RDMO waits at the target. The waiting
// call returns, later calls fail with ErrClosed instead of writing into the
// unmapped request slots (Do faulted before), so does a new client on that
// process, and the client's Close gives
// its memory back, which lets the process unmap everything.
func TestClientProcessClosed(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		w := newWorld(t, tr, worldConfig{})
		ctx := testCtx(t)
		release, entered := make(chan struct{}), make(chan struct{}, 4)
		var releaseOnce sync.Once
		free := func() { releaseOnce.Do(func() { close(release) }) }
		defer free()
		if err := w.engine.Register(testType(release, entered)); err != nil {
			t.Fatal(err)
		}
		m, _ := w.instance(t, 0, 64)
		good := w.create(t, "test", m)
		in := w.initiator[0]
		c := in.client
		held := make(chan error, 1)
		go func() { _, _, err := c.Do(ctx, good, 4, nil); held <- err }() // "hold"
		<-entered
		in.prov.Close()
		if err := in.proc.Close(); err != nil {
			t.Fatal(err)
		}
		loop := strings.HasPrefix(tr.name, "loop")
		if loop {
			// Over loop the method runs on the caller's goroutine: the
			// call in flight is the method itself, and it finishes when
			// the method returns, writing its reply into the client's
			// memory (held, so still mapped).
			free()
		}
		select {
		case err := <-held:
			if loop && err != nil {
				t.Errorf("the RDMO in flight over loop: %v, want it answered", err)
			}
			if !loop && !errors.Is(err, ErrTargetLost) && !errors.Is(err, ErrClosed) {
				t.Errorf("the RDMO in flight: %v, want ErrTargetLost or ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the RDMO in flight still waits 10 s after its process closed")
		}
		if _, _, err := c.Do(ctx, good, 0, []byte("hi")); !errors.Is(err, ErrClosed) {
			t.Errorf("Do after the close: %v, want ErrClosed", err)
		}
		if err := c.Start(ctx, good, 0, []byte("hi"), 1); !errors.Is(err, ErrClosed) {
			t.Errorf("Start after the close: %v, want ErrClosed", err)
		}
		if _, err := c.Wait(ctx, make([]Result, 1)); !errors.Is(err, ErrClosed) {
			t.Errorf("Wait after the close: %v, want ErrClosed", err)
		}
		if c2, err := NewClient(in.proc, ClientConfig{}); !errors.Is(err, ErrClosed) {
			if c2 != nil {
				c2.Close()
			}
			t.Errorf("NewClient on the closed process: %v, want ErrClosed", err)
		}
		regions := func() (n int64) {
			for _, st := range in.proc.Registry().Stats() {
				n += st.Regions
			}
			return n
		}
		if regions() == 0 {
			t.Fatal("the process unmapped the client's memory while the client held it")
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := regions(); n != 0 {
			t.Errorf("%d regions still mapped after the client closed", n)
		}
	})
}

// echoClient returns the client of a world with one initiator and a
// capability for an instance of testType, whose method 0 echoes.
func echoClient(t *testing.T, tr testTransport) (*Client, Capability) {
	w := newWorld(t, tr, worldConfig{})
	if err := w.engine.Register(testType(nil, nil)); err != nil {
		t.Fatal(err)
	}
	m, _ := w.instance(t, 0, 64)
	return w.initiator[0].client, w.create(t, "test", m)
}

// TestAbandonedCallsFreeTheirSlots (§3.1): an initiator that stops
// waiting (its context ends) gives its slot back when the reply comes,
// whether the reply had come before it gave up or comes after; no slot is
// lost, and calls run on after many more abandoned ones than slots.
func TestAbandonedCallsFreeTheirSlots(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		c, good := echoClient(t, tr)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		gone, stop := context.WithCancel(ctx)
		stop()
		var abandoned, answered int
		for i := 0; i < 20*c.cfg.MaxInflight; i++ {
			code, out, err := c.Do(gone, good, 0, []byte("x"))
			switch {
			case errors.Is(err, context.Canceled):
				abandoned++
			case err == nil && code == OK && string(out) == "x":
				answered++
			default:
				t.Fatalf("call %d with an ended context: %v %q %v", i, code, out, err)
			}
		}
		// Waiters whose context ends while another goroutine polls their
		// reply in: some see the reply first, some the end.
		var late atomic.Int64
		for round := 0; round < 20; round++ {
			rctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for rctx.Err() == nil {
						code, out, err := c.Do(rctx, good, 0, []byte("z"))
						switch {
						case errors.Is(err, context.Canceled):
							late.Add(1)
						case err == nil && code == OK && string(out) == "z":
						default:
							t.Errorf("a call whose context ends: %v %q %v", code, out, err)
							return
						}
					}
				}()
			}
			time.Sleep(time.Millisecond)
			stop()
			wg.Wait()
		}
		// The replies of abandoned calls free their slots as they are polled.
		for deadline := time.Now().Add(10 * time.Second); len(c.free) < c.cfg.MaxInflight; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d slots never came back (%d calls abandoned, %d answered, %d abandoned by concurrent waiters)", c.cfg.MaxInflight-len(c.free), c.cfg.MaxInflight, abandoned, answered, late.Load())
			}
			c.Poll(nil)
		}
		for i := 0; i < 3*c.cfg.MaxInflight; i++ {
			if code, out, err := c.Do(ctx, good, 0, []byte("y")); code != OK || err != nil || string(out) != "y" {
				t.Fatalf("call %d after the abandoned ones: %v %q %v", i, code, out, err)
			}
		}
		t.Logf("calls with an ended context: %d abandoned, %d answered; %d abandoned by concurrent waiters", abandoned, answered, late.Load())
	})
}

// TestConcurrentWaitersHandOver (§3.1): goroutines waiting on one
// connection take turns polling it; when the one polling has its reply, it
// hands the polling to another waiter, so no reply waits for a context's
// end.
func TestConcurrentWaitersHandOver(t *testing.T) {
	forTransports(t, func(t *testing.T, tr testTransport) {
		c, good := echoClient(t, tr)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// Rounds of one call per goroutine, all at once and none after:
		// the last replies of a round have no later call to poll them in,
		// only the hand-over.
		const goroutines, rounds = 8, 200
		for round := 0; round < rounds; round++ {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					in := []byte{byte(g), byte(round), byte(round >> 8)}
					<-start
					code, out, err := c.Do(rctx, good, 0, in)
					if code != OK || err != nil || string(out) != string(in) {
						errs <- fmt.Errorf("round %d, goroutine %d: %v %q %v", round, g, code, out, err)
					}
				}(g)
			}
			close(start)
			wg.Wait()
			rcancel()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		}
	})
}

// TestClientOneQueuePairPerProcess: a client routes by process, so two
// queue pairs to one process are refused.
func TestClientOneQueuePairPerProcess(t *testing.T) {
	w := newWorld(t, testTransports[0], worldConfig{})
	in := w.initiator[0]
	a, _ := connect(t, in.prov, w.tprov)
	b, _ := connect(t, in.prov, w.tprov)
	if _, err := NewClient(in.proc, ClientConfig{}, a, b); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("a client with two queue pairs to process 0: %v", err)
	}
}
