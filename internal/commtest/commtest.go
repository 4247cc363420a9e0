// Package commtest holds helpers for tests that run communicators.
package commtest

import (
	"testing"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/fanout"
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

// Each runs fn for every rank of comms at once, each on a goroutine of its
// own as each rank would run in its own process, and returns their errors
// by rank.
func Each(comms []*comm.Communicator, fn func(r int, c *comm.Communicator) error) []error {
	return fanout.Each(comms, fn)
}

// OnEach is Each that fails the test with the first rank's error.
func OnEach(t testing.TB, comms []*comm.Communicator, fn func(r int, c *comm.Communicator) error) {
	t.Helper()
	for r, err := range Each(comms, fn) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}
