package algo

import (
	"sort"

	"github.com/occl/occl/topo"
)

// RouteDelegated plans the delegated all-to-all of the byte matrix bytes
// on t.
//
// # Delegated all-to-all (mFabric's topology-aware all-to-all)
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
// standing for s or d themselves, and the packet network straight from s
// to d. Blocks between hosts without a circuit take the packet network and
// are booked first; the others follow from the largest down, each to the
// candidate that would finish its load soonest (a circuit: its bytes over
// its bandwidth; the packet network: the larger of the bytes booked on s's
// NIC and on d's NIC, over the NIC bandwidth), ties going to a delegation
// rank on s's NUMA node, then to s itself. So circuits carry what they
// can, and the packet network takes the rest at the same time.
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
	// Packet-network load per NIC and direction.
	tx, rx := map[int]float64{}, map[int]float64{}
	nicBW := func(nic int) float64 {
		if nic >= 0 && t.NICs[nic].Bandwidth > 0 {
			return t.NICs[nic].Bandwidth
		}
		return max(t.Classes[topo.EPS].Bandwidth, 1)
	}
	epsCost := func(s, d int, b float64) float64 {
		sn, dn := t.Ranks[s].NIC, t.Ranks[d].NIC
		return max((tx[sn]+b)/nicBW(sn), (rx[dn]+b)/nicBW(dn))
	}
	var choose []block
	for s := 0; s < n; s++ {
		for d := 0; d < n; d++ {
			hs, hd := t.Ranks[s].Host, t.Ranks[d].Host
			if hs == hd || len(cands[[2]int{hs, hd}]) == 0 || t.Path(s, d).Class == topo.None {
				// Same host, or no circuit: straight there in the
				// inter-host phase.
				r.Set(s, d, s, d, d)
				if hs != hd {
					tx[t.Ranks[s].NIC] += float64(bytes[s][d])
					rx[t.Ranks[d].NIC] += float64(bytes[s][d])
				}
				continue
			}
			choose = append(choose, block{s, d})
		}
	}
	sort.SliceStable(choose, func(i, j int) bool {
		return bytes[choose[i].src][choose[i].dst] > bytes[choose[j].src][choose[j].dst]
	})
	for _, bl := range choose {
		s, d := bl.src, bl.dst
		b := float64(bytes[s][d])
		var best *candidate
		bestCost := epsCost(s, d, b)
		for _, c := range cands[[2]int{t.Ranks[s].Host, t.Ranks[d].Host}] {
			cost := (c.load + b) / c.bw
			if cost < bestCost || (best != nil && cost == bestCost && prefer(t, s, c.from, best.from)) {
				best, bestCost = c, cost
			}
		}
		if best == nil {
			r.Set(s, d, s, d, d)
			tx[t.Ranks[s].NIC] += b
			rx[t.Ranks[d].NIC] += b
			continue
		}
		best.load += b
		from, to := best.from, best.to
		if from < 0 {
			from = s
		}
		if to < 0 {
			to = d
		}
		r.Set(s, d, from, to, d)
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
