package comm_test

import (
	"testing"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/topo"
)

// TestHostOutOfRange: Host and HostID answer for every rank and host
// index, and for one out of range return -1 and "" (as ListenAddr returns
// "" for a rank out of range) instead of panicking.
func TestHostOutOfRange(t *testing.T) {
	comms := commtest.Local(t, 4, comm.WithTopology(topo.Uniform(2, 2)))
	c := comms[0]
	for r := range c.Size() {
		if got := c.Host(r); got != r/2 {
			t.Errorf("Host(%d) = %d, want %d", r, got, r/2)
		}
	}
	for h := range c.NumHosts() {
		if c.HostID(h) == "" {
			t.Errorf("HostID(%d) is empty", h)
		}
	}
	for _, tc := range []struct {
		name string
		i    int
	}{
		{"negative", -1},
		{"most negative", -1 << 62},
		{"one past the end", 4},
		{"far past the end", 1 << 40},
	} {
		var host int
		var id string
		if v := recovered(func() { host = c.Host(tc.i) }); v != nil {
			t.Errorf("%s: Host(%d) panicked: %v", tc.name, tc.i, v)
		} else if host != -1 {
			t.Errorf("%s: Host(%d) = %d, want -1", tc.name, tc.i, host)
		}
		h := tc.i
		if h == 4 {
			h = c.NumHosts() // one past the last host index
		}
		if v := recovered(func() { id = c.HostID(h) }); v != nil {
			t.Errorf("%s: HostID(%d) panicked: %v", tc.name, h, v)
		} else if id != "" {
			t.Errorf("%s: HostID(%d) = %q, want \"\"", tc.name, h, id)
		}
	}
}
