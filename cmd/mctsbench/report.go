package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/seriema-go/seriema/internal/chart"
)

// The generated part of docs/benchmarks.md lies between these markers;
// everything else in the file is written by hand and kept.
const (
	reportBegin = "<!-- make bench: generated from here -->"
	reportEnd   = "<!-- make bench: generated up to here -->"
)

// benchData is everything make bench measured, read from JSON lines.
type benchData struct {
	micro   []Result        // Table 2 modes, default sizes
	tcp     []Result        // the same over tcp, with the plain-TCP limit
	fig2    []Result        // raw over many sizes, shm and tcp
	lat     []LatencyResult // mctsbench latency and the peers' round trips
	peers   []Result        // netrpc, grpc-stream
	scale   []ScaleResult
	idle    []IdleResult
	ofi     []Result        // ours and ofi's over shm and tcp, one after the other
	ofiLat  []LatencyResult // the same, call-and-return latency
	ofiRMA  []Result        // ofi-tcp's message path and one-sided path, interleaved
	conn    []ConnResult    // mctsbench conn: rconn, unix, tcp
	rdmo    []RDMOResult    // mctsbench rdmo: RDMOs and their one-sided sequences
	shuffle []ShuffleResult // mctsbench shuffle: repartition and broadcast
	machine string
	command string
}

