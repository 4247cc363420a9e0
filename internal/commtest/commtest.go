// Package commtest holds helpers for tests that run communicators.
package commtest

import (
	"testing"

	"github.com/occl/occl/comm"
)

// Local makes n ranks in this process (comm.NewLocal) with opts, closed
// when the test ends.
func Local(t testing.TB, n int, opts ...comm.Option) []*comm.Communicator {
	t.Helper()
	comms, err := comm.NewLocal(n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// AbortAtEnd aborts comms when the test ends, before the cleanups
// registered earlier run (Local's Close, which would wait for operations
// left blocked): for tests that leave an operation blocked on purpose.
func AbortAtEnd(t testing.TB, comms []*comm.Communicator) {
	t.Cleanup(func() {
		for _, c := range comms {
			c.Abort()
		}
	})
}
