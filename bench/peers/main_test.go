package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(serveEnv); dir != "" {
		if err := serve(dir); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPeersSmoke runs every mode with tiny N over a unix socket and over
// TCP, and checks the JSON schema shared with mctsbench.
func TestPeersSmoke(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) { peersSmoke(t, network) })
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-net", "carrier-pigeon"}, &out, &errb); code != 2 {
		t.Errorf("unknown -net accepted")
	}
}

func peersSmoke(t *testing.T, network string) {
	var out, errb bytes.Buffer
	if code := run([]string{"-net", network, "-sizes", "8,64", "-n", "300", "-reps", "1", "-latency-n", "50", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("want 6 lines (2 modes × 2 sizes + 2 latencies), got %q", out.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["transport"] != network {
			t.Errorf("transport in %s", l)
		}
		if _, ok := m["calls_per_s"]; ok {
			if m["calls_per_s"].(float64) <= 0 || m["mb_per_s"] == nil {
				t.Errorf("bad throughput line %s", l)
			}
		} else if p50, _ := m["p50_ns"].(float64); p50 <= 0 || m["p99_ns"].(float64) < p50 {
			t.Errorf("bad latency line %s", l)
		}
	}
	if code := run([]string{"-mode", "carrier-pigeon"}, &out, &errb); code != 2 {
		t.Errorf("unknown mode accepted")
	}
}

func TestRawCodec(t *testing.T) {
	c := rawCodec{}
	in := []byte("abc")
	b, err := c.Marshal(&in)
	if err != nil || string(b) != "abc" {
		t.Fatal(b, err)
	}
	var out []byte
	if err := c.Unmarshal(b, &out); err != nil || string(out) != "abc" {
		t.Fatal(out, err)
	}
	if _, err := c.Marshal("x"); err == nil {
		t.Error("non-bytes marshalled")
	}
	if touch([]byte{1, 2, 3}) != 6 {
		t.Error("touch")
	}
}
