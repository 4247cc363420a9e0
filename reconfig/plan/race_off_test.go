//go:build !race

// Build flag for tests without the race detector.

package plan

const raceEnabled = false
