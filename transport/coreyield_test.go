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
	var y CoreYield
	y.End(slowStart())
	y.End(slowStart())
	if left := time.Duration(y.off.Load() - monotonic()); left < coreYieldBackoff-time.Second/10 || left > coreYieldBackoff {
		t.Errorf("yields refused for %v more, want about %v", left, coreYieldBackoff)
	}
}
