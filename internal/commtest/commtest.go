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
