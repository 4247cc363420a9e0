package topo

import (
	"testing"
)

// The paper-scale fabrics: RailX with R = 128 (64 x 64 nodes), m = 7,
// n = 9 (63 rails): 200,704 chips; InfinitePOD with 131,072 GPUs (32,768
// nodes of 4, K = 3, TP-32, about 1% failed nodes).
var (
	railx200K = RailXConfig{Kind: RailXHyperX, X: 64, Y: 64, Mesh: 7, Rails: 63}
	kring131K = struct{ nodes, k, r, tp int }{32768, 3, 4, 32}
)

func kringFaults(n int) []int {
	var faults []int
	for v := 7; v < n; v += 97 {
		faults = append(faults, v)
		if v%3 == 0 && v+1 < n {
			faults = append(faults, v+1) // some runs of two
		}
	}
	return faults
}

func BenchmarkBuildRailX200K(b *testing.B) {
	for _, kind := range []RailXKind{RailXHyperX, RailXTorus} {
		b.Run(string(kind), func(b *testing.B) {
			cfg := railx200K
			cfg.Kind = kind
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := BuildRailX(cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPlaceTPGroups131K(b *testing.B) {
	faults := kringFaults(kring131K.nodes)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PlaceTPGroups(kring131K.nodes, kring131K.k, kring131K.r, kring131K.tp, faults); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlaceTPGroupsToR131K(b *testing.B) {
	cfg := ToRPlacementConfig{Nodes: kring131K.nodes, K: kring131K.k, GPUsPerNode: kring131K.r, TP: kring131K.tp,
		Faults: kringFaults(kring131K.nodes), NodesPerToR: 8, NodesPerDomain: 512}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PlaceTPGroupsToR(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuildKRing131K(b *testing.B) {
	faults := kringFaults(kring131K.nodes)
	p, err := PlaceTPGroups(kring131K.nodes, kring131K.k, kring131K.r, kring131K.tp, faults)
	if err != nil {
		b.Fatal(err)
	}
	cfg := KRingConfig{Nodes: kring131K.nodes, K: kring131K.k, GPUsPerNode: kring131K.r, Faults: faults}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildKRing(cfg, p.Groups); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDirectedHamiltonianCycles64(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		directedCache.Delete(64)
		if _, err := DirectedHamiltonianCycles(64); err != nil {
			b.Fatal(err)
		}
	}
}

// The paper-scale builds once, checked: the RailX topology validates, its
// counts match the paper's (1,032,192 optical ports), its ring is a
// permutation; the K-hop placement covers the healthy nodes.
func TestPaperScaleBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("paper-scale builds take about two seconds")
	}
	top, f, err := BuildRailX(railx200K)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Ranks) != 200704 || len(top.NICs) != 1032192 || len(top.Circuits) != 516096 || f.Nodes() != 4096 {
		t.Fatalf("%d chips, %d ports, %d circuits", len(top.Ranks), len(top.NICs), len(top.Circuits))
	}
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	checkPhysicalRing(t, top)
	faults := kringFaults(kring131K.nodes)
	p, err := PlaceTPGroups(kring131K.nodes, kring131K.k, kring131K.r, kring131K.tp, faults)
	if err != nil {
		t.Fatal(err)
	}
	if p.HealthyGPUs != (kring131K.nodes-len(faults))*kring131K.r || p.WastedGPUs >= kring131K.tp {
		t.Fatalf("131K placement: %d healthy, %d wasted", p.HealthyGPUs, p.WastedGPUs)
	}
	kt, err := BuildKRing(KRingConfig{Nodes: kring131K.nodes, K: kring131K.k, GPUsPerNode: kring131K.r, Faults: faults}, p.Groups)
	if err != nil {
		t.Fatal(err)
	}
	if err := kt.Validate(); err != nil {
		t.Fatal(err)
	}
}
