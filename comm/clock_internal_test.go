package comm

import (
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/internal/tsc"
)

// TestStampsFollowTheMonotonicClock checks that stamps, read from the
// time-stamp counter once it is calibrated, agree with the monotonic clock
// and never go back.
func TestStampsFollowTheMonotonicClock(t *testing.T) {
	if d := calibration - time.Since(clockBase); d > 0 {
		time.Sleep(d)
	}
	now()
	if tsc.Trusted() != (anchor.Load() != nil) {
		t.Fatalf("counter trusted: %v, calibrated: %v", tsc.Trusted(), anchor.Load() != nil)
	}
	last := now()
	for i := range 5 {
		if i > 0 {
			time.Sleep(anchorEvery + time.Millisecond)
		}
		before := time.Since(clockBase)
		s := now()
		after := time.Since(clockBase)
		// The stamp falls between the two readings, give or take the
		// anchor's error: the timeline orders stamps among time.Now
		// readings.
		slack := 200 * time.Nanosecond
		if time.Duration(s) < before-slack || time.Duration(s) > after+slack {
			t.Fatalf("stamp %v outside the monotonic readings %v and %v around it", time.Duration(s), before, after)
		}
		if s < last {
			t.Fatalf("stamp went back from %d to %d", last, s)
		}
		last = s
		for range 10000 {
			if n := now(); n < last {
				t.Fatalf("stamp went back from %d to %d", last, n)
			} else {
				last = n
			}
		}
	}
}

// TestStampsSlewBackToTheClock: after an anchor whose extrapolation runs
// a millisecond ahead of the monotonic clock (as a counter whose rate
// changed would), stamps never go back, and once the anchor that slews
// back has served its window, stamps are on the clock again. The windows
// are followed through the anchors, not the test's clock: a window starts
// when a stamp is first read after the last one ended, which on a loaded
// machine can be long after.
func TestStampsSlewBackToTheClock(t *testing.T) {
	if d := calibration - time.Since(clockBase); d > 0 {
		time.Sleep(d)
	}
	now()
	a := anchor.Load()
	if a == nil {
		t.Skip("the kernel does not keep time with the time-stamp counter here")
	}
	tk := tsc.Read()
	ahead := &tscAnchor{ticks: tk, next: tk + (a.next - a.ticks), ns: int64(time.Since(clockBase) + time.Millisecond), mult: a.mult}
	anchor.Store(ahead)
	last := now()
	var slewing *tscAnchor
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := now()
		if s < last {
			t.Fatalf("stamp went back from %d to %d", last, s)
		}
		last = s
		cur := anchor.Load()
		if slewing == nil && cur != ahead {
			slewing = cur
		}
		if slewing != nil && cur != slewing && cur.ticks >= slewing.next {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no anchor followed the slewing one within 10 s")
		}
	}
	before := time.Since(clockBase)
	s := now()
	after := time.Since(clockBase)
	if slack := 200 * time.Nanosecond; time.Duration(s) < before-slack || time.Duration(s) > after+slack {
		t.Fatalf("stamp %v after the slewing anchor's window, monotonic clock %v to %v", time.Duration(s), before, after)
	}
	if s < last {
		t.Fatalf("stamp went back from %d to %d", last, s)
	}
}

// TestRecheckOffThePath: the once-a-second recheck of the kernel's clock
// runs apart from the stamp that starts it, and a counter it no longer
// trusts stops being read.
func TestRecheckOffThePath(t *testing.T) {
	if d := calibration - time.Since(clockBase); d > 0 {
		time.Sleep(d)
	}
	if !tsc.Trusted() {
		t.Skip("the counter is not trusted here: slowNow never rechecks")
	}
	var once sync.Once
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	fake := func() bool {
		once.Do(func() { close(started) })
		<-release
		return false
	}
	real := recheck.Swap(&fake)
	defer func() {
		recheck.Store(real)
		tsc.Recheck()
		recheckAt.Store(0)
	}()
	recheckAt.Store(0)
	go func() {
		slowNow()
		close(done)
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("slowNow did not recheck the clock")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("slowNow waited for the recheck")
	}
	close(release)
	anchor.Store(&tscAnchor{next: 1})
	recheckClock()
	if anchor.Load() != nil {
		t.Fatal("the counter is still read after the recheck distrusted it")
	}
}
