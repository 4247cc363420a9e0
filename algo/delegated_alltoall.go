// Delegated all-to-all (mFabric's topology-aware all-to-all)
//
// On a fabric where each host has a few optical-circuit ports, each driven
// by one rank, and a packet network, traffic to a host that a circuit
// reaches is funnelled through the rank that drives the circuit (the
// delegation rank) instead of every rank crossing the slower packet
// network on its own.
//
// Planning, for every block (s, d) with s and d on different hosts H and
// G: the candidates are the circuits between H and G, each as the pair
// (rank driving the port on H, rank driving the port on G), a shared port
// standing for s or d themselves. Blocks are assigned in (source,
// destination) order to the candidate whose load in bytes per second of
// circuit bandwidth would be the lowest, preferring a delegation rank on
// s's NUMA node, then s itself; with no circuit between H and G the block
// crosses the packet network directly from s to d.
//
// Steps (phases of the routed engine):
//
//	0 gather:  s sends the block to its delegation rank on H (HB link)
//	1 inter:   the delegation rank sends it over the circuit to the
//	           delegation rank on G; at the same time blocks without a
//	           circuit cross the packet network and blocks between ranks
//	           of one host move over the HB links (the intra-host
//	           exchange overlaps the inter-host one)
//	2 scatter: the delegation rank on G hands the block to d (HB link)
//
// Communication steps: 3 phases. Bytes on the wire: every inter-host byte
// crosses the network once; a block whose source or destination is not a
// delegation rank also crosses an HB link once at each such end.

package algo

import (
	"math"

	"github.com/occl/occl/topo"
)

// RouteDelegated plans the delegated all-to-all of the byte matrix bytes
// on t.
func RouteDelegated(t *topo.Topology, bytes [][]int) *Route {
	n := len(t.Ranks)
	r := NewRoute(AlgoDelegated, n, 3)
	type candidate struct {
		from, to int // delegation ranks, -1 for the block's own source / destination
		bw       float64
		load     float64
	}
	cands := map[[2]int][]*candidate{}
	for _, c := range t.Circuits {
		ha, hb := t.NICs[c.A].Host, t.NICs[c.B].Host
		bw := c.Bandwidth
		if bw <= 0 {
			bw = t.Classes[topo.OCS].Bandwidth
		}
		if bw <= 0 {
			bw = 1
		}
		oa, ob := t.PortOwner(c.A), t.PortOwner(c.B)
		cands[[2]int{ha, hb}] = append(cands[[2]int{ha, hb}], &candidate{from: oa, to: ob, bw: bw})
		cands[[2]int{hb, ha}] = append(cands[[2]int{hb, ha}], &candidate{from: ob, to: oa, bw: bw})
	}
	for s := 0; s < n; s++ {
		for d := 0; d < n; d++ {
			hs, hd := t.Ranks[s].Host, t.Ranks[d].Host
			cs := cands[[2]int{hs, hd}]
			if hs == hd || len(cs) == 0 {
				// Same host, or no circuit: straight there in the
				// inter-host phase.
				r.Set(s, d, s, d, d)
				continue
			}
			var best *candidate
			bestCost := math.Inf(1)
			for _, c := range cs {
				cost := (c.load + float64(bytes[s][d])) / c.bw
				if best == nil || cost < bestCost || (cost == bestCost && prefer(t, s, c.from, best.from)) {
					best, bestCost = c, cost
				}
			}
			best.load += float64(bytes[s][d])
			from, to := best.from, best.to
			if from < 0 {
				from = s
			}
			if to < 0 {
				to = d
			}
			r.Set(s, d, from, to, d)
		}
	}
	return r
}

// prefer reports whether delegation rank a is a better choice than b for
// traffic from s: on s's NUMA node, then s itself (no gather hop).
func prefer(t *topo.Topology, s, a, b int) bool {
	numa := func(x int) bool { return x < 0 || t.Ranks[x].NUMA == t.Ranks[s].NUMA }
	if numa(a) != numa(b) {
		return numa(a)
	}
	self := func(x int) bool { return x < 0 || x == s }
	return self(a) && !self(b)
}
