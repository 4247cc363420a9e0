//go:build !linux

package hugemem

// readPolicy returns "": Alloc asks for huge pages on Linux only.
func readPolicy() string { return "" }
