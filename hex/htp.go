package hex

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// HTP is a Hex engine speaking the Hex Text Protocol (GTP's syntax with Hex
// commands) so GUIs such as HexGui and other engines can drive it. Replies
// are "= result" or "? message", each followed by a blank line; a command
// may start with a numeric id, which the reply repeats.
type HTP struct {
	// Name and Version answer the commands of those names.
	Name, Version string
	// GenMove chooses a move for the side to move of b (set to the colour
	// genmove asked for) within limit (0: no time limit, the engine's own
	// budget alone). Required.
	GenMove func(ctx context.Context, b Board, limit time.Duration) (Cell, error)
	// MoveTime, if positive, is every genmove's time limit, whatever the
	// clock commands say (mctsbench htp -time).
	MoveTime time.Duration
	// Now returns the time (default time.Now); tests set it.
	Now func() time.Time

	board   Board
	history []Board // positions before each play or genmove (undo)
	clock   clock
}

// clock is the time control of the clock commands (GTP's time_settings and
// time_left): main time, then byo-yomi periods of byoTime for byoStones
// moves, and what each colour has left.
type clock struct {
	main, byoTime time.Duration
	byoStones     int
	left          [2]time.Duration // by colour (Black-1, White-1)
	stones        [2]int           // moves left in the current byo-yomi period; 0: main time
}

// moveMargin is kept back from every time-limited move for the reply and
// the GUI's clock granularity.
const moveMargin = 50 * time.Millisecond

// limit returns the time a move of col may take, 0 without time control:
// the colour's time left spread over the moves it still has to make (half
// the empty cells, at least 4) in main time, or over the stones left in a
// byo-yomi period, plus one byo-yomi move's share while in main time, less
// a margin; never below 10 ms.
func (c *clock) limit(col Color, empty int) time.Duration {
	if c.main == 0 && c.byoTime == 0 {
		return 0
	}
	i := col - 1
	var per time.Duration
	if c.stones[i] > 0 {
		per = c.left[i] / time.Duration(c.stones[i])
	} else {
		per = c.left[i] / time.Duration(max(empty/2, 4))
		if c.byoStones > 0 {
			per += c.byoTime / time.Duration(c.byoStones)
		}
	}
	return max(per*9/10-moveMargin, 10*time.Millisecond)
}

// spend takes a move's time off col's clock, entering byo-yomi when main
// time runs out and starting a new period when one's stones are played.
func (c *clock) spend(col Color, d time.Duration) {
	if c.main == 0 && c.byoTime == 0 {
		return
	}
	i := col - 1
	c.left[i] -= d
	if c.stones[i] > 0 {
		if c.stones[i]--; c.stones[i] == 0 && c.left[i] > 0 {
			c.left[i], c.stones[i] = c.byoTime, c.byoStones
		}
	}
	if c.left[i] <= 0 && c.stones[i] == 0 && c.byoStones > 0 {
		c.left[i], c.stones[i] = c.byoTime, c.byoStones
	}
	c.left[i] = max(c.left[i], 0)
}

// htpCommands are the commands list_commands reports, in order.
var htpCommands = []string{"name", "version", "protocol_version", "list_commands", "known_command", "boardsize", "clear_board", "play", "genmove", "undo", "showboard", "final_score", "time_settings", "time_left", "hexgui-analyze_commands", "quit"}

// htpAnalyze is what hexgui-analyze_commands offers HexGui's analyze menu:
// type/label/command lines.
const htpAnalyze = "string/Show board/showboard\nstring/Final score/final_score\nstring/Time left/time_left"

// Serve reads commands from r and answers on w until quit, the end of r or
// ctx's end. It starts with an empty 11×11 board.
func (e *HTP) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	e.board, _ = New(DefaultSize)
	e.history = e.history[:0]
	if e.Now == nil {
		e.Now = time.Now
	}
	in := bufio.NewScanner(r)
	out := bufio.NewWriter(w)
	for in.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		line := strings.TrimSpace(strings.SplitN(in.Text(), "#", 2)[0])
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		id := ""
		if _, err := strconv.Atoi(fields[0]); err == nil {
			id, fields = fields[0], fields[1:]
			if len(fields) == 0 {
				fmt.Fprintf(out, "?%s missing command\n\n", id)
				out.Flush()
				continue
			}
		}
		res, err := e.command(ctx, fields[0], fields[1:])
		if err != nil {
			fmt.Fprintf(out, "?%s %s\n\n", id, err)
		} else {
			fmt.Fprintf(out, "=%s %s\n\n", id, res)
		}
		if err := out.Flush(); err != nil {
			return err
		}
		if fields[0] == "quit" {
			return nil
		}
	}
	return in.Err()
}

func parseColor(s string) (Color, error) {
	switch strings.ToLower(s) {
	case "b", "black":
		return Black, nil
	case "w", "white":
		return White, nil
	}
	return Empty, fmt.Errorf("invalid color %q (want b or w)", s)
}

