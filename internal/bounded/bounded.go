// Package bounded runs a call that may ignore its context, such as a
// callback of the user's or a request to an external controller, without
// letting it hold its caller past that context.
package bounded

import (
	"context"
	"errors"
	"fmt"
)

// ErrAbandoned is wrapped by the error of a call abandoned because its
// context ended before it returned: what the call did is unknown.
var ErrAbandoned = errors.New("abandoned: the outcome is unknown")

// Call runs call(ctx) on a goroutine of its own and returns its result,
// or, once ctx has ended without one, the zero T and an error wrapping
// ErrAbandoned and ctx.Err(): the call is abandoned then, never waited
// for, and its late answer is dropped, never written anywhere. The caller
// should cancel ctx once Call returns, which also tells an abandoned call
// to stop. A call that panics returns an error saying so, since it runs
// out of its caller's reach. name names the call in those errors.
func Call[T any](ctx context.Context, name string, call func(context.Context) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	answered := make(chan answer, 1) // never blocks an abandoned call
	go func() {
		defer func() {
			if p := recover(); p != nil {
				answered <- answer{err: fmt.Errorf("%s panicked: %v", name, p)}
			}
		}()
		v, err := call(ctx)
		answered <- answer{v, err}
	}()
	select {
	case a := <-answered:
		return a.v, a.err
	case <-ctx.Done():
	}
	select {
	case a := <-answered: // it answered as ctx ended
		return a.v, a.err
	default:
	}
	when := "by its deadline"
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		when = "before its context was cancelled"
	}
	var zero T
	return zero, fmt.Errorf("%s did not return %s (%w): %w", name, when, ctx.Err(), ErrAbandoned)
}

// Err is Call for a call that returns only an error.
func Err(ctx context.Context, name string, call func(context.Context) error) error {
	_, err := Call(ctx, name, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
	return err
}
