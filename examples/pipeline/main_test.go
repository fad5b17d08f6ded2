package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestPipeline runs the example: three self-launched processes; thread 0
// prints the sum of the squares of 1…n that the last stage sent it.
func TestPipeline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("sum of squares: %d\n", uint64(n)*(n+1)*(2*n+1)/6)
	if os.Getenv("SERIEMA_RANK") != "" {
		return // a self-launched rank; rank 0 checks the result
	}
	if out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}
