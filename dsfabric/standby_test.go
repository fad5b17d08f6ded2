package dsfabric

import (
	"context"
	"testing"
	"time"
)

// TestSection3_2_ServiceThreadStandsByLonger: while every worker sleeps in
// Serve, the service thread checks on them at growing intervals (20 ms,
// doubled at each check, up to a second: a fixed 20 ms was half of an
// idle process's CPU time). A worker that wakes during a long interval
// rings it, so a handler the worker gets stuck in is noticed at once, and
// the service thread routes the process's arrivals — a service call here
// — while it runs.
func TestSection3_2_ServiceThreadStandsByLonger(t *testing.T) {
	type look struct {
		d     time.Duration
		woken bool
	}
	looks := make(chan look, 1024)
	entered, release := make(chan struct{}), make(chan struct{})
	var hBlock, hSvc HandlerID
	reg := func(h *Handlers) {
		hBlock, _ = h.Register("block", func(*Call, []byte) ([]byte, error) {
			close(entered)
			<-release
			return nil, nil
		})
		hSvc, _ = h.Register("svc", func(*Call, []byte) ([]byte, error) { return []byte("ok"), nil })
	}
	cfg := Config{Procs: 1, standingBy: func(d time.Duration, woken bool) {
		select {
		case looks <- look{d, woken}:
		default:
		}
	}}
	jobWith(t, cfg, reg, func(t *testing.T, f *Fabric) {
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		next := func(what string) look {
			t.Helper()
			select {
			case l := <-looks:
				return l
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the service thread set no interval in 10 s", what)
			}
			return look{}
		}
		// The worker sleeps: the intervals grow to 640 ms (after 620 ms).
		prev := next("idle")
		for i := 0; prev.d < 640*time.Millisecond; i++ {
			if i == 30 {
				t.Fatalf("after 30 checks the interval is %v, short of 640 ms", prev.d)
			}
			l := next("idle")
			if l.woken {
				t.Fatalf("a wake-up reported while no worker had anything to do: %+v", l)
			}
			if prev.d >= svcCheck && l.d != min(2*prev.d, svcCheckMax) && l.d > svcCheck {
				t.Fatalf("an interval of %v was followed by one of %v", prev.d, l.d)
			}
			prev = l
		}
		// The worker wakes for a call and stays in its handler.
		me, _ := f.Names().Thread(0, 0)
		if err := f.Call(me, me, hBlock, nil, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the worker never ran the call")
		}
		if l := next("after the wake-up"); !l.woken || l.d > time.Millisecond {
			t.Fatalf("after a worker woke the service thread set %+v; want a 1 ms check set by the wake-up, not the end of its %v interval", l, prev.d)
		}
		// The worker is stuck: the service thread routes the service call.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if b, err := f.CallServiceReturn(ctx, me, 0, hSvc, nil); err != nil || string(b) != "ok" {
			t.Fatalf("service call while the only worker is stuck: %q, %v", b, err)
		}
		close(release)
	})
}
