package shuffle

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/internal/jobtest"
)

// wiringResult is what each process of TestWiring reports to rank 0: the
// records it sent per destination endpoint and received per local one.
type wiringResult struct {
	Rank int
	Sent [][2]uint64 // by destination: count, checksum
	Got  [][2]uint64 // by local receive endpoint
	Err  string
}

// wiringCase is a job of TestWiring: the transport dsfabric chooses, the
// endpoints per process, the design, and whether two stages share a Mesh.
type wiringCase struct {
	transport string
	e         int
	design    Design
	mesh      bool // two stages at once over one Mesh
}

// wiringCases are TestWiring's jobs; builds with -tags ofi add ofi ones
// (transports_ofi_test.go).
var wiringCases = []wiringCase{{"", 1, WR, false}, {"tcp", 2, RD, false}, {"", 2, SR, false}, {"tcp", 1, SR, false}, {"", 2, WR, true}, {"tcp", 1, RD, true}}

// jobTransports are the dsfabric transports of the other job tests ("":
// automatic, shm on one machine); builds with -tags ofi add "ofi".
var jobTransports = []string{"", "tcp"}

// TestWiring: a job of two self-launched processes wires its endpoints
// through dsfabric (shm, and tcp with one endpoint per thread) and
// repartitions every thread's records: each receive endpoint gets exactly
// what was sent to it, checked at rank 0 from every process's counts.
func TestWiring(t *testing.T) {
	for _, tc := range wiringCases {
		name := fmt.Sprintf("%s-%d-%v", tc.transport, tc.e, tc.design)
		if tc.mesh {
			name += "-mesh"
		}
		t.Run(name, func(t *testing.T) {
			const procs, threads, perThread = 2, 2, 400
			// About a second's work, under -race on two cores: a stream
			// that does not end fails in 30 s rather than hanging for minutes.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h := dsfabric.NewHandlers()
			w, err := NewWiring(h)
			if err != nil {
				t.Fatal(err)
			}
			results := make(chan wiringResult, procs)
			hRes, err := h.Register("test.result", func(c *dsfabric.Call, args []byte) ([]byte, error) {
				var r wiringResult
				if err := json.Unmarshal(args, &r); err != nil {
					return nil, err
				}
				results <- r
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			f := startFabric(t, ctx, h, procs, threads, tc.transport)
			defer f.Close()
			res := wiringResult{Rank: f.Rank()}
			cfg := Config{Design: tc.design, BufferBytes: 2048, Depth: 4}
			stages := 1
			if tc.mesh {
				stages = 2
			}
			// A Close that fails fails the test too: the close handshake
			// must leave every rank's connections working until all are done.
			closeInto := func(err *error, c func(context.Context) error) {
				if cerr := c(ctx); *err == nil && cerr != nil {
					*err = fmt.Errorf("close: %w", cerr)
				}
			}
			err = func() (err error) {
				if !tc.mesh {
					var eps *Endpoints
					if eps, err = w.Connect(ctx, f, cfg, tc.e, threads/tc.e); err != nil {
						return err
					}
					defer closeInto(&err, eps.Close)
					res.Sent, res.Got, err = repartitionHere(ctx, eps, f.Rank(), threads, perThread)
					return err
				}
				// Two stages live at once over the mesh's one connection per
				// pair of processes; their tallies add up.
				m, err := w.Mesh(ctx, f)
				if err != nil {
					return err
				}
				defer closeInto(&err, m.Close)
				var eps [2]*Endpoints
				for k := range eps {
					if eps[k], err = m.Stage(ctx, cfg, tc.e, threads/tc.e); err != nil {
						return err
					}
					defer closeInto(&err, eps[k].Close)
				}
				var sent, got [2][][2]uint64
				var errs [2]error
				var wg sync.WaitGroup
				for k := range eps {
					wg.Add(1)
					go func() {
						defer wg.Done()
						sent[k], got[k], errs[k] = repartitionHere(ctx, eps[k], f.Rank(), threads, perThread)
					}()
				}
				wg.Wait()
				if err := errors.Join(errs[:]...); err != nil {
					return err
				}
				res.Sent, res.Got = sent[0], got[0]
				for d := range sent[1] {
					res.Sent[d][0] += sent[1][d][0]
					res.Sent[d][1] += sent[1][d][1]
				}
				for e := range got[1] {
					res.Got[e][0] += got[1][e][0]
					res.Got[e][1] += got[1][e][1]
				}
				return nil
			}()
			if err != nil {
				res.Err = err.Error()
			}
			b, _ := json.Marshal(res)
			src := dsfabric.ThreadID(f.Rank() * threads)
			if _, err := f.CallServiceReturn(ctx, src, 0, hRes, b); err != nil {
				t.Fatal(err)
			}
			if f.Rank() != 0 {
				return
			}
			var all []wiringResult
			for len(all) < procs {
				select {
				case r := <-results:
					if r.Err != "" {
						t.Fatalf("rank %d: %s", r.Rank, r.Err)
					}
					all = append(all, r)
				case <-ctx.Done():
					t.Fatalf("%d of %d results", len(all), procs)
				}
			}
			want := make([][2]uint64, procs*tc.e)
			for _, r := range all {
				for d, s := range r.Sent {
					want[d][0] += s[0]
					want[d][1] += s[1]
				}
			}
			total := uint64(0)
			for _, r := range all {
				for e, g := range r.Got {
					d := r.Rank*tc.e + e
					if g != want[d] {
						t.Errorf("endpoint %d got %d records (sum %x), want %d (%x)", d, g[0], g[1], want[d][0], want[d][1])
					}
					total += g[0]
				}
			}
			if total != uint64(stages*procs*threads*perThread) {
				t.Errorf("%d records arrived, want %d", total, stages*procs*threads*perThread)
			}
		})
	}
}

// repartitionHere runs this process's threads: each shuffles perThread
// records over the job's endpoints and receives from its own.
func repartitionHere(ctx context.Context, eps *Endpoints, rank, threads, perThread int) (sent, got [][2]uint64, err error) {
	E := len(eps.Senders)
	ndest := eps.Senders[0].Dests()
	sent, got = make([][2]uint64, ndest), make([][2]uint64, E)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 2*threads)
	for th := 0; th < threads; th++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			sh, err := eps.Senders[th%E].NewShuffle(Repartition(ndest))
			if err != nil {
				errs <- err
				return
			}
			for i := 0; i < perThread; i++ {
				d := hashDest(rank, th, i, ndest)
				rec := record(rank, th, i, d)
				if err := sh.Put(ctx, d, rec); err != nil {
					errs <- err
					return
				}
				var tl tally
				tl.add(rec)
				mu.Lock()
				sent[d][0]++
				sent[d][1] += tl.sum
				mu.Unlock()
			}
			if err := sh.Close(ctx); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			err := eps.Receivers[th%E].NewReceive().Each(ctx, func(rec []byte) error {
				if d := int(binary.LittleEndian.Uint32(rec[12:])); d != rank*E+th%E {
					return fmt.Errorf("endpoint %d got a record for %d", rank*E+th%E, d)
				}
				var tl tally
				tl.add(rec)
				mu.Lock()
				got[th%E][0]++
				got[th%E][1] += tl.sum
				mu.Unlock()
				return nil
			})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		return nil, nil, e
	}
	return sent, got, nil
}

