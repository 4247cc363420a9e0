//go:build race

// Build flag for tests under the race detector.

package plan

// raceEnabled: the race detector slows the benchmark set down ~10x, so
// TestBenchmarkSet leaves out the slow matching planner at N = 128.
const raceEnabled = true
