// Command hello is a first Seriema program: a job of two processes in
// which thread 0 calls a handler on thread 1, one-sided (written straight
// into thread 1's memory) and send-based, and prints the answers.
//
//	go run ./examples/hello          # two processes on this machine
//
// Across machines, start one process per machine with a launcher (see the
// README, "Running across machines"), e.g.
//
//	mpirun -np 2 --host a,b -x SERIEMA_COORD=a:7000 -x SERIEMA_JOB_TOKEN=secret ./hello
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/seriema-go/seriema/dsfabric"
	"github.com/seriema-go/seriema/riutils"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	h := dsfabric.NewHandlers() // the same handlers, in the same order, in every process
	greet, _ := dsfabric.RegisterTyped(h, "greet", func(c *dsfabric.Call, name string) (string, error) {
		return fmt.Sprintf("hello %s, from thread %d", name, c.Dst), nil
	})
	done := make(chan struct{})
	job, err := riutils.Start(ctx, dsfabric.Config{Procs: 2, Handlers: h}, riutils.DefaultConfig(),
		func(w *dsfabric.Worker, m *riutils.Messengers) {
			if w.ID() != 0 {
				riutils.Serve(w, m) // thread 1 runs the calls made to it
				return
			}
			defer close(done)
			answer, _ := riutils.NewRemoteValue[string](m, 256)
			s, err := answer.Call(ctx, 1, greet, "one-sided") // written into thread 1's memory
			fmt.Fprintln(out, s, err)
			s, err = dsfabric.CallReturnTyped[string](ctx, w.Fabric(), w.ID(), 1, greet, "send-based")
			fmt.Fprintln(out, s, err)
		})
	if err != nil {
		return err
	}
	defer job.Close()
	if job.Fabric.Rank() == 0 {
		<-done // thread 0 lives here
	}
	return job.Fabric.Barrier(ctx) // every process waits for the others
}
