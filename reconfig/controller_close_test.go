package reconfig_test

import (
	"context"
	"testing"
	"time"

	"github.com/occl/occl/reconfig"
)

// TestEmulatedCloseTwice shows that closing an emulated controller a
// second time (an explicit Close and a deferred one) returns instead of
// hanging.
func TestEmulatedCloseTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	em, err := reconfig.StartEmulated(ctx, 8, time.Millisecond, "")
	if err != nil {
		t.Fatal(err)
	}
	first := em.Close()
	done := make(chan error, 1)
	go func() { done <- em.Close() }()
	select {
	case err := <-done:
		if err != first {
			t.Fatalf("second Close returned %v, the first %v", err, first)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second Close hangs")
	}
}
