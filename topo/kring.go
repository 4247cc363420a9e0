package topo

import "fmt"

// InfinitePOD K-hop rings with fault bypass ("InfinitePOD: Building
// Datacenter-Scale High-Bandwidth Domain for LLM with Optical Circuit
// Switching Transceivers", sec. 4.2).
//
// InfinitePOD puts nodes on a line and links node i to nodes i+-1 ..
// i+-K through the optical paths of its transceiver bundles; only two of a
// node's 2K links carry a ring at a time, the others are backups. A ring
// of any size is m consecutive healthy nodes whose two end nodes close the
// ring by loopback. When a node fails, its neighbours switch to a backup
// link and reach past it (N1-N3 when N2 fails), at full bandwidth; the
// line only breaks where K or more consecutive nodes have failed. Steps:
//
//  1. walk the line in order, skipping failed nodes;
//  2. two consecutive healthy nodes at line positions p < q are linked iff
//     q - p <= K, i.e. fewer than K failed nodes lie between them;
//  3. a run of K or more failures between healthy nodes ends a segment
//     (failures at the ends of the line break nothing).
//
// Each segment is a connected component of the healthy nodes under the
// K-hop links (the graph is an interval graph: a link never jumps over a
// healthy node it could not also reach), so this linear scan is the
// paper's depth-first search of Alg. 2, step 2. Every segment closes into a
// ring, and every prefix of m nodes of a segment does too (kring_tp.go).

// KHopSegments returns the healthy nodes of a K-hop line of n nodes
// (nodes 0..n-1 in line order) split at every run of K or more
// consecutive failed nodes: each segment lists its nodes in line order,
// consecutive ones at most K positions apart, and closes into a ring. With
// no such run there is one segment (or none if every node failed).
func KHopSegments(n, k int, faults []int) ([][]int, error) {
	failed, err := khopArgs(n, k, faults)
	if err != nil {
		return nil, err
	}
	return khopSegments(identityLine(n), k, failed), nil
}

// KHopLineSegments is KHopSegments for n nodes laid out along the line in
// another order (such as DeployLine's): line lists distinct nodes of
// 0..n-1 in line order (nodes not listed are not on the line), and K-hop
// links join nodes at most K line positions apart.
func KHopLineSegments(n, k int, line, faults []int) ([][]int, error) {
	failed, err := khopArgs(n, k, faults)
	if err != nil {
		return nil, err
	}
	seen := make([]bool, n)
	for _, v := range line {
		if v < 0 || v >= n || seen[v] {
			return nil, fmt.Errorf("K-hop line: node %d is outside 0..%d or listed twice", v, n-1)
		}
		seen[v] = true
	}
	return khopSegments(line, k, failed), nil
}

// KHopRing returns the single ring through every healthy node of a K-hop
// line of n nodes, in line order. It is an error if K or more consecutive
// failures split the line (the message names the run; KHopSegments splits
// instead) or if no node is healthy.
func KHopRing(n, k int, faults []int) ([]int, error) {
	failed, err := khopArgs(n, k, faults)
	if err != nil {
		return nil, err
	}
	segs := khopSegments(identityLine(n), k, failed)
	switch len(segs) {
	case 0:
		return nil, fmt.Errorf("K-hop ring: all %d nodes failed", n)
	case 1:
		return segs[0], nil
	}
	// Name the first break: the failures after segment 0.
	last := segs[0][len(segs[0])-1]
	first := segs[1][0]
	return nil, fmt.Errorf("K-hop ring: nodes %d..%d are %d consecutive failures, at least K = %d, so node %d cannot reach node %d and the line splits into %d segments", last+1, first-1, first-last-1, k, last, first, len(segs))
}

// khopArgs checks the common arguments and returns the failure mask.
func khopArgs(n, k int, faults []int) ([]bool, error) {
	if n < 1 || n > maxBuilderRanks {
		return nil, fmt.Errorf("K-hop line of %d nodes: want 1..%d", n, maxBuilderRanks)
	}
	if k < 1 {
		return nil, fmt.Errorf("K-hop line: K = %d: want at least 1 (node i links to i+-1..i+-K)", k)
	}
	failed, err := failedSet(n, faults)
	if err != nil {
		return nil, fmt.Errorf("K-hop line: %w", err)
	}
	return failed, nil
}

func identityLine(n int) []int {
	line := make([]int, n)
	for i := range line {
		line[i] = i
	}
	return line
}

// khopSegments splits the healthy nodes of line (node ids in line order)
// at every run of k or more consecutive blocked (failed) positions. The
// segments share one backing array.
func khopSegments(line []int, k int, failed []bool) [][]int {
	healthy := make([]int, 0, len(line))
	var segs [][]int
	start, run := 0, 0
	for _, v := range line {
		if failed[v] {
			run++
			continue
		}
		if len(healthy) > start && run >= k {
			segs = append(segs, healthy[start:len(healthy):len(healthy)])
			start = len(healthy)
		}
		healthy = append(healthy, v)
		run = 0
	}
	if len(healthy) > start {
		segs = append(segs, healthy[start:len(healthy):len(healthy)])
	}
	return segs
}
