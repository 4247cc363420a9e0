package topo

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestDeployLine(t *testing.T) {
	line, err := DeployLine(12, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}; !reflect.DeepEqual(line, want) {
		t.Fatalf("%v", line)
	}
	// Line neighbours sit under different ToRs (Algorithm 3's point).
	line, _ = DeployLine(103, 4) // 25 ToRs, 3 nodes left out
	if len(line) != 100 {
		t.Fatalf("deployed %d nodes", len(line))
	}
	for i := 1; i < len(line); i++ {
		if line[i]/4 == line[i-1]/4 {
			t.Fatalf("neighbours %d and %d under one ToR", line[i-1], line[i])
		}
	}
	for _, bad := range [][2]int{{0, 1}, {4, 0}, {4, 5}} {
		if _, err := DeployLine(bad[0], bad[1]); err == nil {
			t.Errorf("DeployLine%v accepted", bad)
		}
	}
}

func TestPlaceTPGroupsToRNoFaults(t *testing.T) {
	// 64 nodes, 4 per ToR, domains of 16 nodes (4 ToRs): 4 domains, 16
	// pieces of 4 nodes. TP-16 on 4-GPU nodes: groups of 4 nodes = one
	// piece each, so every constraint holds and nothing crosses a domain.
	cfg := ToRPlacementConfig{Nodes: 64, K: 2, GPUsPerNode: 4, TP: 16, NodesPerToR: 4, NodesPerDomain: 16}
	p, err := PlaceTPGroupsToR(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxConstraints != 20 || p.Constraints != 20 || p.IsolatedPieces != 16 || p.AlignedDomains != 4 {
		t.Fatalf("constraints %+v", p)
	}
	if len(p.Groups) != 16 || p.WastedGPUs != 0 || p.CrossDomainGroups != 0 || p.JobGPUs != 256 {
		t.Fatalf("%d groups, waste %d, cross %d, job %d", len(p.Groups), p.WastedGPUs, p.CrossDomainGroups, p.JobGPUs)
	}
	for _, g := range p.Groups {
		// A group is the i-th node of the 4 ToRs of one domain.
		for j, v := range g {
			if v%4 != g[0]%4 || v/4 != g[0]/4+j {
				t.Fatalf("group %v is not one piece", g)
			}
		}
	}
}

// Aligned domains: a fault under a ToR takes the whole ToR out, so the
// groups of the p sub-lines of the domain sit under the same ToRs.
func TestPlaceTPGroupsToRAlignment(t *testing.T) {
	cfg := ToRPlacementConfig{Nodes: 96, K: 2, GPUsPerNode: 2, TP: 4, NodesPerToR: 4, NodesPerDomain: 48, Faults: []int{5}, JobGPUs: 8}
	p, err := PlaceTPGroupsToR(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.AlignedDomains == 0 {
		t.Fatalf("a small job should keep alignment: %+v", p)
	}
	// In aligned domain 0 (ToRs 0..11), for each ToR set used by a group
	// of sub-line i, the same ToR set is used by the other sub-lines.
	tors := map[[2]int]map[int]bool{} // (first ToR, last ToR) -> sub-lines
	for _, g := range p.Groups {
		for _, v := range g {
			if v/4 == 1 {
				t.Fatalf("group %v uses ToR 1, whose node 5 failed", g)
			}
		}
		if g[0]/4 >= 12 || g[len(g)-1]/4 >= 12 {
			continue
		}
		key := [2]int{g[0] / 4, g[len(g)-1] / 4}
		if tors[key] == nil {
			tors[key] = map[int]bool{}
		}
		tors[key][g[0]%4] = true
	}
	for key, subs := range tors {
		if len(subs) != 4 {
			t.Fatalf("ToRs %v used by sub-lines %v only, want all 4", key, subs)
		}
	}
	// Monotone: asking for every GPU relaxes constraints, never adds.
	cfg.JobGPUs = 0
	all, err := PlaceTPGroupsToR(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if all.Constraints > p.Constraints || all.PlacedGPUs < p.PlacedGPUs {
		t.Fatalf("full job: %d constraints, %d GPUs; small job: %d, %d", all.Constraints, all.PlacedGPUs, p.Constraints, p.PlacedGPUs)
	}
}

// Random instances: the job is placed, groups are consecutive healthy
// nodes of the deployed line, and placements with isolation never cross
// a domain in an isolated piece.
func TestPlaceTPGroupsToRProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := 0; trial < 150; trial++ {
		p := 1 + rng.IntN(4)
		l := 1 + rng.IntN(5)
		domains := 1 + rng.IntN(4)
		n := p * l * domains
		r := []int{2, 4}[rng.IntN(2)]
		k := 1 + rng.IntN(r)
		m := 1 + rng.IntN(3)
		faults := randomFaults(rng, n, k, rng.Float64()*0.2, false)
		cfg := ToRPlacementConfig{Nodes: n, K: k, GPUsPerNode: r, TP: m * r, Faults: faults, NodesPerToR: p, NodesPerDomain: p * l}
		res, err := PlaceTPGroupsToR(cfg)
		if err != nil {
			if strings.Contains(err.Error(), "holds only") {
				continue
			}
			t.Fatal(err)
		}
		if res.PlacedGPUs < res.JobGPUs {
			t.Fatalf("placed %d < job %d", res.PlacedGPUs, res.JobGPUs)
		}
		if res.Constraints < 0 || res.Constraints > res.MaxConstraints || res.IsolatedPieces+res.AlignedDomains != res.Constraints {
			t.Fatalf("constraints %+v", res)
		}
		pos := map[int]int{}
		for i, v := range res.Line {
			pos[v] = i
		}
		failed := make([]bool, n)
		for _, f := range faults {
			failed[f] = true
		}
		used := map[int]bool{}
		for _, g := range res.Groups {
			if len(g) != m {
				t.Fatalf("group %v", g)
			}
			for j, v := range g {
				if failed[v] || used[v] {
					t.Fatalf("group %v reuses or uses failed %d", g, v)
				}
				used[v] = true
				if j > 0 && (pos[v]-pos[g[j-1]] < 1 || pos[v]-pos[g[j-1]] > k) {
					t.Fatalf("group %v: %d -> %d is not a K-hop link of the deployed line", g, g[j-1], v)
				}
			}
		}
		if res.Constraints == res.MaxConstraints && res.CrossDomainGroups != 0 {
			t.Fatalf("all constraints hold but %d groups cross domains", res.CrossDomainGroups)
		}
	}
}

func TestPlaceTPGroupsToRErrors(t *testing.T) {
	base := ToRPlacementConfig{Nodes: 32, K: 2, GPUsPerNode: 4, TP: 16, NodesPerToR: 4}
	cases := []struct {
		mod  func(*ToRPlacementConfig)
		want string
	}{
		{func(c *ToRPlacementConfig) { c.NodesPerToR = 0 }, "per ToR"},
		{func(c *ToRPlacementConfig) { c.NodesPerDomain = 6 }, "multiple"},
		{func(c *ToRPlacementConfig) { c.JobGPUs = 1000 }, "holds only"},
		{func(c *ToRPlacementConfig) { c.TP = 10 }, "multiple"},
		{func(c *ToRPlacementConfig) { c.Faults = []int{40} }, "outside"},
		{func(c *ToRPlacementConfig) { c.JobGPUs = -1 }, "job"},
	}
	for _, c := range cases {
		cfg := base
		c.mod(&cfg)
		if _, err := PlaceTPGroupsToR(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q: %v", c.want, err)
		}
	}
}
