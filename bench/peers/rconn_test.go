package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/rpc"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/seriema-go/seriema/rconn"
	"golang.org/x/net/nettest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The proof that rconn is transparent (issue 16): the standard library's
// and gRPC's own clients and servers run over it unchanged, and x/net's
// conformance suite for net.Conn passes.

// ringListener records whether the connections it accepted are on rings.
type ringListener struct {
	net.Listener
	mu    sync.Mutex
	rings int
}

func (l *ringListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if _, ok := c.(*rconn.Conn); ok {
		l.mu.Lock()
		l.rings++
		l.mu.Unlock()
	}
	return c, err
}

func (l *ringListener) onRings(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rings == 0 {
		t.Error("no accepted connection was on shared-memory rings")
	}
}

func listenConn(t *testing.T) *ringListener {
	ln, err := rconn.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &ringListener{Listener: ln}
}

func TestNettestConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		ln, err := rconn.Listen("unix", filepath.Join(t.TempDir(), "s"))
		if err != nil {
			return nil, nil, nil, err
		}
		defer ln.Close()
		done := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			done <- c
		}()
		if c1, err = rconn.Dial("unix", ln.Addr().String()); err != nil {
			return nil, nil, nil, err
		}
		c2 = <-done
		if _, ok := c1.(*rconn.Conn); !ok {
			return nil, nil, nil, fmt.Errorf("dialed %T, not on rings", c1)
		}
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

func TestGRPCOverConn(t *testing.T) {
	ln := listenConn(t)
	gs := grpc.NewServer()
	gs.RegisterService(&sinkDesc, struct{}{})
	go gs.Serve(ln)
	defer gs.Stop()
	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return rconn.DialContext(ctx, "unix", addr) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("raw")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	for _, size := range []int{1, 8 << 10, 3 << 20} { // unary, up to beyond a ring
		in, out := bytes.Repeat([]byte{7}, size), []byte(nil)
		if err := cc.Invoke(ctx, "/peers.Sink/Echo", &in, &out); err != nil || !bytes.Equal(in, out) {
			t.Fatalf("unary %d bytes: %v (echo equal %v)", size, err, bytes.Equal(in, out))
		}
	}
	st, err := cc.NewStream(ctx, &sinkDesc.Streams[0], "/peers.Sink/Stream")
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for i := 0; i < 1000; i++ {
		msg := []byte{byte(i), 1, 2}
		sum += touch(msg)
		if err := st.SendMsg(&msg); err != nil {
			t.Fatal(err)
		}
	}
	st.CloseSend()
	var reply []byte
	if err := st.RecvMsg(&reply); err != nil || string(reply) != fmt.Sprintf("1000 %d", sum) {
		t.Fatalf("stream: %q %v", reply, err)
	}
	ln.onRings(t)
}

func TestNetRPCOverConn(t *testing.T) {
	ln := listenConn(t)
	rs := rpc.NewServer()
	rs.Register(Sink{})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go rs.ServeConn(c)
		}
	}()
	c, err := rconn.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := rpc.NewClient(c)
	defer client.Close()
	for _, size := range []int{1, 100 << 10} {
		args := bytes.Repeat([]byte{3}, size)
		var reply uint64
		if err := client.Call("Sink.Put", args, &reply); err != nil || reply != touch(args) {
			t.Fatalf("call of %d bytes: %v, reply %d want %d", size, err, reply, touch(args))
		}
	}
	ln.onRings(t)
}

func TestHTTPOverConn(t *testing.T) {
	ln := listenConn(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %d", r.URL.Path, len(b))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return rconn.DialContext(ctx, "unix", ln.Addr().String())
	}}}
	for i := 0; i < 3; i++ { // keep-alive: the same connection again
		resp, err := client.Post("http://rconn/hello", "application/octet-stream", strings.NewReader(strings.Repeat("x", 5000)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "/hello 5000" {
			t.Fatalf("response %q", b)
		}
	}
	ln.onRings(t)
}
