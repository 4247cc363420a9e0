package topo

import "fmt"

// ToR-aware TP placement on InfinitePOD (InfinitePOD paper, "HBD-DCN
// orchestration"; the paper's sec. 4.3 and appendix D, Algorithms 3, 4
// and 5).
//
// Nodes hang off ToR switches, p per ToR (node v under ToR v div p), and
// ToRs off aggregation switches, d nodes per aggregation domain. TP
// traffic stays on the InfinitePOD rings; DP/CP traffic crosses the DCN
// between the GPUs of equal TP rank, and stays under one ToR if the TP
// groups are aligned across the nodes of each ToR.
//
// Algorithm 3 (deployment) wires the K-hop line so that line neighbours
// sit under different ToRs: sub-line i is the i-th node of every ToR
// (i, i+p, i+2p, ...), and the p sub-lines are joined end to end
// (DeployLine). Nodes past the last full ToR are left out.
//
// Algorithm 4 (placement under c constraints) cuts every sub-line into
// pieces of l = d/p nodes, one per aggregation domain (piece (i, D) holds
// the i-th node of the l ToRs of domain D), and
//
//   - isolates the first min(c, #pieces) pieces, in deployed order: each
//     is placed alone with Algorithm 2, so no TP group crosses a domain
//     boundary there;
//   - aligns the first max(0, c - #pieces) domains: a failure under a ToR
//     of an aligned domain counts as a failure of all p nodes of that ToR,
//     so the p pieces of the domain see the same faults and get the same
//     groups at the same ToRs (CP groups under one ToR);
//   - places the rest of the line (what no isolated piece took, with the
//     K-hop links of the deployed line between its nodes) with Algorithm 2.
//
// Algorithm 5 binary-searches the number of constraints c in
// [0, #domains + #pieces] for the largest c whose placement still holds
// the job (groups * t >= s), relaxing alignment first, then isolation;
// it keeps the best feasible placement. (The paper's pseudo-code writes
// n_maxsubline = nd/p; the number of pieces is n/l = np/d, used here, and
// it returns the last placement tried, which may be infeasible; here the
// last feasible one is kept.)

// DeployLine returns the deployed line order of Algorithm 3 for n nodes, p
// per ToR: for i = 0..p-1, the nodes i, i+p, ..., i+(T-1)p with T = n/p
// ToRs (rounded down). Consecutive entries sit under different ToRs unless
// there is a single ToR.
func DeployLine(n, p int) ([]int, error) {
	if n < 1 || n > maxBuilderRanks {
		return nil, fmt.Errorf("deployment: %d nodes: want 1..%d", n, maxBuilderRanks)
	}
	if p < 1 || p > n {
		return nil, fmt.Errorf("deployment: %d nodes per ToR for %d nodes: want 1..%d", p, n, n)
	}
	tors := n / p
	line := make([]int, 0, tors*p)
	for i := 0; i < p; i++ {
		for j := 0; j < tors; j++ {
			line = append(line, i+j*p)
		}
	}
	return line, nil
}

// ToRPlacementConfig is the input of PlaceTPGroupsToR.
type ToRPlacementConfig struct {
	// Nodes, K, GPUsPerNode (r) and TP (t) as for PlaceTPGroups.
	Nodes       int `json:"nodes"`
	K           int `json:"k"`
	GPUsPerNode int `json:"gpus_per_node"`
	TP          int `json:"tp"`
	// Faults are the failed nodes.
	Faults []int `json:"faults"`
	// NodesPerToR is p.
	NodesPerToR int `json:"nodes_per_tor"`
	// NodesPerDomain is d, the nodes under one aggregation domain, a
	// multiple of p; 0 means one domain of all deployed nodes.
	NodesPerDomain int `json:"nodes_per_domain"`
	// JobGPUs is s, the GPUs the job needs in TP groups; 0 means all that
	// the deployed line holds without constraints (Algorithm 2).
	JobGPUs int `json:"job_gpus"`
}

// ToRPlacement is the result of PlaceTPGroupsToR.
type ToRPlacement struct {
	TPPlacement
	// Line is the deployed line order (Algorithm 3).
	Line []int `json:"line"`
	// JobGPUs is the job size placed for.
	JobGPUs int `json:"job_gpus"`
	// Constraints is the number of constraints the chosen placement
	// satisfies, of MaxConstraints = domains + pieces.
	Constraints    int `json:"constraints"`
	MaxConstraints int `json:"max_constraints"`
	// IsolatedPieces and AlignedDomains split Constraints.
	IsolatedPieces int `json:"isolated_pieces"`
	AlignedDomains int `json:"aligned_domains"`
	// CrossDomainGroups counts TP groups with nodes in two aggregation
	// domains (the traffic the constraints avoid).
	CrossDomainGroups int `json:"cross_domain_groups"`
}

