//go:build race

package hexgame_test

const raceEnabled = true
