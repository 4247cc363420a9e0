// Fuzzing of RecoveryCircuits: errors, never panics, and every target it
// returns passes the checks of recovery_test.go.

package plan

import (
	"testing"

	"github.com/occl/occl/topo"
)

// FuzzRecoveryCircuits plans recoveries of arbitrary hosts (some out of
// range) with an arbitrary spare on small OCS fabrics, RailX grids and
// K-hop lines.
func FuzzRecoveryCircuits(f *testing.F) {
	f.Add([]byte{0, 5, 3, 0, 1, 1, 2, 2, 3, 3, 4, 4, 0, 200, 1, 5})
	f.Add([]byte{0, 4, 1, 0, 1, 0, 1, 200, 1, 0})
	f.Add([]byte{1, 3, 3, 200, 4, 255})
	f.Add([]byte{2, 6, 2, 200, 2, 3, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 3 {
			return
		}
		kind, p, q := b[0]%3, int(b[1]%7)+1, int(b[2]%4)+1
		b = b[3:]
		var in *topo.Topology
		var err error
		switch kind {
		case 0:
			in = topo.Uniform(p, 2)
			in.AddPorts(q, q == 4)
			for len(b) >= 2 && b[0] < 200 {
				in.Connect(int(b[0])%p, int(b[1])%p, float64(b[1]%3)*1e9) // may fail
				b = b[2:]
			}
			in.Ring = in.RingOrder()
		case 1:
			in, _, err = topo.BuildRailX(topo.RailXConfig{X: min(p, 4), Y: q})
		default:
			in, err = topo.BuildKRing(topo.KRingConfig{Nodes: p, K: min(q, 2), GPUsPerNode: 2}, nil)
		}
		if err != nil {
			return
		}
		if len(b) > 0 {
			b = b[1:] // the separator
		}
		spare := -1
		var failed []int
		for i, x := range b {
			v := int(int8(x)) % (len(in.Hosts) + 1)
			if i == len(b)-1 && len(b) > 1 {
				spare = v
				break
			}
			failed = append(failed, v)
		}
		out, err := RecoveryCircuits(in, failed, spare)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, h := range failed {
			seen[h] = true
		}
		if len(failed) == 0 || len(seen) == len(in.Hosts) {
			return
		}
		checkRecovery(t, in, out, failed, spare, kind == 2)
	})
}
