package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRemoteValue runs the example (two self-launched processes) and checks
// the typed result and the handler's error, as thread 0 printed them.
func TestRemoteValue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SERIEMA_RANK") != "" {
		return // rank 1; rank 0 checks
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != "{N:8 Min:1 Max:9 Mean:3.875} <nil>" || !strings.HasPrefix(lines[1], "empty: ") || !strings.Contains(lines[1], "no numbers") {
		t.Fatalf("printed %q", out.String())
	}
}
