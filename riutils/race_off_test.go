//go:build !race

package riutils

const raceEnabled = false
