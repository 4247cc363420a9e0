package comm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRewireSwitchAbandonsApply: the switch ends at the deadline of its
// context even when Apply ignores it, with an error whose outcome is
// unknown (not ErrNotSwitched) that names the deadline; Apply's late
// answer is dropped. An Apply that answers in time is heard, one that
// panics fails the switch (not the process), and one whose context has
// ended before the switch is not called.
func TestRewireSwitchAbandonsApply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	release, answered := make(chan struct{}), make(chan struct{})
	defer close(release)
	sw := startSwitch(ctx, Rewire{ApplyTimeout: 50 * time.Millisecond, Apply: func(context.Context) error {
		defer close(answered)
		<-release
		return nil
	}})
	select {
	case <-sw.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the switch is still waiting for an Apply that ignores its context, 5s after its deadline")
	}
	err := sw.err
	if err == nil || errors.Is(err, ErrNotSwitched) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "did not return by its deadline") || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("abandoned Apply: %v, want an unknown outcome at its deadline", err)
	}
	release <- struct{}{} // Apply answers late
	<-answered
	if sw.err != err {
		t.Fatalf("the late answer replaced the switch's error: %v", sw.err)
	}

	want := errors.New("port 3 failed")
	sw = startSwitch(ctx, Rewire{ApplyTimeout: time.Minute, Apply: func(context.Context) error { return want }})
	<-sw.done
	if sw.err != want {
		t.Fatalf("Apply answering in time: %v, want %v", sw.err, want)
	}

	sw = startSwitch(ctx, Rewire{ApplyTimeout: time.Minute, Apply: func(context.Context) error { panic("controller bug") }})
	<-sw.done
	if sw.err == nil || errors.Is(sw.err, ErrNotSwitched) || !strings.Contains(sw.err.Error(), "panicked: controller bug") {
		t.Fatalf("Apply that panics: %v, want an error saying so, whose outcome is unknown", sw.err)
	}

	ended, end := context.WithCancel(ctx)
	end()
	called := false
	sw = startSwitch(ended, Rewire{Apply: func(context.Context) error { called = true; return nil }})
	<-sw.done
	if called || !errors.Is(sw.err, ErrNotSwitched) {
		t.Fatalf("Apply with no time left: called %v, %v; want not called, ErrNotSwitched", called, sw.err)
	}
}
