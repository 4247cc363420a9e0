//go:build !amd64

package tsc

// Supported reports whether Read reads a counter on this architecture.
const Supported = false

// Read returns 0: there is no counter Read can reach here.
func Read() uint64 { return 0 }
