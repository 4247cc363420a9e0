package comm

import "testing"

func TestTCPSpin(t *testing.T) {
	for _, c := range []struct{ local, cpus, want int }{
		{1, 2, 0}, {2, 2, 0}, {3, 2, -1}, {8, 2, -1}, {8, 64, 0},
	} {
		if got := tcpSpin(c.local, c.cpus); got != c.want {
			t.Errorf("tcpSpin(%d ranks, %d CPUs) = %d, want %d", c.local, c.cpus, got, c.want)
		}
	}
}
