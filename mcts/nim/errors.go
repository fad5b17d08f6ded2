package nim

import "errors"

// ErrBadState: a state or move that does not decode, or an illegal move.
var ErrBadState = errors.New("nim: bad state or move")
