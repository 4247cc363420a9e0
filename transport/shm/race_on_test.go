//go:build race

package shm_test

// raceEnabled: the tests run under the race detector (see skipUnderRace).
const raceEnabled = true
