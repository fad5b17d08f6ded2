package dsfabric_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/seriema-go/seriema/dsfabric"
)

// Register a handler, self-launch two processes, and call the handler on a
// thread of rank 1. Every process runs this same code (SPMD), so both ranks
// call it (rank 1 calls itself) and print the same line.
func Example() {
	h := dsfabric.NewHandlers()
	greet, _ := h.Register("greet", func(c *dsfabric.Call, args []byte) ([]byte, error) {
		return []byte(fmt.Sprintf("hello %s from rank %d", args, c.Fabric.Rank())), nil
	})
	f, err := dsfabric.Start(context.Background(), dsfabric.Config{
		Procs:    2,
		Handlers: h,
		Args:     []string{"-test.run=^Example$"}, // the other rank re-runs this example
		Stdout:   os.Stderr,                       // its copy of the output goes to stderr
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	me, _ := f.Names().Thread(f.Rank(), 0)
	dst, _ := f.Names().Thread(1, 0)
	reply, err := f.CallReturn(context.Background(), me, dst, greet, []byte("world"))
	fmt.Println(string(reply), err)
	// Output: hello world from rank 1 <nil>
}

type sumArgs struct{ A, B int }

// CallReturnTyped with Go values (msgpack-encoded; types with msgp
// methods or encoding.BinaryAppender use those instead).
func ExampleCallReturnTyped() {
	h := dsfabric.NewHandlers()
	sum, _ := dsfabric.RegisterTyped(h, "sum", func(c *dsfabric.Call, a sumArgs) (int, error) {
		return a.A + a.B, nil
	})
	f, err := dsfabric.Start(context.Background(), dsfabric.Config{
		Procs: 2, ThreadsPerProcess: 2, Handlers: h,
		Args: []string{"-test.run=^ExampleCallReturnTyped$"}, Stdout: os.Stderr,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	me, _ := f.Names().Thread(f.Rank(), 0)
	var out []string
	for t := 0; t < f.Names().Threads(); t++ {
		v, err := dsfabric.CallReturnTyped[int](context.Background(), f, me, dsfabric.ThreadID(t), sum, sumArgs{t, 10})
		out = append(out, fmt.Sprint(v, err))
	}
	fmt.Println(strings.Join(out, ", "))
	// Output: 10 <nil>, 11 <nil>, 12 <nil>, 13 <nil>
}
