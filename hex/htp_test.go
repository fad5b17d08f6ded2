package hex

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestHTPSession runs a scripted session through every command and the
// error cases, checking each reply's format.
func TestHTPSession(t *testing.T) {
	e := &HTP{Name: "seriema", Version: "1.0", GenMove: func(ctx context.Context, b Board) (Cell, error) {
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
