package tsc

// Supported reports whether Read reads a counter on this architecture.
const Supported = true

// Read returns the time-stamp counter (RDTSC).
//
//go:noescape
func Read() uint64
