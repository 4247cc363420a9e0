//go:build race

// Build flag for tests under the race detector.

package plan

// raceEnabled: the race detector slows the benchmark set down ~10x, so
// TestBenchmarkSet leaves out the slow matching planner at N = 128, and
// TestTransitionOnGateTraces runs one trace per drift instead of three.
const raceEnabled = true
