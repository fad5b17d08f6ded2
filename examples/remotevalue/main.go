// Command remotevalue calls a typed handler one-sided and gets a typed
// result back: thread 0 asks thread 1, in the other process, for the
// statistics of a slice of numbers. The arguments travel encoded (msgpack,
// by dsfabric.RegisterTyped), the result is written straight into a
// RemoteValue in thread 0's memory, which thread 0 waits on.
//
//	go run ./examples/remotevalue
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/riutils"
)

// Stats is the typed result.
type Stats struct {
	N        int
	Min, Max float64
	Mean     float64
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "remotevalue:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	h := dsfabric.NewHandlers()
	stats, _ := dsfabric.RegisterTyped(h, "stats", func(c *dsfabric.Call, xs []float64) (Stats, error) {
		if len(xs) == 0 {
			return Stats{}, fmt.Errorf("no numbers")
		}
		s := Stats{N: len(xs), Min: xs[0], Max: xs[0]}
		for _, x := range xs {
			s.Min, s.Max, s.Mean = min(s.Min, x), max(s.Max, x), s.Mean+x/float64(len(xs))
		}
		return s, nil
	})
	var once sync.Once
	done := make(chan struct{})
	finish := func() { once.Do(func() { close(done) }) }
	bye, _ := h.Register("bye", func(*dsfabric.Call, []byte) ([]byte, error) { finish(); return nil, nil })

	job, err := riutils.Start(ctx, dsfabric.Config{Procs: 2, Handlers: h}, riutils.DefaultConfig(),
		func(w *dsfabric.Worker, m *riutils.Messengers) {
			if w.ID() != 0 {
				riutils.Serve(w, m)
				return
			}
			defer finish()
			result, err := riutils.NewRemoteValue[Stats](m, 256)
			if err != nil {
				fmt.Fprintln(out, err)
				return
			}
			s, err := result.Call(ctx, 1, stats, []float64{3, 1, 4, 1, 5, 9, 2, 6})
			fmt.Fprintf(out, "%+v %v\n", s, err)
			_, err = result.Call(ctx, 1, stats, []float64{}) // the handler's error comes back
			fmt.Fprintln(out, "empty:", err)
			m.Call(1, bye, nil)
			m.Flush()
		})
	if err != nil {
		return err
	}
	defer job.Close()
	<-done
	return nil
}
