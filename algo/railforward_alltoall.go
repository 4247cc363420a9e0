package algo

import "github.com/occl/occl/topo"

// RouteRailForward plans the rail-forwarded all-to-all on t. It returns
// nil if some block has no forwarding rank (a domain without a rank on
// the destination's rail).
//
// # Rail-forwarded all-to-all (rail-only networks)
//
// A rail-only fabric joins the ranks of an HB domain by a fast fabric and
// the ranks of one rail (the same local rank in every domain) by a rail
// switch; there is no path between different rails of different domains.
// After the rail-only paper, a block from s to d on another domain and
// another rail is forwarded inside s's domain to the rank on d's rail,
// which sends it across that rail.
//
// Steps (phases of the routed engine):
//
//	0 HB phase:   every rank sends each rank f of its domain the blocks
//	              that must cross f's rail, and the blocks for f itself
//	1 rail phase: every rank sends each rank of its rail in another
//	              domain the blocks for it, its own and forwarded ones
//
// Communication steps: 2 phases. Bytes on the wire, for x ranks per
// domain, y domains and D bytes per block: each rank sends (x-1) y D
// bytes on the HB fabric and x (y-1) D on its rail, so that the time is
// the rail-only paper's y(x-1)D/C_F + x(y-1)D/C_S, against x(y-1)D/C_S
// for the direct exchange on a full-bisection fabric.
func RouteRailForward(t *topo.Topology) *Route {
	n := len(t.Ranks)
	r := NewRoute(AlgoRailForward, n, 2)
	domain := func(x int) int {
		h := t.Ranks[x].Host
		if d := t.Hosts[h].HBDomain; d >= 0 {
			return -1 - d
		}
		return h
	}
	onRail := map[[2]int]int{} // (domain, rail) -> rank
	for x := n - 1; x >= 0; x-- {
		onRail[[2]int{domain(x), t.Ranks[x].Rail}] = x
	}
	for s := 0; s < n; s++ {
		for d := 0; d < n; d++ {
			switch {
			case domain(s) == domain(d):
				r.Set(s, d, d, d)
			case t.Ranks[s].Rail == t.Ranks[d].Rail:
				r.Set(s, d, s, d)
			default:
				f, ok := onRail[[2]int{domain(s), t.Ranks[d].Rail}]
				if !ok {
					return nil
				}
				r.Set(s, d, f, d)
			}
		}
	}
	return r
}
