package spin

import "testing"

// BenchmarkPause measures one Pause: the time a poll loop adds per round.
func BenchmarkPause(b *testing.B) {
	for range b.N {
		Pause()
	}
}
