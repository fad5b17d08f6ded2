// Command mctsbench runs Seriema for Go's distributed MCTS Hex demo and the
// paper's microbenchmarks.
//
//	mctsbench demo    [-procs P] [-threads T] [-board N] [-visits V] [-moves M] ...
//	mctsbench micro   [-mode limit,raw,send,write,trad,ovfl] [-sizes 8,64,256] [-n N]
//	                  [-reps R (the modes take turns)] [-transport shm|tcp|ofi] [-json]
//	mctsbench latency [-size 8] [-n N] [-json]
//	mctsbench htp     (Hex engine on stdin/stdout)
//	mctsbench scale   [-configs seq,1x1,1x2,2x1] [-visits V] [-moves M] [-png F] [-json]
//	mctsbench report  [-dir bench-results] [-doc docs/benchmarks.md] [-img docs/img]
//	mctsbench soak    [-procs 3] [-threads 2] [-duration 30s] [-transport shm|tcp|ofi] [-json]
//	mctsbench idle    [-procs 2] [-duration 10s] [-hot D] [-wakes 20] [-transport shm|tcp|ofi] [-json]
//	                  (idle CPU, then calls after 100 ms idle beside a plain pipe, and plain Go TCP over tcp)
//	mctsbench conn    [-modes conn,unix,tcp] [-n N] [-stream-sizes 64,4096,65536] [-json]
//	mctsbench rdmo    [-transports shm,tcp] [-initiators 1,4] [-n N] [-json]
//	mctsbench shuffle repartition|broadcast|join [-procs 2] [-threads 1] [-impl wr,rd,sr,socket,memcpy]
//	                  [-buffers fixed,adaptive] [-reps R] [-mb 256] [-orders N] [-json]
//
// See docs/design.md §8.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
)

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: mctsbench demo|micro|latency|htp|scale|report|soak|idle|conn|rdmo|shuffle [flags]  (mctsbench SUBCOMMAND -h for flags)")
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	switch args[0] {
	case "micro":
		return micro(args[1:], stdin, stdout, stderr)
	case "latency":
		return latency(args[1:], stdout, stderr)
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "htp":
		return htp(args[1:], stdin, stdout, stderr)
	case "scale":
		return scale(args[1:], stdout, stderr)
	case "report":
		return report(args[1:], stdout, stderr)
	case "soak":
		return soak(args[1:], stdout, stderr)
	case "idle":
		return idle(args[1:], stdout, stderr)
	case "conn":
		return connBench(args[1:], stdout, stderr)
	case "rdmo":
		return rdmoBench(args[1:], stdout, stderr)
	case "shuffle":
		return shuffleBench(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "mctsbench: unknown subcommand %q\n", args[0])
	usage(stderr)
	return 2
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// check is one test of a command's flags: bad, and what to say then.
type check struct {
	bad bool
	msg string
}

// flagsOK writes the first failing check's message, after the command's
// name, and reports whether none failed.
func flagsOK(stderr io.Writer, cmd string, cs ...check) bool {
	for _, c := range cs {
		if c.bad {
			fmt.Fprintf(stderr, "mctsbench %s: %s\n", cmd, c.msg)
			return false
		}
	}
	return true
}

// errMsg is err's text, for a check that fails when err is not nil.
func errMsg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func micro(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("micro", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modes := fs.String("mode", "raw", "comma-separated modes: limit, raw, send, write, trad, ovfl")
	sizes := fs.String("sizes", "8,64,256", "comma-separated record sizes in bytes (multiples of 8)")
	n := fs.Int("n", 500000, "records per repetition (the first 10% are warm-up, not timed)")
	reps := fs.Int("reps", 3, "repetitions; the median is reported")
	transport := fs.String("transport", "", "\"\" (automatic per pair for the fabric modes; shm for raw and limit), shm, tcp or ofi (builds with -tags ofi; provider from FI_PROVIDER)")
	procs := fs.Int("procs", 2, "processes of the send benchmark (self-launched; mpirun/srun set their own)")
	asJSON := fs.Bool("json", false, "print one JSON object per result")
	cpuProfile := fs.String("cpuprofile", "", "write each rank's CPU profile to FILE.rankN (the second process of raw and limit: FILE.peer)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cpuProfile != "" {
		stop, err := startProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "mctsbench micro: %v\n", err)
			return 1
		}
		defer stop()
		// The self-launched second process of raw and limit profiles
		// itself too, to FILE.peer.
		os.Setenv(peerProfileEnv, *cpuProfile+".peer")
	}
	sz, err := parseSizes(*sizes)
	if !flagsOK(stderr, "micro",
		check{err != nil, "-sizes: " + errMsg(err)},
		check{*n < 10, fmt.Sprintf("-n %d (want ≥ 10)", *n)},
		check{*reps < 1, fmt.Sprintf("-reps %d (want ≥ 1)", *reps)}) {
		return 2
	}
	spec := rawSpec{transport: *transport, sizes: sz, n: *n, reps: *reps}
	var all []Result
	var fabricModes []string // run together in one job, after the others
	var pairModes []string   // limit and raw: each run starts its own second process
	ms := strings.Split(*modes, ",")
	for i, mode := range ms {
		if slices.Contains(ms[:i], mode) {
			fmt.Fprintf(stderr, "mctsbench micro: -mode names %s twice\n", mode)
			return 2
		}
		switch mode {
		case "raw", "limit":
			if underLauncher() {
				// They start their own second process; as a rank of a job
				// they would start one per rank.
				continue
			}
			pairModes = append(pairModes, mode)
		case "send", "write", "trad", "ovfl":
			fabricModes = append(fabricModes, mode)
		default:
			fmt.Fprintf(stderr, "mctsbench micro: unknown mode %q (want limit, raw, send, write, trad, ovfl)\n", mode)
			return 2
		}
	}
	if len(pairModes) > 0 {
		rs, err := takeTurns(pairModes, spec, map[string]func(rawSpec) ([]Result, error){"raw": runRaw, "limit": runLimit})
		if err != nil {
			fmt.Fprintf(stderr, "mctsbench micro: %v\n", err)
			return 1
		}
		all = append(all, rs...)
	}
	if len(fabricModes) > 0 {
		rs, err := runFabricModes(fabricModes, spec, *procs, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "mctsbench micro: %v\n", err)
			return 1
		}
		all = append(all, rs...)
	}
	if len(all) == 0 {
		return 0 // a rank other than 0: rank 0 prints
	}
	if err := printResults(stdout, all, *asJSON); err != nil {
		return 1
	}
	return 0
}

