// Fuzzing of Without and Bypass: errors, never panics, and what they
// return holds together.

package topo

import "testing"

// fuzzFabric builds a small fabric from the first bytes of b: a K-hop
// line, a RailX grid, or hosts with OCS ports and circuits between them.
// It returns nil if the bytes make no valid fabric, and the unused bytes.
func fuzzFabric(b []byte) (*Topology, []byte) {
	if len(b) < 4 {
		return nil, nil
	}
	kind, p, q, r := b[0]%3, int(b[1]%7)+1, int(b[2]%5)+1, int(b[3]%3)+1
	b = b[4:]
	switch kind {
	case 0:
		var faults []int
		for len(b) > 0 && b[0] >= 200 {
			faults = append(faults, int(b[0]-200)%p)
			b = b[1:]
		}
		t, err := BuildKRing(KRingConfig{Nodes: p, K: min(q, r), GPUsPerNode: r, Faults: faults}, nil)
		if err != nil {
			return nil, b
		}
		return t, b
	case 1:
		kind := RailXTorus
		if q%2 == 0 {
			kind = RailXHyperX
		}
		t, _, err := BuildRailX(RailXConfig{Kind: kind, X: min(p, 5), Y: q, Mesh: min(r, 2)})
		if err != nil {
			return nil, b
		}
		return t, b
	}
	t := Uniform(p, r)
	t.AddPorts(q, q%2 == 0)
	for len(b) >= 2 && b[0] < 128 {
		t.Connect(int(b[0])%p, int(b[1])%p, 0) // may fail: no free port, same host
		b = b[2:]
	}
	if len(b) > 0 && b[0]%2 == 1 {
		t.Ring = make([]int, len(t.Ranks))
		for i := range t.Ring {
			t.Ring[i] = len(t.Ranks) - 1 - i
		}
	}
	return t, b
}

// FuzzWithout fails arbitrary ranks (some out of range) of arbitrary small
// fabrics.
func FuzzWithout(f *testing.F) {
	f.Add([]byte{0, 5, 1, 2, 201, 3, 7})
	f.Add([]byte{1, 2, 2, 1, 4, 0})
	f.Add([]byte{1, 4, 2, 0, 1, 5, 9})
	f.Add([]byte{2, 4, 2, 1, 0, 1, 1, 2, 2, 3, 3, 0, 200, 1, 2})
	f.Add([]byte{2, 3, 1, 1, 255, 0, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		top, b := fuzzFabric(b)
		if top == nil {
			return
		}
		if err := top.Validate(); err != nil {
			t.Fatalf("fabric: %v", err)
		}
		var failed []int
		for _, x := range b {
			failed = append(failed, int(int8(x))%(len(top.Ranks)+2))
		}
		before := string(top.JSON())
		s, err := top.Without(failed)
		if string(top.JSON()) != before {
			t.Fatal("Without changed its input")
		}
		if err == nil {
			if err := s.Topology.Validate(); err != nil {
				t.Fatalf("failed %v: %v", failed, err)
			}
			if n := len(s.Ranks) + len(s.Idle); n > len(top.Ranks) || len(s.Topology.Ranks) != len(s.Ranks) {
				t.Fatalf("failed %v: %d survivors, %d idle of %d ranks, topology of %d", failed, len(s.Ranks), len(s.Idle), len(top.Ranks), len(s.Topology.Ranks))
			}
		}
		hosts := make([]int, 0, len(failed))
		for _, r := range failed {
			hosts = append(hosts, r%(len(top.Hosts)+1))
		}
		if bt, err := top.Bypass(hosts); err == nil {
			if len(bt.Ranks) != len(top.Ranks) || len(bt.NICs) != len(top.NICs) {
				t.Fatalf("bypass %v changed the ranks or NICs", hosts)
			}
		}
	})
}
