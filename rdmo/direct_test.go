package rdmo

import (
	"errors"
	"testing"
	"time"
)

// Direct mode (§3.1's "the initiator itself", over shared memory): where a
// client runs an RDMO, and the checks it keeps when it runs it itself.

// forDirectTransports runs f over the transports in direct mode.
func forDirectTransports(t *testing.T, f func(t *testing.T, tr testTransport)) {
	for _, tr := range testTransports {
		if tr.direct {
			t.Run(tr.name, func(t *testing.T) { f(t, tr) })
		}
	}
}

func directWorld(t *testing.T, tr testTransport) (*world, Capability, []byte) {
	w := newWorld(t, tr, worldConfig{})
	mem, _ := w.instance(t, 0, accumHeader+8*4)
	if err := InitAccumulator(mem.Bytes(), []uint64{0, 1}, 2); err != nil {
		t.Fatal(err)
	}
	return w, w.create(t, AccumulatorType, mem), mem.Bytes()
}

// TestSection3_1_Direct: over a transport that shares memory, with an
// engine and a client that allow it, a Direct method runs in the client
// (no RDMO after the one describe), engine codes are the engine's (unknown
// method, input too large, revoked capability, closed engine), a lock-taking
// method still goes to the engine, and a target that is gone is
// ErrTargetLost.
func TestSection3_1_Direct(t *testing.T) {
	forDirectTransports(t, func(t *testing.T, tr testTransport) {
		w, acc, mem := directWorld(t, tr)
		ctx := testCtx(t)
		c := w.initiator[0].client
		for i := 0; i < 100; i++ {
			if _, code, err := c.ScatterAndAccumulate(ctx, acc, []KeyDelta{{0, 1}, {1, 2}}); code != OK || err != nil {
				t.Fatal(code, err)
			}
		}
		if got := Accumulators(mem); got[0] != 100 || got[1] != 200 {
			t.Fatalf("accumulators %v after 100 direct RDMOs, want [100 200]", got)
		}
		if s := c.Stats(); s.Direct != 100 || s.Engine != 1 {
			t.Fatalf("stats %+v, want 100 direct and 1 engine RDMO (the describe)", s)
		}
		// Engine codes, found by the client itself.
		if _, _, err := c.Do(ctx, acc, 7, nil); !errors.Is(err, ErrBadMethod) {
			t.Errorf("unknown method: %v, want ErrBadMethod", err)
		}
		if _, _, err := c.Do(ctx, acc, MethodAccumulate, make([]byte, (MaxAccumulate+1)*keyDeltaBytes)); !errors.Is(err, ErrInputTooLarge) {
			t.Errorf("input past MaxInput: %v, want ErrInputTooLarge", err)
		}
		if _, _, err := c.Do(ctx, acc, MethodAccumulate, make([]byte, 3)); !errors.Is(err, ErrFault) {
			t.Errorf("malformed input: %v, want ErrFault", err)
		}
		if s := c.Stats(); s.Engine != 1 {
			t.Fatalf("stats %+v: the client asked the engine again", s)
		}
		// A wrong secret is never run directly: the engine refuses it.
		bad := acc
		bad.Secret ^= 1
		if _, _, err := c.Do(ctx, bad, MethodAccumulate, appendLE(nil, 0, 1)); !errors.Is(err, ErrBadCapability) {
			t.Errorf("wrong secret: %v, want ErrBadCapability", err)
		}
		// A lock-taking method goes to the engine.
		rmem, _ := w.instance(t, 4096, recordHeader+64)
		if err := InitLockedRecord(rmem.Bytes()); err != nil {
			t.Fatal(err)
		}
		rec := w.create(t, LockedRecordType, rmem)
		before := c.Stats()
		if code, _, err := c.SignaledRead(ctx, rec, 4, nil); code != OK || err != nil {
			t.Fatal(code, err)
		}
		if s := c.Stats(); s.Direct != before.Direct || s.Engine != before.Engine+2 {
			t.Fatalf("SignaledRead: stats %+v after %+v, want 2 more engine RDMOs (describe, read)", s, before)
		}
		// Async RDMOs run directly too.
		if err := c.Start(ctx, acc, MethodAccumulate, appendLE(nil, 1, 5), 42); err != nil {
			t.Fatal(err)
		}
		var res [1]Result
		if n, err := c.Wait(ctx, res[:]); n != 1 || err != nil || res[0].Tag != 42 || res[0].Code != OK {
			t.Fatalf("async direct RDMO: %d %v %+v", n, err, res[0])
		}
		// Revocation reaches a client that mapped the instance.
		if err := w.engine.Revoke(acc); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Do(ctx, acc, MethodAccumulate, appendLE(nil, 0, 1)); !errors.Is(err, ErrBadCapability) {
			t.Errorf("after Revoke: %v, want ErrBadCapability", err)
		}
		if got := Accumulators(mem); got[0] != 100 || got[1] != 205 {
			t.Fatalf("accumulators %v, want [100 205]: a refused RDMO ran", got)
		}
		// So does closing the engine.
		mem2, _ := w.instance(t, 8192, accumHeader+16)
		if err := InitAccumulator(mem2.Bytes(), []uint64{0}, 1); err != nil {
			t.Fatal(err)
		}
		acc2 := w.create(t, AccumulatorType, mem2)
		if _, code, err := c.ScatterAndAccumulate(ctx, acc2, []KeyDelta{{0, 1}}); code != OK || err != nil {
			t.Fatal(code, err)
		}
		w.engine.Close()
		if _, _, err := c.Do(ctx, acc2, MethodAccumulate, appendLE(nil, 0, 1)); !errors.Is(err, ErrBadCapability) {
			t.Errorf("after the engine closed: %v, want ErrBadCapability", err)
		}
		if s := c.Stats(); s.Direct < 105 {
			t.Fatalf("stats %+v: the refusals above were not the client's own", s)
		}
	})
}

