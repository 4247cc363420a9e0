//go:build race

package main

// raceEnabled: under the race detector sync.Pool drops a share of what it
// is given, so pooled buffers are made again now and then.
const raceEnabled = true
