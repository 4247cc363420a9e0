//go:build race

package comm_test

// raceEnabled: under the race detector a process's resident memory
// includes the detector's shadow memory, which grows with everything the
// process allocates, so TestSoak does not hold it to its growth limit.
const raceEnabled = true
