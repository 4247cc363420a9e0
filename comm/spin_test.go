package comm

import (
	"runtime"
	"testing"
)

func TestOversubscribed(t *testing.T) {
	for _, c := range []struct {
		local, cpus int
		want        bool
	}{
		{1, 2, false}, {2, 2, false}, {3, 2, true}, {8, 2, true}, {8, 64, false},
	} {
		if got := oversubscribed(c.local, c.cpus); got != c.want {
			t.Errorf("oversubscribed(%d ranks, %d CPUs) = %v, want %v", c.local, c.cpus, got, c.want)
		}
	}
}

// A rank's CPUs are its share of its machine's, at least one and at most
// its process's GOMAXPROCS.
func TestRankCPUs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	for _, c := range []struct{ cpus, local, atMost, want int }{
		{2, 1, 0, 2}, {2, 2, 0, 1}, {2, 4, 0, 1}, {64, 8, 0, 8}, {64, 2, 0, 8}, {12, 5, 0, 2}, {4, 0, 0, 4},
		// A Split's group of one rank per machine keeps its parent's share.
		{64, 1, 8, 8}, {64, 1, 2, 2}, {2, 1, 1, 1}, {64, 16, 8, 4},
	} {
		if got := rankCPUs(c.cpus, c.local, c.atMost); got != c.want {
			t.Errorf("rankCPUs(%d CPUs, %d ranks, at most %d) = %d, want %d", c.cpus, c.local, c.atMost, got, c.want)
		}
	}
}

// Emulated hosts on one machine share its CPUs.
func TestMachineIDs(t *testing.T) {
	ids := []string{"m1/vhost0", "m1/vhost0", "m1/vhost1", "m2/vhost2", "m2", "odd/vhostname/vhost3"}
	got := machineIDs(ids)
	want := []string{"m1", "m1", "m1", "m2", "m2", "odd/vhostname"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("machineIDs(%q) = %q, want %q", ids, got, want)
		}
	}
	if local, n := localPosition(2, got); local != 2 || n != 3 {
		t.Errorf("localPosition(2) = %d of %d, want 2 of 3", local, n)
	}
}
