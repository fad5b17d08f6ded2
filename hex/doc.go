// Package hex holds the rules of Hex for boards of any side from 1 to 19
// (11×11 by default), a fast allocation-free random playout, Zobrist
// hashing, a wire encoding and a Hex Text Protocol engine. It imports nothing
// from the rest of the project: package mcts searches it through a Game
// adapter.
//
// # Rules and names
//
// Black moves first and wins by joining the top row to the bottom row;
// White joins the left column to the right column. There are no draws: a
// filled board has exactly one winner. Cell (x, y) touches (x±1, y),
// (x, y±1), (x+1, y−1) and (x−1, y+1) — the convention of MoHex/Benzene,
// KataHex and Polygames. Cells are written column letter then row number:
// a1 is the top-left cell, k11 the bottom-right one of an 11×11 board.
//
//	b, _ := hex.New(11)
//	c, _ := hex.ParseCell("f6", b.Size())
//	_ = b.Play(c)           // Black plays f6; White is to move
//	fmt.Print(b.String())   // the rhombus, X for Black, O for White
//	w := b.Winner()         // hex.Empty until someone has connected
//
// # Playouts
//
// Playout fills the empty cells at random — the side to move gets
// ⌈empties/2⌉ of them, as strictly alternating random moves would give it
// (the C++ original ignored the side to move, a bias) — and checks the
// winner once. Stones are kept as row masks (and column masks for White), and
// the winner test sweeps reached sets down and up the rows, each sweep
// carrying connections as far as they go in one direction. A playout of an
// empty 11×11 board takes about 0.4 µs and allocates nothing
// (BenchmarkPlayout11). From the empty board Black wins exactly 2/3 of 3×3
// fills, 1/2 of 4×4 and 0.573283 of 5×5 (enumerated in the tests), about
// 0.523 of 11×11.
//
// # Hashing and the wire
//
// Hash is a Zobrist hash of stones, size and side to move, kept
// incrementally by Play. MarshalBinary/UnmarshalBinary use the explicit
// format of wire.go (2 bits per cell); decoding checks everything and fails
// with ErrBadFormat, leaving the board as it was.
//
// # HTP
//
// HTP serves the text protocol on any reader/writer; GenMove plugs in the
// search (mctsbench htp uses package mcts):
//
//	e := &hex.HTP{Name: "seriema", Version: "1", GenMove: search}
//	e.Serve(ctx, os.Stdin, os.Stdout)
//
// Besides the board commands it keeps a clock for the GUI: time_settings
// (main time, byo-yomi time and stones, GTP's) and time_left set it, and
// genmove passes GenMove the time the move may take (the colour's time
// spread over half the empty cells, or over a byo-yomi period's stones;
// 90 % of it, less 50 ms), or HTP.MoveTime when set. undo takes back the
// last play or genmove, final_score answers B+ or W+ once the game is won,
// and hexgui-analyze_commands gives HexGui's analyze menu a few entries.
//
// # Solver
//
// Solver decides small positions exactly (negamax over win/loss with a
// transposition table, and Hex's exact rules for connecting and blocking
// cells): the oracle the search's strength is tested against
// (mcts/hexgame's TestOracle).
package hex
