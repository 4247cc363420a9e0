package main

import (
	"testing"
	"time"
)

// TestSchedPass: calls from C pass through the scheduler at most once per
// interval, and at least once in every interval in which a call comes.
func TestSchedPass(t *testing.T) {
	var clock int64
	yields := 0
	p := newSchedPass(5*time.Millisecond, func() { yields++ })
	p.now = func() int64 { return clock }
	for _, step := range []struct {
		at   time.Duration
		want int // yields so far
	}{
		{0, 0},
		{4 * time.Millisecond, 0},
		{5 * time.Millisecond, 1},
		{6 * time.Millisecond, 1},
		{9 * time.Millisecond, 1},
		{10 * time.Millisecond, 2},
		{100 * time.Millisecond, 3},
		{100*time.Millisecond + 1, 3},
	} {
		clock = int64(step.at)
		p.maybe()
		if yields != step.want {
			t.Fatalf("at %v: %d passes, want %d", step.at, yields, step.want)
		}
	}
}
