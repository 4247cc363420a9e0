package algo

import (
	"fmt"
	"runtime/debug"
)

// PanicError is the failure of an operation whose helper goroutine (one a
// schedule starts to send while it receives, say, or one of a group of
// point-to-point transfers) panicked: only a bug in occl can cause one.
// The operation returns it instead of the process crashing, so that the
// caller can fail the operation, and whatever it belongs to, as it would
// for a panic on its own goroutine.
type PanicError struct {
	Value any    // what the goroutine panicked with
	Stack []byte // the goroutine's stack where it panicked
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("internal error: an operation's goroutine panicked: %v", e.Value)
}

// RecoverTo, deferred first thing by a helper goroutine of an operation,
// turns a panic of the goroutine into a *PanicError passed to fail (in a
// schedule, its group's fail, which cancels the others).
func RecoverTo(fail func(error)) {
	if v := recover(); v != nil {
		fail(&PanicError{Value: v, Stack: debug.Stack()})
	}
}