// PlaceTPGroupsToR places TP groups on a K-hop line deployed across ToRs
// (Algorithms 3-5): the placement holding at least JobGPUs GPUs in TP
// groups that satisfies the most DCN-locality constraints.
func PlaceTPGroupsToR(cfg ToRPlacementConfig) (*ToRPlacement, error) {
	failed, err := khopArgs(cfg.Nodes, cfg.K, cfg.Faults)
	if err != nil {
		return nil, err
	}
	m, err := tpNodes(cfg.K, cfg.GPUsPerNode, cfg.TP)
	if err != nil {
		return nil, err
	}
	p := cfg.NodesPerToR
	line, err := DeployLine(cfg.Nodes, p)
	if err != nil {
		return nil, err
	}
	tors := cfg.Nodes / p
	d := cfg.NodesPerDomain
	if d == 0 {
		d = tors * p
	}
	if d < p || d%p != 0 || d > tors*p {
		return nil, fmt.Errorf("ToR placement: %d nodes per aggregation domain: want a multiple of the %d nodes per ToR, at most the %d deployed nodes", cfg.NodesPerDomain, p, tors*p)
	}
	if cfg.JobGPUs < 0 {
		return nil, fmt.Errorf("ToR placement: job of %d GPUs", cfg.JobGPUs)
	}
	pl := &torPlacer{line: line, k: cfg.K, m: m, r: cfg.GPUsPerNode, p: p, l: d / p, tors: tors, failed: failed}
	pl.domains = tors / pl.l
	pl.pieces = pl.domains * p
	s := cfg.JobGPUs
	free := pl.place(0)
	if s == 0 {
		s = free.PlacedGPUs
	}
	if free.PlacedGPUs < s {
		return nil, fmt.Errorf("ToR placement: a job of %d GPUs needs %d TP groups of %d GPUs, but the deployed line holds only %d even without DCN constraints", s, (s+cfg.TP-1)/cfg.TP, cfg.TP, len(free.Groups))
	}
	best := free
	lo, hi := 0, pl.domains+pl.pieces
	for lo <= hi {
		mid := (lo + hi) / 2
		cand := pl.place(mid)
		if cand.PlacedGPUs >= s {
			if mid >= best.Constraints {
				best = cand
			}
			lo = mid + 1
		} else {
			hi = mid - 1
		}
	}
	best.JobGPUs = s
	best.MaxConstraints = pl.domains + pl.pieces
	return best, nil
}

// torPlacer holds what Algorithm 4 needs.
type torPlacer struct {
	line          []int
	k, m, r, p, l int
	tors, domains int
	pieces        int
	failed        []bool
}

// domainOf returns the aggregation domain of node v (domains for the
// ToRs past the last full domain).
func (pl *torPlacer) domainOf(v int) int {
	return min((v/pl.p)/pl.l, pl.domains)
}

// place runs Algorithm 4 with c constraints.
func (pl *torPlacer) place(c int) *ToRPlacement {
	align := max(0, c-pl.pieces)
	isolated := min(pl.pieces, c)
	failed := pl.failed
	if align > 0 {
		failed = append([]bool(nil), pl.failed...)
		for tor := 0; tor < align*pl.l; tor++ {
			bad := false
			for v := tor * pl.p; v < (tor+1)*pl.p; v++ {
				bad = bad || pl.failed[v]
			}
			if bad {
				for v := tor * pl.p; v < (tor+1)*pl.p; v++ {
					failed[v] = true
				}
			}
		}
	}
	out := &ToRPlacement{Line: pl.line, Constraints: c, IsolatedPieces: isolated, AlignedDomains: align}
	out.NodesPerGroup = pl.m
	out.Groups = [][]int{}
	// Pieces in deployed order: piece (i, D) is positions
	// i*tors + D*l .. + l-1 of the line; the first `isolated` are i-major.
	taken := make([]bool, len(pl.line))
	blocked := make([]bool, len(failed))
	copy(blocked, failed)
	for q := 0; q < isolated; q++ {
		i, dom := q/pl.domains, q%pl.domains
		start := i*pl.tors + dom*pl.l
		piece := pl.line[start : start+pl.l]
		for pos := start; pos < start+pl.l; pos++ {
			taken[pos] = true
		}
		out.Groups = append(out.Groups, placeTPGroups(piece, pl.k, failed, pl.m, pl.r).Groups...)
	}
	// The residual line: isolated positions are gaps (no K-hop link
	// crosses them unless it is short enough to reach past).
	for pos, v := range pl.line {
		if taken[pos] {
			blocked[v] = true
		}
	}
	out.Groups = append(out.Groups, placeTPGroups(pl.line, pl.k, blocked, pl.m, pl.r).Groups...)
	// Healthy GPUs of the deployed line: nodes that only count as failed
	// for alignment are still healthy (and wasted if unplaced).
	for _, v := range pl.line {
		if !pl.failed[v] {
			out.HealthyGPUs += pl.r
		}
	}
	out.PlacedGPUs = len(out.Groups) * pl.m * pl.r
	out.WastedGPUs = out.HealthyGPUs - out.PlacedGPUs
	for _, g := range out.Groups {
		for _, v := range g[1:] {
			if pl.domainOf(v) != pl.domainOf(g[0]) {
				out.CrossDomainGroups++
				break
			}
		}
	}
	return out
}
