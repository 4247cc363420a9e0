//go:build race

package memcopy

// raceEnabled: the race detector sees only the built-in copy.
const raceEnabled = true
