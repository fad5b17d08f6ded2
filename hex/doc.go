// Package hex will hold the rules of Hex (any board size, 11×11 default,
// black connects top–bottom), a fast allocation-free random fill playout,
// Zobrist hashing, a wire encoding and the HTP text protocol engine. It will
// import nothing from the rest of the project.
//
// Not implemented yet: tracked by the MCTS/Hex issue.
package hex
