package hex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestHTPSession runs a scripted session through every command and the
// error cases, checking each reply's format.
func TestHTPSession(t *testing.T) {
	e := &HTP{Name: "seriema", Version: "1.0", GenMove: func(ctx context.Context, b Board, _ time.Duration) (Cell, error) {
		moves := b.Moves(nil)
		if len(moves) == 0 {
			return 0, errors.New("no moves")
		}
		return moves[0], nil
	}}
	script := []struct{ cmd, reply string }{
		{"name", "= seriema"},
		{"version", "= 1.0"},
		{"7 protocol_version", "=7 2"},
		{"list_commands", "= " + strings.Join(htpCommands, "\n")},
		{"boardsize 3", "= "},
		{"boardsize 0", "? unacceptable size 0 (want 1…19)"},
		{"boardsize x", `? invalid size "x"`},
		{"boardsize", "? boardsize takes 1 argument(s), got 0"},
		{"play b b2", "= "},
		{"play w b2", "? illegal move b2: hex: cell is occupied: b2"},
		{"play w z9", `? invalid move "z9": hex: malformed or off-board cell: "z9" is off a 3×3 board`},
		{"play w 9", `? invalid move "9": hex: malformed or off-board cell: "9"`},
		{"play w d1", `? invalid move "d1": hex: malformed or off-board cell: "d1" is off a 3×3 board`},
		{"play x a1", `? invalid color "x" (want b or w)`},
		{"play w", "? play takes 2 argument(s), got 1"},
		{"genmove w", "= a1"},
		{"genmove q", `? invalid color "q" (want b or w)`},
		{"showboard", "= \n    a b c\n  1 O . .\n   2 . X .\n    3 . . ."},
		{"frobnicate", `? unknown command "frobnicate"`},
		{"play b b1", "= "},
		{"play b b3", "= "},
		{"genmove w", "? hex: the game is over"},
		{"play w c3", "? hex: the game is over"},
		{"clear_board", "= "},
		{"genmove b", "= a1"},
		{"quit", "= "},
		{"name", ""}, // after quit: no reply
	}
	runScript(t, e, script)
}

// runScript plays a session of commands and checks each reply.
func runScript(t *testing.T, e *HTP, script []struct{ cmd, reply string }) {
	t.Helper()
	var in strings.Builder
	for _, s := range script {
		in.WriteString(s.cmd + "\n")
	}
	var out bytes.Buffer
	if err := e.Serve(context.Background(), strings.NewReader(in.String()), &out); err != nil {
		t.Fatal(err)
	}
	replies := strings.Split(out.String(), "\n\n")
	for i, s := range script {
		if s.reply == "" {
			if i < len(replies)-1 {
				t.Errorf("%q: got a reply after quit", s.cmd)
			}
			continue
		}
		if i >= len(replies) {
			t.Fatalf("%q: no reply", s.cmd)
		}
		if got := replies[i]; got != s.reply {
			t.Errorf("%q: reply %q, want %q", s.cmd, got, s.reply)
		}
	}
}

// clockedEngine returns an engine on a fake clock whose every genmove
// search takes 2 s and plays the first empty cell, and the limits its
// searches were given.
func clockedEngine() (*HTP, *[]time.Duration) {
	now := time.Unix(0, 0)
	limits := new([]time.Duration)
	return &HTP{Name: "seriema", Version: "1.0",
		Now: func() time.Time { return now },
		GenMove: func(ctx context.Context, b Board, limit time.Duration) (Cell, error) {
			*limits = append(*limits, limit)
			now = now.Add(2 * time.Second)
			return b.Moves(nil)[0], nil
		}}, limits
}

