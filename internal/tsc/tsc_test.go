package tsc

import (
	"testing"
	"time"
)

// TestReadAdvancesWithTime checks that the counter, where it is trusted,
// advances at a rate that stays the same between two intervals of the
// monotonic clock.
func TestReadAdvancesWithTime(t *testing.T) {
	if !Supported {
		if Read() != 0 {
			t.Fatal("Read returned a counter on an architecture without one")
		}
		if Trusted() {
			t.Fatal("Trusted without a counter")
		}
		return
	}
	rate := func() float64 {
		t0, c0 := time.Now(), Read()
		time.Sleep(20 * time.Millisecond)
		c1 := Read()
		d := time.Since(t0)
		if c1 <= c0 {
			t.Fatalf("counter went from %d to %d over %v", c0, c1, d)
		}
		return float64(c1-c0) / float64(d)
	}
	// A reading pair split by a preemption skews one measure: the rate
	// must hold in one of three tries.
	for try := range 3 {
		a, b := rate(), rate()
		t.Logf("%.4f and %.4f ticks per ns; trusted: %v", a, b, Trusted())
		if !Trusted() {
			return
		}
		if r := a / b; r > 0.99 && r < 1.01 {
			return
		}
		if try == 2 {
			t.Fatalf("the counter's rate moved from %.4f to %.4f ticks per ns", a, b)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	var sink uint64
	for range b.N {
		sink += Read()
	}
	_ = sink
}
