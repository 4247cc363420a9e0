package topo

import (
	"strings"
	"testing"
)

func TestBuildKRingSegments(t *testing.T) {
	cfg := KRingConfig{Nodes: 12, K: 2, GPUsPerNode: 4, Faults: []int{3, 4, 9}}
	top, err := BuildKRing(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	// Segments: {0,1,2} and {5,6,7,8,10,11} (9 is bypassed).
	if len(top.Hosts) != 9 || len(top.Ranks) != 36 {
		t.Fatalf("%d hosts, %d ranks", len(top.Hosts), len(top.Ranks))
	}
	domains := map[int]int{}
	for _, h := range top.Hosts {
		domains[h.HBDomain]++
		if h.Name == "node3" || h.Name == "node4" || h.Name == "node9" {
			t.Fatalf("failed node %s is a host", h.Name)
		}
	}
	if domains[0] != 3 || domains[1] != 6 {
		t.Fatalf("HB domains %v", domains)
	}
	// Active links: 2 in the first ring, 5 in the second (one of them the
	// backup 8 -> 10 on ports +2/-2).
	if len(top.Circuits) != 7 {
		t.Fatalf("%d circuits", len(top.Circuits))
	}
	found := false
	for _, c := range top.Circuits {
		a, b := top.NICs[c.A], top.NICs[c.B]
		if top.Hosts[a.Host].Name == "node8" && top.Hosts[b.Host].Name == "node10" && a.Name == "+2" && b.Name == "-2" {
			found = true
		}
	}
	if !found {
		t.Fatal("no backup circuit 8 -> 10 on ports +2/-2")
	}
	checkRing(t, top, true)
	// Inside a ring, every hop between nodes is over an active circuit.
	joined := map[[2]int]bool{}
	for _, c := range top.Circuits {
		a, b := top.NICs[c.A].Host, top.NICs[c.B].Host
		joined[[2]int{a, b}], joined[[2]int{b, a}] = true, true
	}
	for i, r := range top.Ring {
		s := top.Ring[(i+1)%len(top.Ring)]
		ha, hb := top.Ranks[r].Host, top.Ranks[s].Host
		if ha != hb && top.Hosts[ha].HBDomain == top.Hosts[hb].HBDomain && !joined[[2]int{ha, hb}] {
			t.Fatalf("ring hop %d -> %d crosses hosts %d -> %d without a circuit", r, s, ha, hb)
		}
	}
	// Inside an HB domain every pair talks HBD; across domains, the DCN.
	if p := top.Path(0, 11); p.Class != HBD {
		t.Fatalf("same ring: %s", p.Class)
	}
	if p := top.Path(0, 12); p.Class != EPS {
		t.Fatalf("different rings: %s", p.Class)
	}
}

func TestBuildKRingTPGroupsToR(t *testing.T) {
	p, err := PlaceTPGroupsToR(ToRPlacementConfig{Nodes: 32, K: 2, GPUsPerNode: 4, TP: 16, NodesPerToR: 4, Faults: []int{6}})
	if err != nil {
		t.Fatal(err)
	}
	top, err := BuildKRing(KRingConfig{Nodes: 32, K: 2, GPUsPerNode: 4, Faults: []int{6}, NodesPerToR: 4}, p.Groups)
	if err != nil {
		t.Fatal(err)
	}
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(top.Ranks) != p.PlacedGPUs {
		t.Fatalf("%d ranks for %d placed GPUs", len(top.Ranks), p.PlacedGPUs)
	}
	for _, h := range top.Hosts {
		if h.ToR < 0 || len(h.Coord) != 1 {
			t.Fatalf("host %+v", h)
		}
	}
	checkRing(t, top, true)
}

func TestBuildKRingErrors(t *testing.T) {
	base := KRingConfig{Nodes: 10, K: 2, GPUsPerNode: 4, Faults: []int{5}}
	cases := []struct {
		cfg   KRingConfig
		rings [][]int
		want  string
	}{
		{base, [][]int{{0, 1, 5}}, "failed"},
		{base, [][]int{{0, 3}}, "apart"},
		{base, [][]int{{2, 1}}, "apart"},
		{base, [][]int{{0, 1}, {1, 2}}, "two rings"},
		{base, [][]int{{0, 11}}, "outside"},
		{base, [][]int{{}}, "empty"},
		{KRingConfig{Nodes: 10, K: 5, GPUsPerNode: 4}, nil, "K <= R"},
		{KRingConfig{Nodes: 10, K: 1, GPUsPerNode: 0}, nil, "GPUs per node"},
		{KRingConfig{Nodes: 4, K: 1, GPUsPerNode: 1, Faults: []int{0, 1, 2, 3}}, nil, "no healthy"},
		{KRingConfig{Nodes: 10, K: 1, GPUsPerNode: 2, NodesPerToR: 4}, [][]int{{8, 9}}, "not on the deployed line"},
	}
	for _, c := range cases {
		if _, err := BuildKRing(c.cfg, c.rings); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v %v: %v (want %q)", c.cfg, c.rings, err, c.want)
		}
	}
}
