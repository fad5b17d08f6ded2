package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/seriema-go/seriema/hex"
	"github.com/seriema-go/seriema/mcts/hexgame"
)

// htp serves the Hex Text Protocol on stdin/stdout; genmove runs the
// configured search (sequential with -seq, else distributed) for -visits
// rollouts or the time the clock commands (time_settings, time_left) or
// -time allow, whichever ends first.
func htp(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("htp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demoOpts
	demoFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var searchNs int64 = 1
	e, err := startEngine(o, nil, &searchNs, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mctsbench htp: %v\n", err)
		return 1
	}
	if !e.rank0 {
		if _, err := e.close(); err != nil {
			fmt.Fprintf(stderr, "mctsbench htp: %v\n", err)
			return 1
		}
		return 0
	}
	engine := &hex.HTP{Name: "seriema-mcts", Version: "1.0", MoveTime: o.moveTime, GenMove: func(ctx context.Context, b hex.Board, limit time.Duration) (hex.Cell, error) {
		r, err := e.search(ctx, &hexgame.State{Board: b}, limit)
		if err != nil {
			return 0, err
		}
		return hex.Cell(r.Move), nil
	}}
	serr := engine.Serve(context.Background(), stdin, stdout)
	if _, err := e.close(); serr == nil {
		serr = err
	}
	if serr != nil {
		fmt.Fprintf(stderr, "mctsbench htp: %v\n", serr)
		return 1
	}
	return 0
}
