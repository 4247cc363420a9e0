package transport

import (
	"testing"
	"time"
)

// A wait stops giving its core away after a second slow yield within the
// window of the first, for the backoff; a lone slow yield, or slow ones
// far apart, change nothing.
func TestCoreYieldGuard(t *testing.T) {
	slowStart := func() int64 { return monotonic() - int64(2*coreYieldSlow) }
	for _, tc := range []struct {
		name  string
		setup func(y *CoreYield)
		ok    bool
	}{
		{"fresh", func(y *CoreYield) {}, true},
		{"fast yields", func(y *CoreYield) {
			for range 100 {
				start, _ := y.Begin()
				y.End(start)
			}
		}, true},
		{"one slow yield", func(y *CoreYield) { y.End(slowStart()) }, true},
		{"two slow yields", func(y *CoreYield) { y.End(slowStart()); y.End(slowStart()) }, false},
		{"two slow yields far apart", func(y *CoreYield) {
			y.slow.Store(monotonic() - int64(2*coreYieldSlowWindow))
			y.End(slowStart())
		}, true},
		{"backoff over", func(y *CoreYield) {
			y.End(slowStart())
			y.End(slowStart())
			y.off.Store(monotonic() - 1)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var y CoreYield
			tc.setup(&y)
			if _, ok := y.Begin(); ok != tc.ok {
				t.Errorf("Begin allows a yield: %v, want %v", ok, tc.ok)
			}
		})
	}
	// Back-offs: the shortest first, doubling while they come back to
	// back, up to the longest; the shortest again after a calm.
	var y CoreYield
	trigger := func() time.Duration {
		y.End(slowStart())
		y.End(slowStart())
		return time.Duration(y.off.Load() - monotonic())
	}
	near := func(got, want time.Duration) bool { return got > want-want/4 && got <= want }
	if left := trigger(); !near(left, coreYieldBackoffMin) {
		t.Errorf("first back-off %v, want about %v", left, coreYieldBackoffMin)
	}
	want := coreYieldBackoffMin
	for range 10 {
		y.off.Store(monotonic() - 1) // the last back-off just ended
		y.slow.Store(0)
		want = min(2*want, coreYieldBackoffMax)
		if left := trigger(); !near(left, want) {
			t.Errorf("back-off right after another: %v, want about %v", left, want)
		}
	}
	if want != coreYieldBackoffMax {
		t.Fatalf("back-offs reached %v, want %v", want, coreYieldBackoffMax)
	}
	y.off.Store(monotonic() - int64(2*coreYieldCalm)) // ended long ago
	y.slow.Store(0)
	if left := trigger(); !near(left, coreYieldBackoffMin) {
		t.Errorf("back-off after a calm: %v, want about %v", left, coreYieldBackoffMin)
	}
}
