package topo

import "fmt"

// Rail-only forwarding ("How to Build Low-cost Networks for Large Language Models (without Sacrificing Performance)?", the paper's sec. 4,
// all-to-all with forwarding).
//
// On a rail-only fabric a message from src to dst takes:
//
//   - the HB fabric alone if src and dst share an HB domain;
//   - the rail network alone if src and dst sit on the same rail;
//   - otherwise two hops: inside src's domain to the GPU on dst's rail (HB
//     fabric), then across that rail to dst (rail network).
//
// The forwarding rank is therefore "the rank of src's domain on dst's
// rail". RailOnlyForwarder computes it from global ids of a uniform fabric
// (rank g = domain*K + rail); RailRouter does the same on any Topology, by
// looking ranks up per (HB domain, rail).

// RailOnlyForwarder returns the rank that carries a message from src to
// dst across the rail network of a uniform rail-only fabric with k GPUs
// per domain (rank g is GPU g mod k of domain g div k): src itself when
// src and dst share a domain or a rail (no forwarding), otherwise the rank
// of src's domain on dst's rail. It returns -1 if k < 1 or a rank is
// negative.
func RailOnlyForwarder(k, src, dst int) int {
	if k < 1 || src < 0 || dst < 0 {
		return -1
	}
	if src/k == dst/k || src%k == dst%k {
		return src
	}
	return src/k*k + dst%k
}

// RailRouter answers forwarding questions on a rail-only topology built by
// any means (BuildRailOnly, a topology file): the HB domain of a rank is
// its host's HBDomain, or the host itself for HBDomain -1.
type RailRouter struct {
	t      *Topology
	domain []int          // rank -> domain key
	byRail map[[2]int]int // (domain key, rail) -> lowest rank
}

// NewRailRouter indexes a topology for RailRouter.Forwarder. Every rank
// must have a rail (Rank.Rail >= 0).
func NewRailRouter(t *Topology) (*RailRouter, error) {
	if t == nil || len(t.Ranks) == 0 {
		return nil, fmt.Errorf("rail router: empty topology")
	}
	r := &RailRouter{t: t, domain: make([]int, len(t.Ranks)), byRail: map[[2]int]int{}}
	for i, rk := range t.Ranks {
		if rk.Host < 0 || rk.Host >= len(t.Hosts) {
			return nil, fmt.Errorf("rail router: rank %d on host %d of %d", i, rk.Host, len(t.Hosts))
		}
		if rk.Rail < 0 {
			return nil, fmt.Errorf("rail router: rank %d has no rail", i)
		}
		// Domain keys: HB domains as they are, hosts without one as
		// -1-host (never equal to a real domain).
		d := t.Hosts[rk.Host].HBDomain
		if d < 0 {
			d = -1 - rk.Host
		}
		r.domain[i] = d
		key := [2]int{d, rk.Rail}
		if _, ok := r.byRail[key]; !ok {
			r.byRail[key] = i
		}
	}
	return r, nil
}

// Forwarder returns the rank that carries a message from src to dst
// across the rail network: src when no forwarding is needed (same HB
// domain, same rail), else the lowest rank of src's HB domain on dst's
// rail. It returns -1 if src or dst is out of range or src's domain has no
// rank on dst's rail (then there is no path at all).
func (r *RailRouter) Forwarder(src, dst int) int {
	n := len(r.domain)
	if src < 0 || dst < 0 || src >= n || dst >= n {
		return -1
	}
	if r.domain[src] == r.domain[dst] || r.t.Ranks[src].Rail == r.t.Ranks[dst].Rail {
		return src
	}
	f, ok := r.byRail[[2]int{r.domain[src], r.t.Ranks[dst].Rail}]
	if !ok {
		return -1
	}
	return f
}
