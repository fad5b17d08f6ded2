// Command pipeline is a three-stage pipeline over trad Aggregators: thread 0
// sends the numbers 1…N to thread 1, which squares each and passes it on to
// thread 2, which adds them up. Calls travel in batches (one one-sided write
// per 4 KiB of calls); each stage runs on its own process, and the last
// sends the total back to thread 0, which prints it.
//
//	go run ./examples/pipeline
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/riutils"
)

const n = 100000

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	h := dsfabric.NewHandlers()
	var next *riutils.Aggregator // thread 1's way to thread 2
	var sum, count uint64
	var once sync.Once
	done := make(chan struct{})
	finish := func() { once.Do(func() { close(done) }) }
	var total dsfabric.HandlerID
	square, _ := h.Register("square", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		v := binary.LittleEndian.Uint64(args)
		return nil, next.Call(2, total, binary.LittleEndian.AppendUint64(nil, v*v))
	})
	var result dsfabric.HandlerID
	total, _ = h.Register("total", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		sum += binary.LittleEndian.Uint64(args)
		if count++; count < n {
			return nil, nil
		}
		defer finish() // the last stage reports to thread 0 and is done
		return nil, c.Fabric.Call(c.Dst, 0, result, binary.LittleEndian.AppendUint64(nil, sum), nil)
	})
	result, _ = h.Register("result", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		fmt.Fprintln(out, "sum of squares:", binary.LittleEndian.Uint64(args))
		finish()
		return nil, nil
	})
	flush, _ := h.Register("flush", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		defer finish() // thread 1's part is done once its last batch is out
		return nil, next.Flush()
	})

	job, err := riutils.Start(ctx, dsfabric.Config{Procs: 3, Handlers: h}, riutils.DefaultConfig(),
		func(w *dsfabric.Worker, m *riutils.Messengers) {
			agg, err := m.Aggregator(riutils.AggregatorConfig{Mode: riutils.Trad})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return
			}
			switch w.ID() {
			case 0: // the source
				for i := uint64(1); i <= n; i++ {
					agg.Call(1, square, binary.LittleEndian.AppendUint64(nil, i))
				}
				agg.Call(1, flush, nil) // after the numbers: thread 1 flushes its batch
				agg.Flush()             // thread 0 is done when the result comes back
			case 1:
				next = agg
			}
			riutils.Serve(w, m)
		})
	if err != nil {
		return err
	}
	defer job.Close()
	<-done // each process, once its stage is done
	return nil
}
