package bounded

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCall: an answer in time is returned as it is; a call that ignores
// its context is abandoned when the context ends (deadline or
// cancellation), its late answer dropped; a panic becomes an error.
func TestCall(t *testing.T) {
	want := errors.New("port 3 failed")
	if v, err := Call(context.Background(), "apply", func(context.Context) (int, error) { return 7, want }); v != 7 || err != want {
		t.Fatalf("answer in time: %d, %v; want 7, %v", v, err, want)
	}

	release, late := make(chan struct{}), make(chan struct{})
	defer close(release)
	ignores := func(context.Context) (int, error) {
		defer close(late)
		<-release
		return 9, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	var v int
	var err error
	go func() {
		defer close(done)
		v, err = Call(ctx, "apply", ignores)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Call still waits for a call that ignores its context, 5 s after its deadline")
	}
	if v != 0 || !errors.Is(err, ErrAbandoned) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "apply did not return by its deadline") {
		t.Fatalf("abandoned at the deadline: %d, %v", v, err)
	}
	release <- struct{}{} // the late answer goes nowhere
	<-late

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	block := make(chan struct{})
	defer close(block)
	err = Err(cctx, "restore", func(context.Context) error { <-block; return nil })
	if !errors.Is(err, ErrAbandoned) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "before its context was cancelled") {
		t.Fatalf("abandoned at cancellation: %v", err)
	}

	err = Err(context.Background(), "switched", func(context.Context) error { panic("controller bug") })
	if err == nil || !strings.Contains(err.Error(), "switched panicked: controller bug") || errors.Is(err, ErrAbandoned) {
		t.Fatalf("a call that panics: %v", err)
	}
}
