//go:build !race

package comm_test

import "testing"

// raceEnabled reports whether the tests run under the race detector (see
// race_on_test.go).
const raceEnabled = false

// skipUnderRace is a no-op without the race detector (see race_on_test.go).
func skipUnderRace(*testing.T, string) {}
