package rconn_test

import (
	"fmt"
	"net/rpc"

	"github.com/seriema-go/seriema/rconn"
)

// Arith is a net/rpc service.
type Arith struct{}

// Args are Mul's arguments.
type Args struct{ A, B int }

// Mul multiplies.
func (Arith) Mul(a Args, reply *int) error {
	*reply = a.A * a.B
	return nil
}

// net/rpc, unchanged, over rconn: the listener and the dialer agree over
// the TCP socket that they share a machine, and the connection's bytes
// then move through shared-memory rings (the net.Conn is a *rconn.Conn).
// Across machines the same code gets the plain TCP connection back.
func Example() {
	srv := rpc.NewServer()
	srv.Register(Arith{})
	ln, err := rconn.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go srv.Accept(ln)

	conn, err := rconn.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	_, rings := conn.(*rconn.Conn)
	client := rpc.NewClient(conn)
	defer client.Close()
	var product int
	err = client.Call("Arith.Mul", Args{6, 7}, &product)
	fmt.Println(product, err, "rings:", rings)
	// Output: 42 <nil> rings: true
}