// takeTurns runs modes one repetition at a time, each mode once per
// round (raw / limit compares runs of the same spell of the machine, whose
// regime changes over minutes), and returns each mode's results, by size,
// as the median of its rounds.
func takeTurns(modes []string, spec rawSpec, run map[string]func(rawSpec) ([]Result, error)) ([]Result, error) {
	once := spec
	once.reps = 1
	rates := map[string][][]float64{} // mode → size index → rounds
	transports := map[string]string{}
	for rep := 0; rep < spec.reps; rep++ {
		for _, mode := range modes {
			rs, err := run[mode](once)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mode, err)
			}
			if len(rs) != len(spec.sizes) {
				return nil, fmt.Errorf("%s: %d results for %d sizes", mode, len(rs), len(spec.sizes))
			}
			if rates[mode] == nil {
				rates[mode] = make([][]float64, len(spec.sizes))
			}
			for i, r := range rs {
				rates[mode][i] = append(rates[mode][i], r.CallsPerS)
				transports[mode] = r.Transport
			}
		}
	}
	var out []Result
	for _, mode := range modes {
		for i, size := range spec.sizes {
			out = append(out, newResult(mode, transports[mode], size, spec.n, rates[mode][i]))
		}
	}
	return out, nil
}

// peerProfileEnv, set by micro -cpuprofile, makes the self-launched second
// process of raw and limit write its CPU profile to the file it names.
const peerProfileEnv = "SERIEMA_MICRO_PEER_PROFILE"

// asPeer runs f as a self-launched second process, profiled when asked.
func asPeer(f func() int) int {
	if path := os.Getenv(peerProfileEnv); path != "" {
		if out, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(out) == nil {
				defer func() { pprof.StopCPUProfile(); out.Close() }()
			}
		}
	}
	return f()
}

func main() {
	if os.Getenv(pipeEchoEnv) != "" {
		os.Exit(pipeEcho())
	}
	if env := os.Getenv(rawRoleEnv); env != "" {
		os.Exit(asPeer(func() int { return senderMain(env, os.Stdin, os.Stdout, os.Stderr) }))
	}
	if env := os.Getenv(limitEnv); env != "" {
		os.Exit(asPeer(func() int { return peerMain(env, os.Stderr) }))
	}
	if env := os.Getenv(connPeerEnv); env != "" {
		os.Exit(connPeer(env))
	}
	if env := os.Getenv(rdmoTargetEnv); env != "" {
		os.Exit(asPeer(func() int { return rdmoTargetMain(env) }))
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
