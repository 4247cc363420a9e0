//go:build !amd64

package spin

// Pause tells the processor that the caller polls memory another core
// will write; here it does nothing.
func Pause() {}
