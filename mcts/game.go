package mcts

// Move is a move of a game, numbered by the game.
type Move int32

// Game describes a two-player game with a winner and no draws, as the search
// sees it. It holds no search and no communication code: the search decides
// everything, the game only answers questions about positions.
type Game interface {
	// Name names the game for logs and summaries.
	Name() string
	// Decode reads a state written by State.AppendBinary (from another
	// process); malformed input is an error, never a panic.
	Decode(data []byte) (State, error)
}

// State is one position. The search never changes a state after giving it to
// a node, so many goroutines may read one state at once.
type State interface {
	// ToMove is the player to move: 0 (the first player) or 1.
	ToMove() int
	// Winner is the winner, 0 or 1, or −1 while the game goes on.
	Winner() int
	// Moves appends the legal moves to dst (none once the game is won).
	Moves(dst []Move) []Move
	// Clone returns an independent copy.
	Clone() State
	// Play plays m for the player to move.
	Play(m Move) error
	// Simulate plays n random playouts to the end from this state, seeded
	// with seed, and returns how many player 0 won.
	Simulate(n int, seed uint64) int
	// AppendBinary appends the wire form of the state (for Game.Decode).
	AppendBinary(dst []byte) ([]byte, error)
	// MoveName writes a move for people.
	MoveName(m Move) string
	// String draws the position for people.
	String() string
}

// PlayerNamer is what a State may also implement to name its players for
// people (Hex: "black" and "white"); programs fall back to "first" and
// "second".
type PlayerNamer interface {
	// PlayerName names player p, 0 or 1.
	PlayerName(p int) string
}
