package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSpliceReport(t *testing.T) {
	doc := "# Benchmarks\n\nhand-written\n\n" + reportBegin + "\nold\n" + reportEnd + "\n\n## Notes\nkept\n"
	got := spliceReport(doc, "new\n")
	if !strings.Contains(got, "hand-written") || !strings.Contains(got, "## Notes\nkept") || strings.Contains(got, "old") || !strings.Contains(got, reportBegin+"\nnew\n"+reportEnd) {
		t.Errorf("splice:\n%s", got)
	}
	if got := spliceReport("# B\n", "x\n"); !strings.HasSuffix(got, reportBegin+"\nx\n"+reportEnd+"\n") {
		t.Errorf("append: %q", got)
	}
}

// TestReport writes a report from made-up results and checks its tables,
// the goal verdicts and the charts.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var micro strings.Builder
	for _, m := range []struct {
		mode string
		rate float64
	}{{"raw", 6e6}, {"send", 1e6}, {"write", 5e6}, {"trad", 30e6}, {"ovfl", 4.9e6}} {
		for _, s := range []string{"8", "64"} {
			rate := m.rate
			if m.mode == "send" && s == "8" {
				rate = 2e6 // send / write 0.40 at 8 B, 0.20 at 64 B
			}
			micro.WriteString(`{"mode":"` + m.mode + `","size":` + s + `,"transport":"shm","calls_per_s":` + strconv.FormatFloat(rate, 'f', -1, 64) + `}` + "\n")
		}
	}
	write("micro.json", micro.String())
	write("fig2.json", `{"mode":"raw","size":8,"transport":"shm","calls_per_s":6000000}
{"mode":"raw","size":4096,"transport":"shm","calls_per_s":900000}
{"mode":"raw","size":8,"transport":"tcp","calls_per_s":1000000}
`)
	write("latency.json", `{"mode":"call_return","size":8,"transport":"shm","n":10,"p50_ns":1100,"p99_ns":1500,"p999_ns":3000}
{"mode":"call_return","size":8,"transport":"tcp","n":10,"p50_ns":10000,"p99_ns":100000,"p999_ns":300000}
{"mode":"ping_pong","size":8,"transport":"tcp-plain","n":10,"p50_ns":8000,"p99_ns":20000,"p999_ns":40000}
`)
	write("micro-tcp.json", `{"mode":"limit","size":64,"transport":"tcp","calls_per_s":20000000}
{"mode":"raw","size":64,"transport":"tcp","calls_per_s":2000000}
{"mode":"trad","size":64,"transport":"tcp","calls_per_s":12000000}
`)
	write("peers.json", `{"mode":"netrpc","size":64,"transport":"unix","calls_per_s":100000}
{"mode":"grpc-stream","size":64,"transport":"unix","calls_per_s":700000}
{"mode":"netrpc-unary","size":8,"transport":"unix","n":10,"p50_ns":90000,"p99_ns":200000,"p999_ns":300000}
{"mode":"netrpc-unary","size":8,"transport":"tcp","n":10,"p50_ns":50000,"p99_ns":200000,"p999_ns":300000}
`)
	write("ofi.json", `{"mode":"write","size":64,"transport":"shm","calls_per_s":20000000}
{"mode":"write","size":64,"transport":"ofi-shm","calls_per_s":5000000}
{"mode":"write","size":64,"transport":"tcp","calls_per_s":2000000}
{"mode":"write","size":64,"transport":"ofi-tcp","calls_per_s":3000000}
{"mode":"call_return","size":8,"transport":"ofi-tcp","n":10,"p50_ns":12000,"p99_ns":90000,"p999_ns":160000}
`)
	write("ofi-rma.json", `{"mode":"raw","size":65536,"transport":"ofi-tcp","calls_per_s":10000}
{"mode":"raw","size":65536,"transport":"ofi-tcp-rma","calls_per_s":13000}
`)
	write("conn.json", `{"mode":"conn","pattern":"pingpong","size":64,"n":10,"round_trips_per_s":1500000,"p50_ns":500,"p99_ns":900}
{"mode":"conn","pattern":"stream","size":4096,"n":10,"mb_per_s":12000}
{"mode":"unix","pattern":"pingpong","size":64,"n":10,"round_trips_per_s":125000,"p50_ns":7000,"p99_ns":20000}
{"mode":"unix","pattern":"stream","size":4096,"n":10,"mb_per_s":3000}
{"mode":"tcp","pattern":"pingpong","size":64,"n":10,"round_trips_per_s":20000,"p50_ns":50000,"p99_ns":90000}
`)
	// Joins at two sizes, the MPI peer in rounds (folded into its median),
	// and a faster line over libfabric's shm that the goals, stated for
	// our shm, must leave out.
	write("shuffle.json", `{"pattern":"repartition","impl":"wr","config":"se","buffers":"fixed","transport":"shm","procs":2,"threads":1,"bytes":536870912,"gb_per_s_per_proc":3,"ok":true,"reps":1,"min":3,"max":3}
{"pattern":"repartition","impl":"wr","config":"se","buffers":"fixed","transport":"ofi-shm","procs":2,"threads":1,"bytes":268435456,"gb_per_s_per_proc":9,"ok":true,"reps":1,"min":9,"max":9}
{"pattern":"repartition","impl":"mpi","config":"-","transport":"mpi","procs":2,"threads":1,"bytes":536870912,"gb_per_s_per_proc":1,"ok":true,"reps":1,"min":1,"max":1}
{"pattern":"repartition","impl":"mpi","config":"-","transport":"mpi","procs":2,"threads":1,"bytes":536870912,"gb_per_s_per_proc":2,"ok":true,"reps":1,"min":2,"max":2}
{"pattern":"repartition","impl":"mpi","config":"-","transport":"mpi","procs":2,"threads":1,"bytes":536870912,"gb_per_s_per_proc":9,"ok":true,"reps":1,"min":9,"max":9}
{"pattern":"join","impl":"wr","config":"se","transport":"shm","procs":2,"threads":1,"orders":500000,"seconds":0.08,"ok":true,"reps":5,"min":0.07,"max":0.09}
{"pattern":"join","impl":"socket","config":"-","transport":"tcp","procs":2,"threads":1,"orders":500000,"seconds":0.1,"ok":true,"reps":5,"min":0.1,"max":0.1}
{"pattern":"join","impl":"wr","config":"se","transport":"shm","procs":2,"threads":1,"orders":2000000,"seconds":0.25,"ok":true,"reps":5,"min":0.24,"max":0.26}
{"pattern":"join","impl":"socket","config":"-","transport":"tcp","procs":2,"threads":1,"orders":2000000,"seconds":0.4,"ok":true,"reps":5,"min":0.39,"max":0.41}
`)
	// make bench's three idle runs: shm first (the goals of one machine),
	// then tcp beside plain Go TCP, whose wake-up must not replace shm's,
	// then 8 processes over tcp (CPU only), a row of their own.
	write("idle.json", `{"mode":"idle","transport":"shm","window_s":10,"cpu_share":0.01}
{"mode":"idle","transport":"shm","rank":1,"window_s":10,"cpu_share":0.02}
{"mode":"wake","transport":"shm","n":20,"p50_ns":60000,"max_ns":90000}
{"mode":"pipe-wake","transport":"pipe","n":20,"p50_ns":50000,"max_ns":80000}
{"mode":"idle","transport":"tcp","window_s":2,"cpu_share":0.03}
{"mode":"idle","transport":"tcp","rank":1,"window_s":2,"cpu_share":0.01}
{"mode":"wake","transport":"tcp","n":30,"p50_ns":300000,"max_ns":400000}
{"mode":"pipe-wake","transport":"pipe","n":30,"p50_ns":90000,"max_ns":100000}
{"mode":"tcp-plain-wake","transport":"tcp-plain","n":30,"p50_ns":120000,"max_ns":200000}
{"mode":"idle","transport":"tcp","procs":8,"window_s":5,"cpu_share":0.02}
{"mode":"idle","transport":"tcp","procs":8,"rank":1,"window_s":5,"cpu_share":0.061}
`)
	write("scale.json", `{"config":"1x1","simulations_per_ms":2000,"visits_per_ms":125,"vs_1x1":1,"reps":3,"simulations_per_ms_runs":[2000,1400,2100],"vs_1x1_rounds":[1,1,1]}
{"config":"2x1","simulations_per_ms":3000,"visits_per_ms":187.5,"vs_1x1":1.5,"vs_1x1_rounds":[1.5,2.4,1.6],"reps":3,"simulations_per_ms_runs":[3000,3360,3360]}
`)
	doc := filepath.Join(dir, "benchmarks.md")
	write("benchmarks.md", "# Benchmarks\n\nnotes\n")
	img := filepath.Join(dir, "img")
	var out, errb bytes.Buffer
	if code := report([]string{"-dir", dir, "-doc", doc, "-img", img, "-machine", "test box"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, _ := os.ReadFile(doc)
	s := string(b)
	for _, want := range []string{"notes", "Machine: test box",
		"| idle job: CPU per process, highest (% of a core) | 3.00 | ≤ 5.00 | **met** |",
		"| idle 8-process tcp job: CPU per process, highest (% of a core) | 6.10 | ≤ 5.00 | **not met** |",
		"| first call after 100 ms idle, p50 (µs) | 60.00 | ≤ 50.00 | **not met** |",
		"| first call after idle / plain pipe round trip after idle, p50 | 1.20 | ≤ 2.00 | **met** |",
		"| first call after idle over tcp / plain Go TCP round trip after idle, p50 | 2.50 | ≤ 2.00 | **not met** |", "| trad | 30000000 |", "| write / raw (lowest over sizes) | 0.83 | ≥ 0.80 | **met** |",
		"| send / write (lowest over sizes) | 0.20 | ≥ 0.30 | **not met** |", "| send / write at 8 B | 0.40 | ≥ 0.30 | **met** |", "| trad / grpc-stream at 64 B | 42.86 | ≥ 20.00 | **met** |",
		"| raw / limit (lowest over sizes) | 0.00 | ≥ 0.50 | not measured |", "| raw / limit, the lower of 8 B and 64 B | 0.00 | ≥ 0.50 | not measured |",
		"| tcp raw / plain-TCP stream (lowest over sizes) | 0.10 | ≥ 0.50 | **not met** |",
		"| tcp trad / plain-TCP stream (lowest over sizes) | 0.60 | ≥ 0.50 | **met** |",
		"| tcp call_return p50 / plain ping-pong p50 | 1.25 | ≤ 2.00 | **met** |",
		"| tcp call_return p99 / plain ping-pong p99 | 5.00 | ≤ 4.00 | **not met** |",
		"| tcp call_return p50 / netrpc-unary over TCP p50 | 0.20 | ≤ 1.00 | **met** |",
		"| trad / netrpc at 64 B | 300.00 | ≥ 20.00 | **met** |",
		"| write | 64 | 20000000 | 5000000 | 0.25 | 2000000 | 3000000 | 1.50 |",
		"| conn / unix ping-pong round trips/s (64 B) | 12.00 | ≥ 5.00 | **met** |", "| conn / unix stream MB/s (4 KiB writes) | 4.00 | ≥ 2.00 | **met** |",
		"| conn | 1500000 | 500ns | 900ns | 12000 |", "| ofi-tcp | 12µs | 90µs | 160µs |", "| raw | 65536 | 655.4 | 852.0 | 1.30 |", "| latency p50 at 8 B (µs) | 1.10 | ≤ 2.00 | **met** |", "| netrpc-unary | unix | 8 | 90µs |",
		"| repartition | mpi | - | – | mpi | 2 × 1 | 512 | 2.00 | 3: 1.00–9.00 | true |", "| repartition: best of wr, rd, sr / mpi | 1.50 | ≥ 1.50 | **met** |",
		"| repartition | wr | se | fixed | ofi-shm | 2 × 1 | 256 | 9.00 | 1 | true |",
		"| join, 500000 orders per process: socket seconds / best of wr, rd, sr seconds | 1.25 | ≥ 1.50 | **not met** |",
		"| join, 2000000 orders per process: socket seconds / best of wr, rd, sr seconds | 1.60 | ≥ 1.50 | **met** |",
		"| 2000000 | wr | se | shm | 2 × 1 | 0.250 | 5: 0.240–0.260 | true |",
		"| 1x1 | 2000 | 125.0 | 0.00 | 1.00 | 1.00 | – |", "| 2x1 | 3000 | 187.5 | 0.00 | 1.50 | 1.50–2.40 | – |"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	for _, name := range []string{"table2.png", "fig2.png", "peers.png"} {
		f, err := os.Open(filepath.Join(img, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}
	// A second run replaces the generated part instead of adding one.
	if code := report([]string{"-dir", dir, "-doc", doc, "-img", img, "-machine", "test box"}, &out, &errb); code != 0 {
		t.Fatal(errb.String())
	}
	b, _ = os.ReadFile(doc)
	if strings.Count(string(b), reportBegin) != 1 {
		t.Error("generated part duplicated")
	}
}

// TestRatioText: a ratio just short of (or past) its goal is printed with
// the decimals that tell it from the goal; others with two.
func TestRatioText(t *testing.T) {
	for _, c := range []struct {
		got, want float64
		text      string
	}{
		{0.4987, 0.5, "0.499"},
		{1.8004, 1.8, "1.8004"},
		{0.5, 0.5, "0.50"},
		{0.43, 0.5, "0.43"},
		{2.0049, 2, "2.005"},
		{0.5000000001, 0.5, "0.500000"},
	} {
		if got := ratioText(c.got, c.want); got != c.text {
			t.Errorf("ratioText(%v, %v) = %q, want %q", c.got, c.want, got, c.text)
		}
	}
	// A shortfall just under (or just over, for a bound from above) the
	// goal is not met, however it rounds.
	for _, c := range []struct {
		got, want float64
		higher    bool
		line      string
	}{
		{0.4987, 0.5, true, "| r | 0.499 | ≥ 0.50 | **not met** |\n"},
		{0.5, 0.5, true, "| r | 0.50 | ≥ 0.50 | **met** |\n"},
		{2.004, 2, false, "| r | 2.004 | ≤ 2.00 | **not met** |\n"},
		{1.99, 2, false, "| r | 1.99 | ≤ 2.00 | **met** |\n"},
	} {
		var w strings.Builder
		goal(&w, "r", c.got, c.want, c.higher)
		if got := w.String(); got != c.line {
			t.Errorf("goal line %q, want %q", got, c.line)
		}
	}
}