// TestDirectTargetLost: once the target's end of the queue pair is gone, a
// direct RDMO is ErrTargetLost, as one sent to the engine would be.
func TestDirectTargetLost(t *testing.T) {
	forDirectTransports(t, func(t *testing.T, tr testTransport) {
		w, acc, _ := directWorld(t, tr)
		ctx := testCtx(t)
		c := w.initiator[0].client
		if _, code, err := c.ScatterAndAccumulate(ctx, acc, []KeyDelta{{0, 1}}); code != OK || err != nil {
			t.Fatal(code, err)
		}
		w.tqps[0].Close()
		var err error
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if _, _, err = c.Do(ctx, acc, MethodAccumulate, appendLE(nil, 0, 1)); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrTargetLost) {
			t.Fatalf("after the target's queue pair closed: %v, want ErrTargetLost", err)
		}
	})
}

// TestDirectFallsBack: direct mode needs all of shared memory, an engine
// that allows it and a client that knows the type; without any one of
// them RDMOs go to the engine and give the same results.
func TestDirectFallsBack(t *testing.T) {
	cases := []struct {
		name             string
		tr               testTransport
		engine, register bool
	}{
		{"tcp", testTransports[2], true, true},
		{"engine-refuses", testTransport{name: "shm", make: shmProvider}, false, true},
		{"type-unknown", testTransport{name: "shm", make: shmProvider}, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := tc.tr
			tr.direct = tc.engine
			w := newWorld(t, tr, worldConfig{})
			mem, _ := w.instance(t, 0, accumHeader+16)
			if err := InitAccumulator(mem.Bytes(), []uint64{0}, 1); err != nil {
				t.Fatal(err)
			}
			acc := w.create(t, AccumulatorType, mem)
			in := w.initiator[0]
			c, err := NewClient(in.proc, ClientConfig{Direct: true}, in.client.conns[0].qp)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tc.register {
				if err := RegisterBuiltins(c); err != nil {
					t.Fatal(err)
				}
			}
			ctx := testCtx(t)
			for i := 0; i < 10; i++ {
				if _, code, err := c.ScatterAndAccumulate(ctx, acc, []KeyDelta{{0, 3}}); code != OK || err != nil {
					t.Fatal(code, err)
				}
			}
			if got := Accumulators(mem.Bytes())[0]; got != 30 {
				t.Fatalf("sum %d, want 30", got)
			}
			if s := c.Stats(); s.Direct != 0 || s.Engine < 10 || s.Engine > 11 {
				t.Fatalf("stats %+v, want 10 RDMOs at the engine (and at most one describe)", s)
			}
		})
	}
}

// TestClientRegister: a client refuses what an engine would.
func TestClientRegister(t *testing.T) {
	w := newWorld(t, testTransports[0], worldConfig{})
	c := w.initiator[0].client
	if err := RegisterBuiltins(c); err != nil {
		t.Fatal(err)
	}
	if err := RegisterBuiltins(c); !errors.Is(err, ErrBadType) {
		t.Fatalf("second registration: %v, want ErrBadType", err)
	}
	if err := c.Register(Type{Name: "x", Methods: []Method{{Name: "nobody", MaxCost: 1}}}); !errors.Is(err, ErrBadType) {
		t.Fatalf("method without a body: %v, want ErrBadType", err)
	}
}
