package topo

import "fmt"

// TP-group placement on InfinitePOD without DCN constraints
// (InfinitePOD: Building Datacenter-Scale High-Bandwidth Domain for LLM with Optical Circuit Switching Transceivers, the paper's appendix D,
// Algorithm 2 "Orchestration-DCN-Free").
//
// A TP group of t GPUs takes m = t/r consecutive healthy nodes (r GPUs per
// node) of one K-hop segment; their outer bundles loop back and the m
// nodes form a GPU-level ring. Steps, O(|S|) as in the paper:
//
//  1. H = the healthy nodes; HE = the K-hop links between them;
//  2. the connected components of (H, HE), each in line order
//     (khopSegments, kring.go);
//  3. from each component pop runs of m nodes as TP groups, while at least
//     m nodes remain.
//
// A group thus holds only consecutive healthy nodes of one segment (any
// two neighbours in it at most K apart), and the healthy GPUs left over
// at the end of each segment are wasted. With no K consecutive failures
// the whole line is one segment and the waste is exactly the
// fragmentation formula of a single HB domain, ((n - F) r) mod t GPUs.

// TPPlacement is a set of TP groups on a K-hop line.
type TPPlacement struct {
	// NodesPerGroup is m = TP / GPUs per node.
	NodesPerGroup int `json:"nodes_per_group"`
	// Groups are the TP groups, each m node ids in line order; each closes
	// into a ring.
	Groups [][]int `json:"groups"`
	// HealthyGPUs counts the GPUs of healthy nodes (of the line used).
	HealthyGPUs int `json:"healthy_gpus"`
	// PlacedGPUs counts the GPUs in groups.
	PlacedGPUs int `json:"placed_gpus"`
	// WastedGPUs = HealthyGPUs - PlacedGPUs: healthy GPUs in no group.
	WastedGPUs int `json:"wasted_gpus"`
}

// PlaceTPGroups places TP groups of tp GPUs on a K-hop line of n nodes of
// gpusPerNode GPUs each, with the given failed nodes (Algorithm 2). tp
// must be a positive multiple of gpusPerNode, and K at most gpusPerNode
// (a node has 2R external paths for its 2K links).
func PlaceTPGroups(n, k, gpusPerNode, tp int, faults []int) (*TPPlacement, error) {
	failed, err := khopArgs(n, k, faults)
	if err != nil {
		return nil, err
	}
	m, err := tpNodes(k, gpusPerNode, tp)
	if err != nil {
		return nil, err
	}
	return placeTPGroups(identityLine(n), k, failed, m, gpusPerNode), nil
}

// tpNodes checks TP and node sizes and returns m = tp/gpusPerNode.
func tpNodes(k, gpusPerNode, tp int) (int, error) {
	if gpusPerNode < 1 {
		return 0, fmt.Errorf("TP placement: %d GPUs per node: want at least 1", gpusPerNode)
	}
	if k > gpusPerNode {
		return 0, fmt.Errorf("TP placement: K = %d hops need 2K = %d external paths, but a node of %d GPUs has 2R = %d (InfinitePOD: K <= R)", k, 2*k, gpusPerNode, 2*gpusPerNode)
	}
	if tp < 1 || tp%gpusPerNode != 0 {
		return 0, fmt.Errorf("TP placement: TP size %d is not a positive multiple of the %d GPUs per node (a TP group is m whole nodes)", tp, gpusPerNode)
	}
	return tp / gpusPerNode, nil
}

// placeTPGroups runs Algorithm 2 on a line (node ids in line order).
func placeTPGroups(line []int, k int, failed []bool, m, r int) *TPPlacement {
	p := &TPPlacement{NodesPerGroup: m, Groups: [][]int{}}
	for _, seg := range khopSegments(line, k, failed) {
		p.HealthyGPUs += len(seg) * r
		p.Groups = popGroups(p.Groups, seg, m)
	}
	p.PlacedGPUs = len(p.Groups) * m * r
	p.WastedGPUs = p.HealthyGPUs - p.PlacedGPUs
	return p
}

// popGroups appends the runs of m nodes at the front of seg.
func popGroups(groups [][]int, seg []int, m int) [][]int {
	for i := 0; i+m <= len(seg); i += m {
		groups = append(groups, seg[i:i+m:i+m])
	}
	return groups
}
