package topo

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// checkGroups checks that every group is m healthy nodes that follow each
// other in one K-hop segment (consecutive healthy nodes, hops <= K), and
// that no node is in two groups.
func checkGroups(t *testing.T, segs [][]int, groups [][]int, m, k int, failed []bool) {
	t.Helper()
	segOf := map[int][2]int{} // node -> (segment, index)
	for i, s := range segs {
		for j, v := range s {
			segOf[v] = [2]int{i, j}
		}
	}
	used := map[int]bool{}
	for _, g := range groups {
		if len(g) != m {
			t.Fatalf("group %v of %d nodes, want %d", g, len(g), m)
		}
		for j, v := range g {
			if failed[v] || used[v] {
				t.Fatalf("group %v: node %d failed or reused", g, v)
			}
			used[v] = true
			if j > 0 {
				a, b := segOf[g[j-1]], segOf[v]
				if a[0] != b[0] || b[1] != a[1]+1 || v-g[j-1] > k {
					t.Fatalf("group %v: %d and %d are not consecutive healthy nodes of one segment", g, g[j-1], v)
				}
			}
		}
	}
}

func TestPlaceTPGroupsExample(t *testing.T) {
	// The CLI example: 32 nodes of 4 GPUs, K=3, TP-16, faults 3,4,17.
	p, err := PlaceTPGroups(32, 3, 4, 16, []int{3, 4, 17})
	if err != nil {
		t.Fatal(err)
	}
	if p.NodesPerGroup != 4 || len(p.Groups) != 7 || p.HealthyGPUs != 116 || p.WastedGPUs != 4 {
		t.Fatalf("%+v", p)
	}
	if !reflect.DeepEqual(p.Groups[0], []int{0, 1, 2, 5}) || !reflect.DeepEqual(p.Groups[3], []int{14, 15, 16, 18}) {
		t.Fatalf("groups %v: the first and fourth should bypass the failed nodes", p.Groups)
	}
}

// Properties on random fault sets: groups are consecutive healthy nodes of
// one segment; every segment leaves fewer than m nodes unplaced; without K
// consecutive failures the waste is the single-HBD fragmentation formula.
func TestPlaceTPGroupsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 400; trial++ {
		n, r := 1+rng.IntN(400), []int{1, 2, 4, 8}[rng.IntN(4)]
		k := 1 + rng.IntN(r)
		m := 1 + rng.IntN(8)
		noBreak := trial%2 == 0
		faults := randomFaults(rng, n, k, rng.Float64()*0.3, noBreak)
		p, err := PlaceTPGroups(n, k, r, m*r, faults)
		if err != nil {
			t.Fatal(err)
		}
		segs, _ := KHopSegments(n, k, faults)
		failed := make([]bool, n)
		for _, f := range faults {
			failed[f] = true
		}
		checkGroups(t, segs, p.Groups, m, k, failed)
		healthy := n - len(faults)
		if p.HealthyGPUs != healthy*r || p.PlacedGPUs != len(p.Groups)*m*r || p.WastedGPUs != p.HealthyGPUs-p.PlacedGPUs {
			t.Fatalf("counts %+v (healthy %d)", p, healthy)
		}
		wantWaste := 0
		for _, s := range segs {
			wantWaste += len(s) % m * r
		}
		if p.WastedGPUs != wantWaste {
			t.Fatalf("waste %d, want %d", p.WastedGPUs, wantWaste)
		}
		if noBreak && healthy > 0 {
			// One HB domain of the whole line: ((HBD - faulty) mod TP).
			hbd, faulty := n*r, len(faults)*r
			if got := SwitchHBDWaste(hbd, faulty, m*r) * float64(hbd); int(got+0.5) != p.WastedGPUs {
				t.Fatalf("n=%d faults %v: waste %d, formula %g", n, faults, p.WastedGPUs, got)
			}
		}
	}
}

func TestPlaceTPGroupsErrors(t *testing.T) {
	cases := []struct {
		n, k, r, tp int
		want        string
	}{
		{32, 3, 4, 6, "multiple"},
		{32, 3, 4, 0, "multiple"},
		{32, 5, 4, 16, "K <= R"},
		{32, 1, 0, 16, "GPUs per node"},
		{0, 1, 4, 16, "nodes"},
	}
	for _, c := range cases {
		_, err := PlaceTPGroups(c.n, c.k, c.r, c.tp, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
