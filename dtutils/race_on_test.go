//go:build race

package dtutils

const raceEnabled = true