// TestMeshCloseWaitsForPeers: Mesh.Close holds the connections until every
// peer has closed its mesh too. Rank 1 closes at once; rank 0 first uses
// its connection to rank 1 again, well after (a probe, as a waiting
// endpoint sends every probeEvery), and that must still complete. Without
// the close handshake rank 1's connection was gone and the probe failed:
// the ErrPeerLost TestShuffleSmoke met over tcp now and then.
func TestMeshCloseWaitsForPeers(t *testing.T) {
	for _, transport := range jobTransports {
		t.Run("transport="+transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h := dsfabric.NewHandlers()
			w, err := NewWiring(h)
			if err != nil {
				t.Fatal(err)
			}
			// Room for every message rank 1 sends (closing, Close's error,
			// closed): when rank 0 fails and stops reading, the handler
			// must not block rank 0's service thread, or rank 1's next
			// call and rank 0's closing barrier wait for each other.
			closed := make(chan string, 3)
			hClosed, err := h.Register("test.closed", func(c *dsfabric.Call, args []byte) ([]byte, error) {
				closed <- string(args)
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			f := startFabric(t, ctx, h, 2, 1, transport)
			defer f.Close()
			m, err := w.Mesh(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			say := func(msg string) {
				if _, err := f.CallServiceReturn(ctx, 1, 0, hClosed, []byte(msg)); err != nil {
					t.Fatal(err)
				}
			}
			if f.Rank() == 1 {
				say("closing")
				if err := m.Close(ctx); err != nil {
					say(err.Error())
				}
				say("closed")
				return
			}
			if msg := <-closed; msg != "closing" {
				t.Fatalf("rank 1: %s", msg)
			}
			time.Sleep(3 * probeEvery) // rank 1 is in Close by now
			l := &link{}
			l.attach(m.send[1])
			l.probe()
			for end := time.Now().Add(5 * time.Second); l.probing.Load() && l.failed() == nil && time.Now().Before(end); {
				f.Process().Progress()
				l.drain()
				time.Sleep(time.Millisecond)
			}
			if err := l.failed(); err != nil || l.probing.Load() {
				t.Fatalf("rank 0's probe after rank 1 began closing its mesh: failed %v, unanswered %v", err, l.probing.Load())
			}
			if err := m.Close(ctx); err != nil {
				t.Errorf("rank 0's Close: %v", err)
			}
			if err := m.Close(ctx); err != nil { // again: nothing left to wait for
				t.Errorf("rank 0's second Close: %v", err)
			}
			sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
			defer scancel()
			if _, err := m.Stage(sctx, Config{Design: WR, BufferBytes: 2048, Depth: 4}, 1, 1); !errors.Is(err, ErrClosed) {
				t.Errorf("a stage on a closed mesh: %v, want ErrClosed", err)
			}
			if msg := <-closed; msg != "closed" {
				t.Errorf("rank 1's Close: %s", msg)
			}
		})
	}
}

// startFabric starts a self-launched job of procs processes for the
// test (the caller closes it).
func startFabric(t *testing.T, ctx context.Context, h *dsfabric.Handlers, procs, threads int, transport string) *dsfabric.Fabric {
	t.Helper()
	f, err := dsfabric.Start(ctx, dsfabric.Config{Procs: procs, ThreadsPerProcess: threads, Transport: transport, Handlers: h, Args: jobtest.RunArgs(t), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// wiredFabric starts a job of procs processes whose handlers hold a
// Wiring, on the default transport; the job closes with the test.
func wiredFabric(t *testing.T, ctx context.Context, procs, threads int) (*Wiring, *dsfabric.Fabric) {
	t.Helper()
	h := dsfabric.NewHandlers()
	w, err := NewWiring(h)
	if err != nil {
		t.Fatal(err)
	}
	f := startFabric(t, ctx, h, procs, threads, "")
	t.Cleanup(func() { f.Close() })
	return w, f
}

// TestWiringMismatch: processes that call Connect with different numbers
// of endpoints (every process must pass the same) get ErrBadOffer, not a
// crash or a half-wired stage.
func TestWiringMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, f := wiredFabric(t, ctx, 2, 2)
	eps, err := w.Connect(ctx, f, Config{Design: WR, BufferBytes: 2048, Depth: 4}, 1+f.Rank(), 1)
	if err == nil {
		eps.Close(ctx)
	}
	if !errors.Is(err, ErrBadOffer) || !strings.Contains(err.Error(), "endpoints") {
		t.Fatalf("rank %d: Connect with %d endpoints against a peer with %d: %v, want ErrBadOffer", f.Rank(), 1+f.Rank(), 2-f.Rank(), err)
	}
}

// TestWiringRefusals: a stage of no endpoints or no users, and an SR stage
// over a mesh (SR endpoints need processes of their own), are refused with
// ErrBadConfig before anything is sent; the mesh then still wires a stage.
func TestWiringRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, f := wiredFabric(t, ctx, 2, 1)
	cfg := Config{Design: WR, BufferBytes: 2048, Depth: 4}
	for _, c := range [][2]int{{0, 1}, {1, 0}} {
		if _, err := w.Connect(ctx, f, cfg, c[0], c[1]); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Connect with %d endpoints and %d users: %v, want ErrBadConfig", c[0], c[1], err)
		}
	}
	m, err := w.Mesh(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if _, err := m.Stage(ctx, Config{Design: SR, BufferBytes: 2048, Depth: 4}, 1, 1); !errors.Is(err, ErrBadConfig) {
		t.Errorf("an SR stage over a mesh: %v, want ErrBadConfig", err)
	}
	eps, err := m.Stage(ctx, cfg, 1, 1)
	if err != nil {
		t.Fatalf("a WR stage after the refusals: %v", err)
	}
	if err := eps.Close(ctx); err != nil {
		t.Errorf("closing the stage: %v", err)
	}
}