// readLines decodes every JSON line of file into one value each.
func readLines[T any](file string) ([]T, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

func report(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "bench-results", "directory with micro.json, fig2.json, latency.json, peers.json, scale.json")
	doc := fs.String("doc", "docs/benchmarks.md", "markdown file whose generated part is rewritten")
	img := fs.String("img", "docs/img", "directory for the PNG charts")
	machine := fs.String("machine", "", "description of the machine (default: from the system)")
	command := fs.String("command", "make bench", "the command that made the data")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	d, err := loadBench(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench report: %v\n", err)
		return 1
	}
	d.machine, d.command = *machine, *command
	if d.machine == "" {
		d.machine = describeMachine()
	}
	if err := os.MkdirAll(*img, 0o755); err != nil {
		fmt.Fprintf(stderr, "mctsbench report: %v\n", err)
		return 1
	}
	rel, _ := filepath.Rel(filepath.Dir(*doc), *img)
	md, charts := d.markdown(filepath.ToSlash(rel))
	for name, ch := range charts {
		f, err := os.Create(filepath.Join(*img, name))
		if err == nil {
			err = ch.WritePNG(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "mctsbench report: %s: %v\n", name, err)
			return 1
		}
	}
	old, err := os.ReadFile(*doc)
	if err != nil && !os.IsNotExist(err) {
		fmt.Fprintf(stderr, "mctsbench report: %v\n", err)
		return 1
	}
	if err := os.WriteFile(*doc, []byte(spliceReport(string(old), md)), 0o644); err != nil {
		fmt.Fprintf(stderr, "mctsbench report: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s and %d charts in %s\n", *doc, len(charts), *img)
	return 0
}

func loadBench(dir string) (*benchData, error) {
	d := &benchData{}
	var err error
	if d.micro, err = readLines[Result](filepath.Join(dir, "micro.json")); err != nil {
		return nil, err
	}
	if d.tcp, err = readLines[Result](filepath.Join(dir, "micro-tcp.json")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if d.fig2, err = readLines[Result](filepath.Join(dir, "fig2.json")); err != nil {
		return nil, err
	}
	if d.lat, err = readLines[LatencyResult](filepath.Join(dir, "latency.json")); err != nil {
		return nil, err
	}
	// peers.json mixes throughput and round-trip lines.
	peers, peerLat, err := readMixed(filepath.Join(dir, "peers.json"))
	if err != nil {
		return nil, err
	}
	d.peers, d.lat = peers, append(d.lat, peerLat...)
	if d.scale, err = readLines[ScaleResult](filepath.Join(dir, "scale.json")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if d.idle, err = readLines[IdleResult](filepath.Join(dir, "idle.json")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if d.conn, err = readLines[ConnResult](filepath.Join(dir, "conn.json")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if d.ofi, d.ofiLat, err = readMixed(filepath.Join(dir, "ofi.json")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if d.ofiRMA, err = readLines[Result](filepath.Join(dir, "ofi-rma.json")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if d.rdmo, err = readLines[RDMOResult](filepath.Join(dir, "rdmo.json")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if d.shuffle, err = readLines[ShuffleResult](filepath.Join(dir, "shuffle.json")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	d.shuffle = foldShuffle(d.shuffle)
	return d, nil
}

// readMixed reads a file of throughput lines (those with calls_per_s) and
// latency lines mixed.
func readMixed(file string) ([]Result, []LatencyResult, error) {
	all, err := readLines[map[string]any](file)
	if err != nil {
		return nil, nil, err
	}
	var rs []Result
	var ls []LatencyResult
	for _, m := range all {
		b, _ := json.Marshal(m)
		if _, ok := m["calls_per_s"]; ok {
			var r Result
			json.Unmarshal(b, &r)
			rs = append(rs, r)
		} else {
			var l LatencyResult
			json.Unmarshal(b, &l)
			ls = append(ls, l)
		}
	}
	return rs, ls, nil
}

// spliceReport replaces the generated part of doc (or appends one).
func spliceReport(doc, md string) string {
	block := reportBegin + "\n" + md + reportEnd
	i, j := strings.Index(doc, reportBegin), strings.Index(doc, reportEnd)
	if i < 0 || j < i {
		return strings.TrimRight(doc, "\n") + "\n\n" + block + "\n"
	}
	return doc[:i] + block + doc[j+len(reportEnd):]
}

func describeMachine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s, %s/%s, %s", runtime.NumCPU(), cpu, runtime.Version(), runtime.GOOS, runtime.GOARCH, time.Now().Format("2006-01-02"))
}

// rate returns the calls/s of mode at size among rs (0 if absent).
func rate(rs []Result, mode, transport string, size int) float64 {
	for _, r := range rs {
		if r.Mode == mode && r.Size == size && (transport == "" || r.Transport == transport) {
			return r.CallsPerS
		}
	}
	return 0
}

func sizesOf(rs []Result) []int {
	seen := map[int]bool{}
	var out []int
	for _, r := range rs {
		if !seen[r.Size] {
			seen[r.Size] = true
			out = append(out, r.Size)
		}
	}
	sort.Ints(out)
	return out
}

// over is a/b, or 0 (not measured) when either is missing.
func over(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// goal writes one docs/design.md §9 check.
func goal(w *strings.Builder, name string, got, want float64, higher bool) {
	status := "**met**"
	if got == 0 {
		status = "not measured"
	} else if (higher && got < want) || (!higher && got > want) {
		status = "**not met**"
	}
	cmp := "≥"
	if !higher {
		cmp = "≤"
	}
	fmt.Fprintf(w, "| %s | %s | %s %s | %s |\n", name, ratioText(got, want), cmp, strconv.FormatFloat(want, 'f', 2, 64), status)
}

// ratioText prints got with two decimals, or as many more (up to six) as
// it takes to tell it from want: a 0.499 against a goal of 0.5 read
// "0.50 ≥ 0.50, not met".
func ratioText(got, want float64) string {
	goal := strconv.FormatFloat(want, 'f', 2, 64)
	for prec := 2; ; prec++ {
		t := strconv.FormatFloat(got, 'f', prec, 64)
		if got == want || prec == 6 || t != goal+strings.Repeat("0", prec-2) {
			return t
		}
	}
}

// tcpSection writes the across-machines table: our tcp transport beside
// the plain Go TCP peers measured in the same run, and its ratios.
func (d *benchData) tcpSection(w *strings.Builder, lat map[string]LatencyResult) {
	if len(d.tcp) == 0 {
		return
	}
	sizes := sizesOf(d.tcp)
	w.WriteString("\n### Across machines: tcp (loopback) against plain Go TCP, same run\n\n| mode |")
	for _, s := range sizes {
		fmt.Fprintf(w, " %d B calls/s |", s)
	}
	w.WriteString("\n|---|")
	for range sizes {
		w.WriteString("---:|")
	}
	w.WriteString("\n")
	for _, m := range []string{"limit", "raw", "write", "trad", "ovfl"} {
		fmt.Fprintf(w, "| %s |", m)
		for _, s := range sizes {
			fmt.Fprintf(w, " %.0f |", rate(d.tcp, m, "tcp", s))
		}
		w.WriteString("\n")
	}
	w.WriteString("\n`limit` is a plain Go TCP stream of length-prefixed frames through bufio between two processes.\n\n")
	w.WriteString("| ratio | measured | goal | |\n|---|---:|---:|---|\n")
	lowest := func(num string) float64 {
		m := 0.0
		for i, s := range sizes {
			r := over(rate(d.tcp, num, "tcp", s), rate(d.tcp, "limit", "tcp", s))
			if i == 0 || r < m {
				m = r
			}
		}
		return m
	}
	goal(w, "tcp raw / plain-TCP stream (lowest over sizes)", lowest("raw"), 0.5, true)
	goal(w, "tcp trad / plain-TCP stream (lowest over sizes)", lowest("trad"), 0.5, true)
	ours, plain := lat["call_return/tcp"], lat["ping_pong/tcp-plain"]
	if ours.P50ns > 0 && plain.P50ns > 0 {
		goal(w, "tcp call_return p50 / plain ping-pong p50", ours.P50ns/plain.P50ns, 2, false)
		goal(w, "tcp call_return p99 / plain ping-pong p99", ours.P99ns/plain.P99ns, 4, false)
	}
	for _, peer := range []string{"netrpc-unary/tcp", "grpc-unary/tcp"} {
		if p := lat[peer]; p.P50ns > 0 && ours.P50ns > 0 {
			goal(w, "tcp call_return p50 / "+strings.TrimSuffix(peer, "/tcp")+" over TCP p50", ours.P50ns/p.P50ns, 1, false)
		}
	}
	w.WriteString("\n")
}

// ofiSection compares libfabric's providers with our transports of the
// same kind, measured one after the other by one make bench.
func (d *benchData) ofiSection(w *strings.Builder) {
	if len(d.ofi) == 0 {
		return
	}
	sizes := sizesOf(d.ofi)
	w.WriteString("\n### libfabric (ofi) beside our transports, same run\n\n")
	w.WriteString("`ofi-tcp` is the ofi provider over libfabric's `tcp;ofi_rxm`, `ofi-shm` over libfabric's `shm`; both carry our frames in libfabric messages (the default; the one-sided path is the next table). Calls/s:\n\n| mode | size (B) | shm | ofi-shm | ofi-shm / shm | tcp | ofi-tcp | ofi-tcp / tcp |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range []string{"raw", "write", "trad", "ovfl"} {
		for _, s := range sizes {
			a, b := rate(d.ofi, m, "shm", s), rate(d.ofi, m, "ofi-shm", s)
			c, e := rate(d.ofi, m, "tcp", s), rate(d.ofi, m, "ofi-tcp", s)
			fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %s | %.0f | %.0f | %s |\n", m, s, a, b, ratio(b, a), c, e, ratio(e, c))
		}
	}
	if len(d.ofiLat) > 0 {
		w.WriteString("\n| call_return, 8 B | p50 | p99 | p99.9 |\n|---|---:|---:|---:|\n")
		for _, l := range d.ofiLat {
			fmt.Fprintf(w, "| %s | %v | %v | %v |\n", l.Transport, time.Duration(l.P50ns), time.Duration(l.P99ns), time.Duration(l.P999ns))
		}
	}
	w.WriteString("\n")
	if len(d.ofiRMA) == 0 {
		return
	}
	w.WriteString("One-sided path (`OFIConfig.OneSided`, `SERIEMA_OFI_ONESIDED=1`: fi_writemsg/fi_readmsg into registered memory) against the message path, both over `tcp;ofi_rxm`, interleaved in one run. MB/s:\n\n| mode | size (B) | ofi-tcp | ofi-tcp-rma | rma / messages |\n|---|---:|---:|---:|---:|\n")
	for _, m := range []string{"raw", "write"} {
		for _, s := range sizesOf(d.ofiRMA) {
			a, b := rate(d.ofiRMA, m, "ofi-tcp", s), rate(d.ofiRMA, m, "ofi-tcp-rma", s)
			fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %s |\n", m, s, a*float64(s)/1e6, b*float64(s)/1e6, ratio(b, a))
		}
	}
	w.WriteString("\n")
}

// rdmoSection shows the RDMOs against their one-sided sequences and one
// write's round trip, with the goals of issue 17 (network transports).
func (d *benchData) rdmoSection(w *strings.Builder) {
	var rs []RDMOResult
	for _, r := range d.rdmo {
		if r.Op != "" { // goal lines are recomputed below
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return
	}
	w.WriteString("\n### RDMO: the five operations of seed 001 against their one-sided sequences, same run\n\n")
	w.WriteString("`mctsbench rdmo`: a target process serving RDMOs and a process of 1 or 4 initiators (each a dtutils Process with queue pairs of its own). `rdma` is the one-sided sequence on the same layout; `Write` is one signaled 8-byte write. With one initiator every operation is followed by such a write, timed apart (`write p50`): the round-trip goal divides by it, so both see the same machine; the rate is then operations over the time spent in them. Messages: a write 1, a read, atomic or flush 2; an RDMO sent to the engine 2, one the initiator runs itself (`rdmo-direct`) 0.\n\n| op | impl | transport | initiators | messages/op | p50 | p99 | ops/s | write p50 |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	byTransport := map[string][]RDMOResult{}
	var order []string
	for _, r := range rs {
		ref := "–" // measured only beside one initiator's operations
		if r.WriteP50ns > 0 {
			ref = time.Duration(r.WriteP50ns).String()
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %.1f | %v | %v | %.0f | %s |\n", r.Op, r.Impl, r.Transport, r.Initiators, r.MessagesPerOp, time.Duration(r.P50ns), time.Duration(r.P99ns), r.OpsPerS, ref)
		if _, ok := byTransport[r.Transport]; !ok {
			order = append(order, r.Transport)
		}
		byTransport[r.Transport] = append(byTransport[r.Transport], r)
	}
	w.WriteString("\n| ratio | measured | goal | |\n|---|---:|---:|---|\n")
	for _, tr := range order {
		for _, g := range rdmoGoals(byTransport[tr]) {
			goal(w, g.Goal+" ("+tr+")", g.Value, g.Limit, !strings.Contains(g.Goal, "_over_write_"))
		}
	}
	w.WriteString("\nOver shm the network's goals do not apply: a one-sided operation there is the initiator's own memory access, while an RDMO sent to the engine is a request to the target's call engine (a thread handoff through shared memory), so the one-sided sequences beat it. `rdmo-direct` is the other shm mode of the issue: the initiator runs the lock-free method itself on the instance mapped from the target (rdmo's direct mode; no message after one describe RDMO per capability; SignaledRead takes a lock and is never run that way). Both modes, same run:\n\n")
	rdmoDirectTable(w, rs)
}

// rdmoDirectTable compares, where direct rows exist, the engine, the
// initiator running the method itself and the one-sided sequence.
func rdmoDirectTable(w *strings.Builder, rs []RDMOResult) {
	find := func(op, impl, tr string, k int) *RDMOResult {
		for i := range rs {
			if r := &rs[i]; r.Op == op && r.Impl == impl && r.Transport == tr && r.Initiators == k {
				return r
			}
		}
		return nil
	}
	w.WriteString("| op | transport | initiators | engine p50 | direct p50 | rdma p50 | rdma p50 / direct p50 | direct ops/s / engine ops/s |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, d := range rs {
		if d.Impl != "rdmo-direct" {
			continue
		}
		e, a := find(d.Op, "rdmo", d.Transport, d.Initiators), find(d.Op, "rdma", d.Transport, d.Initiators)
		if e == nil || a == nil {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %d | %v | %v | %v | %.2f | %.2f |\n", d.Op, d.Transport, d.Initiators, time.Duration(e.P50ns), time.Duration(d.P50ns), time.Duration(a.P50ns), a.P50ns/d.P50ns, d.OpsPerS/e.OpsPerS)
	}
	w.WriteString("\n")
}

// connSection compares rconn with a unix socket and TCP loopback, and
// gRPC over each, with the goals of issue 16.
func (d *benchData) connSection(w *strings.Builder, lat map[string]LatencyResult) {
	if len(d.conn) == 0 {
		return
	}
	find := func(mode, pattern string, size int) ConnResult {
		for _, r := range d.conn {
			if r.Mode == mode && r.Pattern == pattern && r.Size == size {
				return r
			}
		}
		return ConnResult{}
	}
	w.WriteString("\n### Sockets over the transport: rconn against a unix socket and TCP, same run\n\n")
	w.WriteString("`conn` is package rconn (shared-memory rings set up over a unix socket); two processes. Ping-pong: 64-byte messages echoed; stream: writes of the given size, MB/s.\n\n| mode | ping-pong round trips/s | p50 | p99 |")
	var sizes []int
	for _, r := range d.conn {
		if r.Pattern == "stream" && r.Mode == "conn" {
			sizes = append(sizes, r.Size)
			fmt.Fprintf(w, " stream %d B MB/s |", r.Size)
		}
	}
	w.WriteString("\n|---|---:|---:|---:|")
	for range sizes {
		w.WriteString("---:|")
	}
	w.WriteString("\n")
	for _, m := range []string{"conn", "unix", "tcp"} {
		p := find(m, "pingpong", 64)
		fmt.Fprintf(w, "| %s | %.0f | %v | %v |", m, p.RTPerS, time.Duration(p.P50ns), time.Duration(p.P99ns))
		for _, s := range sizes {
			fmt.Fprintf(w, " %.0f |", find(m, "stream", s).MBPerS)
		}
		w.WriteString("\n")
	}
	w.WriteString("\n| ratio | measured | goal | |\n|---|---:|---:|---|\n")
	goal(w, "conn / unix ping-pong round trips/s (64 B)", over(find("conn", "pingpong", 64).RTPerS, find("unix", "pingpong", 64).RTPerS), 5, true)
	goal(w, "conn / unix stream MB/s (4 KiB writes)", over(find("conn", "stream", 4096).MBPerS, find("unix", "stream", 4096).MBPerS), 2, true)
	if c, u := lat["grpc-unary/conn"], lat["grpc-unary/unix"]; c.P50ns > 0 && u.P50ns > 0 {
		goal(w, "gRPC unary p50 over conn / over unix", c.P50ns/u.P50ns, 0.5, false)
	}
	if c, u := rate(d.peers, "grpc-stream", "conn", 64), rate(d.peers, "grpc-stream", "unix", 64); c > 0 && u > 0 {
		goal(w, "gRPC streaming messages/s over conn / over unix (64 B)", c/u, 1, true)
	}
	w.WriteString("\n")
}

// markdown writes the generated part and returns the charts to draw.
func (d *benchData) markdown(img string) (string, map[string]*chart.Chart) {
	var w strings.Builder
	charts := map[string]*chart.Chart{}
	fmt.Fprintf(&w, "## Latest results (generated by `%s`)\n\n", d.command)
	fmt.Fprintf(&w, "Machine: %s. Cross-process: one sender thread and one receiver thread in two processes (shm unless marked). Medians of the repetitions, which take turns between the modes (limit and raw; send, write, trad and ovfl; the shuffle implementations) so that a ratio compares runs of the same spell of the machine; the receiver times from its first call after the warm-up to its last.\n\n", d.machine)

	modes := []string{"limit", "raw", "send", "write", "trad", "ovfl"}
	sizes := sizesOf(d.micro)
	w.WriteString("### Table 2: calls/s and payload MB/s\n\n| mode |")
	for _, s := range sizes {
		fmt.Fprintf(&w, " %d B calls/s | %d B MB/s |", s, s)
	}
	w.WriteString("\n|---|")
	for range sizes {
		w.WriteString("---:|---:|")
	}
	w.WriteString("\n")
	t2 := &chart.Chart{Title: "table 2: calls/s by payload size (shm)", YLabel: "calls/s"}
	for _, s := range sizes {
		t2.Categories = append(t2.Categories, strconv.Itoa(s)+" b")
	}
	for _, m := range modes {
		fmt.Fprintf(&w, "| %s |", m)
		ser := chart.Series{Name: m}
		for _, s := range sizes {
			c := rate(d.micro, m, "shm", s)
			fmt.Fprintf(&w, " %.0f | %.1f |", c, c*float64(s)/1e6)
			ser.Values = append(ser.Values, c)
		}
		w.WriteString("\n")
		t2.Series = append(t2.Series, ser)
	}
	charts["table2.png"] = t2
	fmt.Fprintf(&w, "\n![Table 2](%s/table2.png)\n\n", img)

	// Fig. 2
	fig := &chart.Chart{Title: "fig. 2: raw one-sided writes, calls/s by record size", YLabel: "calls/s", LogX: true}
	fsizes := sizesOf(d.fig2)
	for _, s := range fsizes {
		fig.X = append(fig.X, float64(s))
	}
	w.WriteString("### Fig. 2: raw one-sided writes (calls/s)\n\n| size (B) | shm | tcp |\n|---:|---:|---:|\n")
	for _, s := range fsizes {
		fmt.Fprintf(&w, "| %d | %.0f | %.0f |\n", s, rate(d.fig2, "raw", "shm", s), rate(d.fig2, "raw", "tcp", s))
	}
	for _, tr := range []string{"shm", "tcp"} {
		ser := chart.Series{Name: "raw " + tr}
		for _, s := range fsizes {
			ser.Values = append(ser.Values, rate(d.fig2, "raw", tr, s))
		}
		fig.Series = append(fig.Series, ser)
	}
	charts["fig2.png"] = fig
	fmt.Fprintf(&w, "\n![Fig. 2](%s/fig2.png)\n\n", img)

	// Latency
	w.WriteString("### Call-and-return latency\n\n| mode | transport | size (B) | p50 | p99 | p99.9 |\n|---|---|---:|---:|---:|---:|\n")
	var ours, netrpcLat float64
	lat := map[string]LatencyResult{} // mode/transport at 8 B
	for _, l := range d.lat {
		fmt.Fprintf(&w, "| %s | %s | %d | %v | %v | %v |\n", l.Mode, l.Transport, l.Size, time.Duration(l.P50ns), time.Duration(l.P99ns), time.Duration(l.P999ns))
		if l.Size == 8 {
			lat[l.Mode+"/"+l.Transport] = l
		}
		switch {
		case l.Mode == "call_return" && l.Transport == "shm" && l.Size == 8:
			ours = l.P50ns
		case l.Mode == "netrpc-unary" && l.Transport == "unix":
			netrpcLat = l.P50ns
		}
	}
	d.tcpSection(&w, lat)
	d.ofiSection(&w)
	d.connSection(&w, lat)
	d.rdmoSection(&w)
	d.shuffleSection(&w)

	// Peers
	w.WriteString("\n### Against Go RPC (bench/peers, unix socket)\n\n| size (B) | trad | write | grpc-stream | netrpc | trad / grpc-stream | trad / netrpc |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	pc := &chart.Chart{Title: "seriema (shm) vs go rpc (unix socket): calls/s", YLabel: "calls/s"}
	series := map[string]*chart.Series{}
	order := []string{"trad", "write", "grpc-stream", "netrpc"}
	for _, m := range order {
		series[m] = &chart.Series{Name: m}
	}
	for _, s := range sizes {
		tr, wr := rate(d.micro, "trad", "shm", s), rate(d.micro, "write", "shm", s)
		gs, nr := rate(d.peers, "grpc-stream", "unix", s), rate(d.peers, "netrpc", "unix", s)
		fmt.Fprintf(&w, "| %d | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", s, tr, wr, gs, nr, ratio(tr, gs), ratio(tr, nr))
		pc.Categories = append(pc.Categories, strconv.Itoa(s)+" b")
		for m, v := range map[string]float64{"trad": tr, "write": wr, "grpc-stream": gs, "netrpc": nr} {
			series[m].Values = append(series[m].Values, v)
		}
	}
	for _, m := range order {
		pc.Series = append(pc.Series, *series[m])
	}
	charts["peers.png"] = pc
	fmt.Fprintf(&w, "\n![peers](%s/peers.png)\n\n", img)

	// Goals
	w.WriteString("### The ratios of docs/design.md §9 in this run\n\n| ratio | measured | goal | |\n|---|---:|---:|---|\n")
	minOver := func(num, den string) float64 {
		m := 0.0
		for i, s := range sizes {
			r := over(rate(d.micro, num, "shm", s), rate(d.micro, den, "shm", s))
			if i == 0 || r < m {
				m = r
			}
		}
		return m
	}
	goal(&w, "raw / limit (lowest over sizes)", minOver("raw", "limit"), 0.5, true)
	// Issue 15 states this goal at 8 B and 64 B.
	goal(&w, "raw / limit, the lower of 8 B and 64 B", min(over(rate(d.micro, "raw", "shm", 8), rate(d.micro, "limit", "shm", 8)), over(rate(d.micro, "raw", "shm", 64), rate(d.micro, "limit", "shm", 64))), 0.5, true)
	goal(&w, "write / raw (lowest over sizes)", minOver("write", "raw"), 0.8, true)
	goal(&w, "ovfl / write (lowest over sizes)", minOver("ovfl", "write"), 0.9, true)
	goal(&w, "send / write (lowest over sizes)", minOver("send", "write"), 0.3, true)
	// Issue 15 states this goal at 8 B; the row above holds every size to it.
	goal(&w, "send / write at 8 B", over(rate(d.micro, "send", "shm", 8), rate(d.micro, "write", "shm", 8)), 0.3, true)
	goal(&w, "trad / raw at 8 B", over(rate(d.micro, "trad", "shm", 8), rate(d.micro, "raw", "shm", 8)), 2, true)
	goal(&w, "trad / limit at 8 B", over(rate(d.micro, "trad", "shm", 8), rate(d.micro, "limit", "shm", 8)), 0.5, true)
	goal(&w, "trad / grpc-stream at 64 B", over(rate(d.micro, "trad", "shm", 64), rate(d.peers, "grpc-stream", "unix", 64)), 20, true)
	goal(&w, "trad / netrpc at 64 B", over(rate(d.micro, "trad", "shm", 64), rate(d.peers, "netrpc", "unix", 64)), 20, true)
	goal(&w, "latency p50 at 8 B (µs)", ours/1000, 2, false)
	goal(&w, "net/rpc p50 / ours", over(netrpcLat, ours), 10, true)
	if len(d.idle) > 0 {
		// make bench runs mctsbench idle three times: a 2-process job on
		// one machine's default transport (shm), then over tcp with plain
		// Go TCP beside it, then a larger job over tcp (CPU only: a
		// process's connections grow with the job).
		worst, wake, pipe, tcpWake, tcpPlain := 0.0, 0.0, 0.0, 0.0, 0.0
		type job struct {
			procs     int
			transport string
		}
		var larger []job
		worstOf := map[job]float64{}
		for _, r := range d.idle {
			switch {
			case r.Mode == "idle" && r.Procs > 2:
				j := job{r.Procs, r.Transport}
				if _, ok := worstOf[j]; !ok {
					larger = append(larger, j)
				}
				worstOf[j] = max(worstOf[j], 100*r.CPUShare)
			case r.Mode == "idle":
				worst = max(worst, 100*r.CPUShare)
			case r.Mode == "wake" && r.Transport == "tcp":
				tcpWake = r.P50ns / 1000
			case r.Mode == "wake" && wake == 0:
				wake = r.P50ns / 1000
			case r.Mode == "pipe-wake" && pipe == 0:
				pipe = r.P50ns / 1000
			case r.Mode == "tcp-plain-wake":
				tcpPlain = r.P50ns / 1000
			}
		}
		goal(&w, "idle job: CPU per process, highest (% of a core)", worst, 5, false)
		for _, j := range larger {
			goal(&w, fmt.Sprintf("idle %d-process %s job: CPU per process, highest (%% of a core)", j.procs, j.transport), worstOf[j], 5, false)
		}
		goal(&w, "first call after 100 ms idle, p50 (µs)", wake, 50, false)
		if pipe > 0 {
			// The floor: a pipe round trip to a process asleep as long.
			goal(&w, "first call after idle / plain pipe round trip after idle, p50", wake/pipe, 2, false)
		}
		if tcpWake > 0 && tcpPlain > 0 {
			// Over tcp the floor is Go's own: a plain TCP round trip to a
			// process asleep as long, through the same loopback.
			goal(&w, "first call after idle over tcp / plain Go TCP round trip after idle, p50", tcpWake/tcpPlain, 2, false)
		}
	}

	if len(d.scale) > 0 {
		w.WriteString("\n### Fig. 3: MCTS on Hex (simulations/ms)\n\n`seqN` is N sequential searches at once: what the machine gives N workers that never coordinate. `× seqN` is a PxT configuration against seqN with N = P×T. `× 1x1` is the ratio of the medians; `× 1x1 by round` the range of each round's run against the 1x1 run of the same round, seconds apart (a wide range: a spell of the machine hit some runs). The steady columns leave out each run's first moves (`warmup_moves`), in which every process still grows its Go runtime's span and arena metadata (its heap is faulted in before the search, `-pretouch`, 64 MiB, and its messenger chunks and call rings where they are allocated).\n\n| config | simulations/ms | visits/ms | × seq | × 1x1 | × 1x1 by round | × seqN | steady simulations/ms | steady × seq | steady × 1x1 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range d.scale {
			fmt.Fprintf(&w, "| %s | %.0f | %.1f | %.2f | %.2f | %s | %s | %.0f | %s | %s |\n", r.Config, r.SimulationsPerMs, r.VisitsPerMs, r.VsSeq, r.Vs1x1, roundsText(r.Vs1x1Rounds), ratioOrDash(r.VsCeiling),
				r.SteadySimulationsPerMs, ratioOrDash(r.SteadyVsSeq), ratioOrDash(r.SteadyVs1x1))
		}
		fmt.Fprintf(&w, "\n![Fig. 3](%s/scale.png)\n", img)
	}
	w.WriteString("\n")
	return w.String(), charts
}

// shuffleSection shows repartition and broadcast over package shuffle's
// designs beside the plain-socket version, with the goals of issue 18 that
// this run can check.
func (d *benchData) shuffleSection(w *strings.Builder) {
	if len(d.shuffle) == 0 {
		return
	}
	w.WriteString("\n### Shuffle: repartition and broadcast against plain sockets, same run\n\n")
	w.WriteString("`mctsbench shuffle`: a job of self-launched processes; every thread generates 100-byte records and shuffles them by a hash (repartition) or to every process (broadcast) through 16 KiB buffers. `wr`, `rd` and `sr` are package shuffle's designs (one-sided write, one-sided read, send/receive), `socket` the same operators over one plain Go TCP connection per pair of processes, batching to the same buffer size (seed 000's baseline). GB/s per process: record bytes a process received over its time, averaged over the processes; the median of the runs, with their range (the implementations of one command take turns run by run, `-reps`; make bench runs one command per round with the MPI peer in turns with it, and each line is the median over the rounds); ok: every process received exactly what was sent to it (counts and checksums), in every run.\n\n| pattern | impl | config | buffers | transport | procs × threads | MiB per process | GB/s per process | runs (range) | ok |\n|---|---|---|---|---|---|---:|---:|---|---|\n")
	best := map[string]float64{}
	bufs := map[string]float64{} // the best repartition over shm, by buffers
	peer := map[string]float64{} // pattern/impl of the peers
	var joins []ShuffleResult
	for _, r := range d.shuffle {
		if r.Pattern == "join" {
			joins = append(joins, r)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d × %d | %d | %.2f | %s | %v |\n", r.Pattern, r.Impl, r.Config, cmp.Or(r.Buffers, "–"), r.Transport, r.Procs, r.Threads, r.Bytes>>20, r.GBPerSPerProc, r.runs("%.2f"), r.OK)
		if r.Pattern == "repartition" && r.Buffers != "" && r.OK && r.Transport == "shm" {
			bufs[r.Buffers] = max(bufs[r.Buffers], r.GBPerSPerProc)
		}
		switch {
		case r.Impl == "memcpy": // one ceiling for every pattern
			peer["repartition/memcpy"], peer["broadcast/memcpy"] = r.GBPerSPerProc, r.GBPerSPerProc
		case r.Impl == "socket" || r.Impl == "mpi":
			peer[r.Pattern+"/"+r.Impl] = r.GBPerSPerProc
		case r.OK && r.Transport == "shm": // the goals are shm's, beside the peers on one machine
			best[r.Pattern] = max(best[r.Pattern], r.GBPerSPerProc)
		}
	}
	w.WriteString("\n| ratio | measured | goal | |\n|---|---:|---:|---|\n")
	for _, p := range []string{"repartition", "broadcast"} {
		for _, g := range []struct {
			impl string
			want float64
		}{{"socket", 2}, {"mpi", 1.5}, {"memcpy", 0.5}} {
			v := 0.0
			if x := peer[p+"/"+g.impl]; x > 0 {
				v = best[p] / x
			}
			goal(w, p+": best of wr, rd, sr / "+g.impl, v, g.want, true)
		}
	}
	if bufs["adaptive"] > 0 && bufs["fixed"] > 0 {
		goal(w, "repartition: adaptive / fixed windows (seed 004 §6: as good or better)", bufs["adaptive"]/bufs["fixed"], 0.9, true)
	}
	if len(joins) > 0 {
		w.WriteString("\nThe two-stage join (`mctsbench shuffle join`, a TPC-H Q3/Q4-shaped query: repartition orders and line items on the order key, hash-join, repartition the partial sums on the group key; ok: equal to the query run in one process over all the data), seconds at the slowest process, median of the runs, at each size make bench runs (orders per process, about 4 line items each):\n\n| orders | impl | config | transport | procs × threads | seconds | runs (range) | ok |\n|---:|---|---|---|---|---:|---|---|\n")
		var sizes []int
		fastest, socketJoin := map[int]float64{}, map[int]float64{}
		for _, r := range joins {
			if !slices.Contains(sizes, r.Orders) {
				sizes = append(sizes, r.Orders)
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %d × %d | %.3f | %s | %v |\n", r.Orders, r.Impl, r.Config, r.Transport, r.Procs, r.Threads, r.Seconds, r.runs("%.3f"), r.OK)
			switch {
			case r.Impl == "socket":
				socketJoin[r.Orders] = r.Seconds
			case r.OK && (fastest[r.Orders] == 0 || r.Seconds < fastest[r.Orders]):
				fastest[r.Orders] = r.Seconds
			}
		}
		w.WriteString("\n| ratio | measured | goal | |\n|---|---:|---:|---|\n")
		for _, n := range sizes {
			v := 0.0
			if fastest[n] > 0 {
				v = socketJoin[n] / fastest[n]
			}
			goal(w, fmt.Sprintf("join, %d orders per process: socket seconds / best of wr, rd, sr seconds", n), v, 1.5, true)
		}
	}
	w.WriteString("\nThe MPI peer is bench/mpi/csrc/shuffle.c under Open MPI's mpirun (MPI_Alltoallv for repartition, MPI_Allgather for broadcast; the same records; its time includes packing by destination and reading every record that arrived, as our receivers do, and its ok checks each one's destination, or in a broadcast its sender and index; in make bench it runs once per round, in turns with our implementations). `memcpy` is the ceiling: the same records generated and copied, batched, within each process. Over tcp our designs run on dtutils' tcp transport between the processes, and over ofi-tcp and ofi-shm on libfabric's tcp and shm providers (builds with -tags ofi), for reference: the goals are stated for one machine, over shm.\n\n")
}
