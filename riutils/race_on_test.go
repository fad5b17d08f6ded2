//go:build race

package riutils

const raceEnabled = true
