package transport

import (
	"testing"
	"time"
)

// A wait stops giving its core away after a second slow yield within the
// window of the first, for the backoff; a lone slow yield, or slow ones
// far apart, change nothing.
func TestCoreYieldGuard(t *testing.T) {
	// As in a process that has run for an hour: a back-off recorded as
	// ending at time 0 is then long past the calm.
	defer func(b time.Time) { clockBase = b }(clockBase)
	clockBase = clockBase.Add(-time.Hour)
	slowStart := func() int64 { return monotonic() - int64(2*coreYieldSlow) }
	// probing puts y in a long back-off whose probe is due and begins it.
	probing := func(t *testing.T, y *CoreYield) int64 {
		y.End(slowStart())
		y.End(slowStart())
		y.off.Store(monotonic() + int64(time.Hour))
		y.probe.Store(monotonic() - 1)
		start, ok := y.Begin()
		if !ok {
			t.Fatal("Begin refused the probe")
		}
		return start
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, y *CoreYield)
		ok    bool
	}{
		{"fresh", func(t *testing.T, y *CoreYield) {}, true},
		{"fast yields", func(t *testing.T, y *CoreYield) {
			for range 100 {
				start, _ := y.Begin()
				y.End(start)
			}
		}, true},
		{"one slow yield", func(t *testing.T, y *CoreYield) { y.End(slowStart()) }, true},
		{"two slow yields", func(t *testing.T, y *CoreYield) { y.End(slowStart()); y.End(slowStart()) }, false},
		{"two slow yields far apart", func(t *testing.T, y *CoreYield) {
			y.slow.Store(monotonic() - int64(2*coreYieldSlowWindow))
			y.End(slowStart())
		}, true},
		{"backoff over", func(t *testing.T, y *CoreYield) {
			y.End(slowStart())
			y.End(slowStart())
			y.off.Store(monotonic() - 1)
		}, true},
		{"backoff before its first probe", func(t *testing.T, y *CoreYield) {
			y.End(slowStart())
			y.End(slowStart())
			y.off.Store(monotonic() + int64(time.Hour))
		}, false},
		{"backoff ended by a fast probe", func(t *testing.T, y *CoreYield) { y.End(probing(t, y)) }, true},
		{"backoff kept by a slow probe", func(t *testing.T, y *CoreYield) { probing(t, y); y.End(slowStart()) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var y CoreYield
			tc.setup(t, &y)
			if _, ok := y.Begin(); ok != tc.ok {
				t.Errorf("Begin allows a yield: %v, want %v", ok, tc.ok)
			}
		})
	}
	// Within a back-off, one probe per probe gap: the one that finds the
	// gap over yields, the next does not.
	var p CoreYield
	p.End(slowStart())
	p.End(slowStart())
	if gap := time.Duration(p.probe.Load() - monotonic()); gap <= coreYieldProbeEvery-coreYieldProbeEvery/4 || gap > coreYieldProbeEvery {
		t.Errorf("first probe in %v, want about %v", gap, coreYieldProbeEvery)
	}
	p.off.Store(monotonic() + int64(time.Hour))
	p.probe.Store(monotonic() - 1)
	if _, ok := p.Begin(); !ok {
		t.Error("the probe due was refused")
	}
	if _, ok := p.Begin(); ok {
		t.Error("a second probe yields within the gap")
	}
	if got, want := probeGap(int64(coreYieldBackoffMax)), int64(coreYieldBackoffMax/8); got != want {
		t.Errorf("probe gap of the longest back-off %v, want %v", time.Duration(got), time.Duration(want))
	}

	// A back-off a fast probe ended still counts as one that just ended:
	// the next one doubles.
	var e CoreYield
	e.End(slowStart())
	e.End(slowStart())
	e.probe.Store(monotonic() - 1)
	if start, ok := e.Begin(); ok {
		e.End(start)
	}
	if _, ok := e.Begin(); !ok {
		t.Fatal("a fast probe did not end the back-off")
	}
	e.slow.Store(0)
	e.End(slowStart())
	e.End(slowStart())
	if left := time.Duration(e.off.Load() - monotonic()); left <= coreYieldBackoffMin {
		t.Errorf("back-off after a probe ended the last: %v, want about %v", left, 2*coreYieldBackoffMin)
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
