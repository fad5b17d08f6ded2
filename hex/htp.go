package hex

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// HTP is a Hex engine speaking the Hex Text Protocol (GTP's syntax with Hex
// commands) so GUIs such as HexGui and other engines can drive it. Replies
// are "= result" or "? message", each followed by a blank line; a command
// may start with a numeric id, which the reply repeats.
type HTP struct {
	// Name and Version answer the commands of those names.
	Name, Version string
	// GenMove chooses a move for the side to move of b (set to the colour
	// genmove asked for). Required.
	GenMove func(ctx context.Context, b Board) (Cell, error)

	board Board
}

// htpCommands are the commands list_commands reports, in order.
var htpCommands = []string{"name", "version", "protocol_version", "list_commands", "boardsize", "clear_board", "play", "genmove", "showboard", "quit"}

// Serve reads commands from r and answers on w until quit, the end of r or
// ctx's end. It starts with an empty 11×11 board.
func (e *HTP) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	e.board, _ = New(DefaultSize)
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
	case "quit":
		return "", nil
	case "showboard":
		return "\n" + strings.TrimRight(e.board.String(), "\n"), nil
	case "clear_board":
		e.board, _ = New(e.board.Size())
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
		if err := e.board.PlayColor(col, c); err != nil {
			return "", fmt.Errorf("illegal move %s: %w", args[1], err)
		}
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
		c, err := e.GenMove(ctx, b)
		if err != nil {
			return "", fmt.Errorf("genmove: %w", err)
		}
		if err := e.board.PlayColor(col, c); err != nil {
			return "", fmt.Errorf("genmove chose %s: %w", e.board.CellName(c), err)
		}
		return e.board.CellName(c), nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}
