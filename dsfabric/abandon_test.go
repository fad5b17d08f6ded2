package dsfabric

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// TestCallReturnAbandoned (paper Table 1, call-and-return): a CallReturn
// whose context ends before its reply returns the context's error at once
// and forgets the call; the reply that comes later is dropped where it
// arrives, not handed to the next call, and every later call gets its
// own result.
func TestCallReturnAbandoned(t *testing.T) {
	var hSlow HandlerID
	reg := func(h *Handlers) {
		// args: a u32 delay in milliseconds, then anything, echoed back.
		hSlow, _ = h.Register("slow", func(c *Call, args []byte) ([]byte, error) {
			time.Sleep(time.Duration(binary.LittleEndian.Uint32(args)) * time.Millisecond)
			return args[4:], nil
		})
	}
	call := func(ms uint32, s string) []byte { return append(binary.LittleEndian.AppendUint32(nil, ms), s...) }
	job(t, 2, 1, "shm", reg, func(t *testing.T, f *Fabric) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if f.Rank() == 0 {
			me, _ := f.Names().Thread(0, 0)
			peer, _ := f.Names().Thread(1, 0)
			short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
			start := time.Now()
			_, err := f.CallReturn(short, me, peer, hSlow, call(1000, "first"))
			cancelShort()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a call past its deadline: %v, want context.DeadlineExceeded", err)
			}
			if took := time.Since(start); took > 800*time.Millisecond {
				t.Errorf("the abandoned call returned after %v, not when its context ended", took)
			}
			if n := f.pending.Size(); n != 0 {
				t.Errorf("%d calls still pending after the abandoned one returned", n)
			}
			// Queued behind the slow one at the callee: its reply comes
			// right after the abandoned call's.
			for i, s := range []string{"second", "third"} {
				got, err := f.CallReturn(ctx, me, peer, hSlow, call(0, s))
				if err != nil || string(got) != s {
					t.Fatalf("call %d after the abandoned one: %q, %v; want %q", i+2, got, err, s)
				}
			}
			if n := f.pending.Size(); n != 0 {
				t.Errorf("%d calls pending at the end", n)
			}
		}
		if err := f.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
