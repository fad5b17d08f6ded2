package main

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

// TestHello runs the example as it is: two self-launched processes (this
// test binary is re-executed as rank 1).
func TestHello(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SERIEMA_RANK") != "" && os.Getenv("SERIEMA_RANK") != "0" {
		return // rank 1 prints nothing
	}
	want := "hello one-sided, from thread 1 <nil>\nhello send-based, from thread 1 <nil>\n"
	if out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}
