package algo

import (
	"context"
	"errors"
	"testing"
)

// TestBothKeepsTheFirstFailure: when one half fails, the other half sees
// the cancellation it caused; both must report the real failure, not the
// cancellation, whichever half it came from.
func TestBothKeepsTheFirstFailure(t *testing.T) {
	broken := errors.New("link to rank 4 lost")
	fail := func(context.Context) error { return broken }
	waitCancel := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	ok := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name string
		f, g func(context.Context) error
		want error
	}{
		{"first half fails", fail, waitCancel, broken},
		{"second half fails", waitCancel, fail, broken},
		{"neither fails", ok, ok, nil},
	} {
		if err := both(context.Background(), tc.f, tc.g); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: both = %v, want %v", tc.name, err, tc.want)
		}
	}
}