func (e *HTP) command(ctx context.Context, cmd string, args []string) (string, error) {
	want := func(n int) error {
		if len(args) != n {
			return fmt.Errorf("%s takes %d argument(s), got %d", cmd, n, len(args))
		}
		return nil
	}
	switch cmd {
	case "name":
		return e.Name, nil
	case "version":
		return e.Version, nil
	case "protocol_version":
		return "2", nil
	case "list_commands":
		return strings.Join(htpCommands, "\n"), nil
	case "known_command":
		if err := want(1); err != nil {
			return "", err
		}
		for _, c := range htpCommands {
			if c == args[0] {
				return "true", nil
			}
		}
		return "false", nil
	case "hexgui-analyze_commands":
		return htpAnalyze, nil
	case "undo":
		if len(e.history) == 0 {
			return "", fmt.Errorf("cannot undo: no move played")
		}
		e.board = e.history[len(e.history)-1]
		e.history = e.history[:len(e.history)-1]
		return "", nil
	case "final_score":
		switch e.board.Winner() {
		case Black:
			return "B+", nil
		case White:
			return "W+", nil
		}
		return "", fmt.Errorf("the game is not over")
	case "time_settings":
		return "", e.timeSettings(args)
	case "time_left":
		return e.timeLeft(args)
	case "quit":
		return "", nil
	case "showboard":
		return "\n" + strings.TrimRight(e.board.String(), "\n"), nil
	case "clear_board":
		e.board, _ = New(e.board.Size())
		e.history = e.history[:0]
		e.clock.reset()
		return "", nil
	case "boardsize":
		if err := want(1); err != nil {
			return "", err
		}
		n, err := strconv.Atoi(args[0])
		if err != nil {
			return "", fmt.Errorf("invalid size %q", args[0])
		}
		b, err := New(n)
		if err != nil {
			return "", fmt.Errorf("unacceptable size %d (want 1…%d)", n, MaxSize)
		}
		e.board = b
		e.history = e.history[:0]
		e.clock.reset()
		return "", nil
	case "play":
		if err := want(2); err != nil {
			return "", err
		}
		col, err := parseColor(args[0])
		if err != nil {
			return "", err
		}
		c, err := ParseCell(args[1], e.board.Size())
		if err != nil {
			return "", fmt.Errorf("invalid move %q: %w", args[1], err)
		}
		if e.board.Winner() != Empty {
			return "", ErrGameOver
		}
		before := e.board
		if err := e.board.PlayColor(col, c); err != nil {
			return "", fmt.Errorf("illegal move %s: %w", args[1], err)
		}
		e.history = append(e.history, before)
		return "", nil
	case "genmove":
		if err := want(1); err != nil {
			return "", err
		}
		col, err := parseColor(args[0])
		if err != nil {
			return "", err
		}
		if e.board.Winner() != Empty {
			return "", ErrGameOver
		}
		b := e.board
		b.SetToMove(col)
		limit := e.MoveTime
		if limit <= 0 {
			limit = e.clock.limit(col, b.Cells()-b.Stones())
		}
		t0 := e.Now()
		c, err := e.GenMove(ctx, b, limit)
		if err != nil {
			return "", fmt.Errorf("genmove: %w", err)
		}
		e.clock.spend(col, e.Now().Sub(t0))
		before := e.board
		if err := e.board.PlayColor(col, c); err != nil {
			return "", fmt.Errorf("genmove chose %s: %w", e.board.CellName(c), err)
		}
		e.history = append(e.history, before)
		return e.board.CellName(c), nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

func (c *clock) reset() {
	for i := range c.left {
		c.left[i], c.stones[i] = c.main, 0
	}
	if c.main == 0 && c.byoStones > 0 {
		for i := range c.stones {
			c.left[i], c.stones[i] = c.byoTime, c.byoStones
		}
	}
}

// seconds parses a non-negative whole number of seconds (GTP's unit).
func seconds(s string) (time.Duration, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid time %q (want whole seconds ≥ 0)", s)
	}
	return time.Duration(n) * time.Second, nil
}

// timeSettings is GTP's time_settings MAIN BYO_YOMI_TIME BYO_YOMI_STONES,
// in seconds: main time, then periods of BYO_YOMI_TIME for BYO_YOMI_STONES
// moves; 0 0 0 (or byo-yomi time with 0 stones) means no time limit.
func (e *HTP) timeSettings(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("time_settings takes 3 arguments (main time, byo-yomi time, byo-yomi stones), got %d", len(args))
	}
	main, err := seconds(args[0])
	if err != nil {
		return err
	}
	byo, err := seconds(args[1])
	if err != nil {
		return err
	}
	stones, err := strconv.Atoi(args[2])
	if err != nil || stones < 0 {
		return fmt.Errorf("invalid stone count %q", args[2])
	}
	if stones == 0 {
		byo = 0 // GTP: byo-yomi without stones is no time limit
	}
	e.clock = clock{main: main, byoTime: byo, byoStones: stones}
	e.clock.reset()
	return nil
}

// timeLeft is GTP's time_left COLOR TIME STONES (what the GUI's clock
// says: TIME seconds left, STONES moves left in the byo-yomi period, 0 in
// main time); with no arguments or a colour alone (the Hex tournament
// scripts' query) it answers the seconds left of the side to move or of
// that colour.
func (e *HTP) timeLeft(args []string) (string, error) {
	switch len(args) {
	case 0, 1:
		col := e.board.ToMove()
		if len(args) == 1 {
			var err error
			if col, err = parseColor(args[0]); err != nil {
				return "", err
			}
		}
		if e.clock.main == 0 && e.clock.byoTime == 0 {
			return "", fmt.Errorf("no time control (time_settings)")
		}
		return strconv.Itoa(int(e.clock.left[col-1] / time.Second)), nil
	case 3:
		col, err := parseColor(args[0])
		if err != nil {
			return "", err
		}
		left, err := seconds(args[1])
		if err != nil {
			return "", err
		}
		stones, err := strconv.Atoi(args[2])
		if err != nil || stones < 0 {
			return "", fmt.Errorf("invalid stone count %q", args[2])
		}
		if e.clock.main == 0 && e.clock.byoTime == 0 {
			// A GUI that sends only time_left still sets a clock: main
			// time as given, no byo-yomi.
			e.clock.main = left
		}
		e.clock.left[col-1], e.clock.stones[col-1] = left, stones
		return "", nil
	}
	return "", fmt.Errorf("time_left takes 0, 1 or 3 arguments, got %d", len(args))
}
