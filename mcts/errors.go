package mcts

import "errors"

// Sentinel errors of package mcts; returned errors wrap them (errors.Is).
var (
	// ErrBadConfig: a Config field is out of range.
	ErrBadConfig = errors.New("mcts: bad config")
	// ErrClosed: the search was closed, or failed and closed itself.
	ErrClosed = errors.New("mcts: search closed")
	// ErrMessage: a call between threads of the search is malformed.
	ErrMessage = errors.New("mcts: malformed call")
	// ErrGameOver: Search was asked for a move in a finished game.
	ErrGameOver = errors.New("mcts: the game is over")
	// ErrNotRoot: Search runs on rank 0 only.
	ErrNotRoot = errors.New("mcts: Search runs on rank 0")
)
