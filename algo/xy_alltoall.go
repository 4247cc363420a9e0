package algo

import "github.com/occl/occl/topo"

// RouteXY plans the X-then-Y all-to-all on t. It returns nil unless every
// host has a two-dimensional coordinate, coordinates are distinct and
// every intermediate host has a rank of the source's local rank.
//
// # X-then-Y all-to-all (RailX)
//
// On a RailX grid each host has a coordinate (x, y); rails join the hosts
// of a row (same y) and the hosts of a column (same x), and hosts in
// different rows and columns are not directly connected. A block from host
// (x1, y1) to host (x2, y2) first moves along its row to (x2, y1), then
// along the column to (x2, y2). The intermediate rank has the source's
// local rank (the same rail).
//
// Steps (phases of the routed engine):
//
//	0 X phase: blocks move along rows (blocks inside a row go straight to
//	           their destination; blocks inside a host too)
//	1 Y phase: blocks move along columns to their destination
//
// Communication steps: 2 phases. Bytes on the wire: a block between hosts
// of different rows and columns crosses two links, all others one. On an
// X by Y grid with one rank per host and D bytes per block, a rank sends
// each of its X-1 row peers the Y blocks for that peer's column, (X-1) Y D
// bytes in the X phase, and each of its Y-1 column peers the X blocks its
// row has for that peer, (Y-1) X D bytes in the Y phase.
func RouteXY(t *topo.Topology) *Route {
	n := len(t.Ranks)
	at := map[[3]int]int{} // (x, y, local rank) -> rank
	for x := 0; x < n; x++ {
		c := t.Hosts[t.Ranks[x].Host].Coord
		if len(c) != 2 {
			return nil
		}
		key := [3]int{c[0], c[1], t.Ranks[x].LocalRank}
		if _, dup := at[key]; dup {
			return nil
		}
		at[key] = x
	}
	r := NewRoute(AlgoXY, n, 2)
	for s := 0; s < n; s++ {
		cs := t.Hosts[t.Ranks[s].Host].Coord
		for d := 0; d < n; d++ {
			cd := t.Hosts[t.Ranks[d].Host].Coord
			switch {
			case cs[1] == cd[1]: // same row (or host): X phase
				r.Set(s, d, d, d)
			case cs[0] == cd[0]: // same column: Y phase
				r.Set(s, d, s, d)
			default:
				m, ok := at[[3]int{cd[0], cs[1], t.Ranks[s].LocalRank}]
				if !ok {
					return nil
				}
				r.Set(s, d, m, d)
			}
		}
	}
	return r
}