// TestHTPClock: a HexGui-like dialogue with time controls, undo and the
// final score. genmove gets the time limit the clock commands give (main
// time spread over the moves left, a byo-yomi period's share, -time's
// fixed limit), the engine's time is taken off its clock, and undo takes
// back plays and generated moves alike.
func TestHTPClock(t *testing.T) {
	e, lim := clockedEngine()
	script := []struct{ cmd, reply string }{
		{"boardsize 5", "= "},
		{"known_command time_left", "= true"},
		{"known_command frobnicate", "= false"},
		{"hexgui-analyze_commands", "= " + htpAnalyze},
		{"undo", "? cannot undo: no move played"},
		{"final_score", "? the game is not over"},
		{"time_left", "? no time control (time_settings)"},
		{"genmove b", "= a1"}, // no clock: no limit
		{"undo", "= "},
		{"time_settings 60 0 0", "= "},
		{"genmove b", "= a1"}, // 60 s over 12 moves, 90 %, less 50 ms
		{"time_left b", "= 58"},
		{"time_left", "= 60"}, // White to move, untouched
		{"time_left w 10 5", "= "},
		{"genmove w", "= b1"}, // byo-yomi: 10 s for 5 stones
		{"time_left w", "= 8"},
		{"time_settings 60 x 1", `? invalid time "x" (want whole seconds ≥ 0)`},
		{"time_settings 1 2", "? time_settings takes 3 arguments (main time, byo-yomi time, byo-yomi stones), got 2"},
		{"time_left w 10", "? time_left takes 0, 1 or 3 arguments, got 2"},
		{"undo", "= "},
		{"undo", "= "},
		{"undo", "? cannot undo: no move played"},
		{"play b a1", "= "},
		{"play b a2", "= "},
		{"play b a3", "= "},
		{"play b a4", "= "},
		{"play b a5", "= "},
		{"final_score", "= B+"},
		{"undo", "= "},
		{"final_score", "? the game is not over"},
		{"quit", "= "},
	}
	runScript(t, e, script)
	limits := *lim
	want := []time.Duration{0, 60*time.Second/12*9/10 - moveMargin, 10*time.Second/5*9/10 - moveMargin}
	if len(limits) != len(want) {
		t.Fatalf("genmove limits %v, want %v", limits, want)
	}
	for i := range want {
		if limits[i] != want[i] {
			t.Errorf("genmove %d: limit %v, want %v", i, limits[i], want[i])
		}
	}
	// -time overrides the clock.
	e.MoveTime, *lim = 3*time.Second, nil
	runScript(t, e, []struct{ cmd, reply string }{{"time_settings 600 0 0", "= "}, {"genmove b", "= a1"}})
	limits = *lim
	if len(limits) != 1 || limits[0] != 3*time.Second {
		t.Fatalf("with MoveTime 3 s: limits %v", limits)
	}
}

// TestHTPByoYomiPeriods: with byo-yomi only (time_settings 0 10 2), each
// period gives 10 s for 2 moves; its last move, played in time, starts
// the next period with the full 10 s again.
func TestHTPByoYomiPeriods(t *testing.T) {
	e, lim := clockedEngine()
	runScript(t, e, []struct{ cmd, reply string }{
		{"boardsize 5", "= "},
		{"time_settings 0 10 2", "= "},
		{"genmove b", "= a1"},
		{"time_left b", "= 8"},
		{"genmove w", "= b1"},
		{"genmove b", "= c1"}, // the period's last stone, 6 s left: a new period
		{"time_left b", "= 10"},
		{"genmove w", "= d1"},
		{"genmove b", "= e1"},
		{"time_left b", "= 8"},
	})
	limits := *lim
	per := func(left time.Duration, stones int) time.Duration {
		return left/time.Duration(stones)*9/10 - moveMargin
	}
	want := []time.Duration{per(10*time.Second, 2), per(10*time.Second, 2), per(8*time.Second, 1), per(8*time.Second, 1), per(10*time.Second, 2)}
	if fmt.Sprint(limits) != fmt.Sprint(want) {
		t.Fatalf("genmove limits %v, want %v", limits, want)
	}
}

// TestHTPGameRecord: comments after a command are ignored, a new board
// size or a cleared board starts a new record (nothing to undo, full
// clocks), the final score names the side that connected, and times are
// whole seconds ≥ 0.
func TestHTPGameRecord(t *testing.T) {
	e, _ := clockedEngine()
	script := []struct{ cmd, reply string }{
		{"boardsize 3 # three by three", "= "},
		{"play w a1 # White's first stone", "= "},
		{"play w b1", "= "},
		{"final_score", "? the game is not over"},
		{"play w c1", "= "},
		{"final_score", "= W+"},
		{"boardsize 3", "= "},
		{"undo", "? cannot undo: no move played"},
		{"time_settings -5 0 0", `? invalid time "-5" (want whole seconds ≥ 0)`},
		{"time_settings 30 0 0", "= "},
		{"genmove b", "= a1"}, // 2 s of Black's 30
		{"time_left b", "= 28"},
		{"clear_board", "= "},
		{"time_left b", "= 30"},
		{"undo", "? cannot undo: no move played"},
	}
	runScript(t, e, script)
}
