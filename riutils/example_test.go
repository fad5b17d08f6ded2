package riutils_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/riutils"
)

// Thread 1 makes one-sided calls to thread 0: ten plain calls, a batch
// through a trad Aggregator, and a call-and-return. Start starts the job
// and hands each worker thread its messengers, ready to call.
func Example() {
	h := dsfabric.NewHandlers()
	var sum atomic.Int64
	add, _ := h.Register("add", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		sum.Add(int64(args[0]))
		return nil, nil
	})
	double, _ := dsfabric.RegisterTyped(h, "double", func(c *dsfabric.Call, v int) (int, error) { return 2 * v, nil })
	out := make(chan string, 1)
	job, err := riutils.Start(context.Background(), dsfabric.Config{Procs: 1, ThreadsPerProcess: 2, Handlers: h}, riutils.DefaultConfig(),
		func(w *dsfabric.Worker, m *riutils.Messengers) {
			if w.ID() == 0 { // the callee runs the calls written to it
				riutils.Serve(w, m)
				return
			}
			for i := 1; i <= 10; i++ {
				m.Call(0, add, []byte{byte(i)})
			}
			agg, _ := m.Aggregator(riutils.AggregatorConfig{Mode: riutils.Trad})
			for i := 0; i < 100; i++ {
				agg.Call(0, add, []byte{1})
			}
			agg.Flush()
			v, _ := riutils.NewRemoteValue[int](m, 16)
			r, err := v.Call(context.Background(), 0, double, 21) // runs after the calls above
			out <- fmt.Sprint(sum.Load(), r, err)
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer job.Close()
	fmt.Println(<-out)
	// Output: 155 42 <nil>
}
