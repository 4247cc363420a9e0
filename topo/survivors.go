package topo

import (
	"fmt"
	"slices"
	"strconv"
)

// The fabric left after failures: Bypass rewires the optical links around
// failed hosts as the fabric physically can, Without gives the survivors'
// topology, whose ring order and circuits use only links that exist.
//
// A communicator that loses ranks rebuilds on its survivors; Subset alone
// would keep the survivors' links as they were, so the ring would step
// from a failed host's predecessor to its successor over a circuit that
// went to the failed host. Three kinds of fabric are told apart by the
// data the builders write:
//
//   - an InfinitePOD K-hop line (BuildKRing): every host has one
//     coordinate, its line position, and its OCS ports are named "+d" and
//     "-d", the fibre to the node d positions ahead or back. When a node
//     fails, its ring neighbours switch to the backup link that reaches
//     past it ("InfinitePOD: Building Datacenter-Scale High-Bandwidth
//     Domain for LLM with Optical Circuit Switching Transceivers",
//     sec. 4.2): consecutive healthy nodes of an HB domain at distance d
//     are joined by port +d of the first and -d of the second, and the
//     domain splits where no such link exists (K or more consecutive
//     failures). Every piece is an HB domain of its own; the flat ring
//     folds through each (FoldedRingOrder) and crosses between them over
//     the DCN, as BuildKRing does for several segments. A node with a
//     failed GPU counts as failed (the paper's appendix A counts faults
//     so), so its other ranks idle.
//   - a RailX grid (BuildRailX): every host has two coordinates, and they
//     fill a full grid. A failed node disconnects its row and column
//     ("RailX: A Flexible, Scalable, and Low-Cost Network Architecture
//     for Hyper-Scale LLM Training Systems", sec. 6.6), so one of them
//     goes, and LargestAllocation chooses which (appendix A.5, Algorithm
//     2), as does any node whose chip failed; the rings of every rail are
//     rebuilt over the remaining nodes of each row and column (spliced,
//     below), and the flat ring follows a Hamiltonian ring of the
//     remaining grid (GridHamiltonianCycle, HamiltonianRingOrder).
//   - any other fabric: a host is gone once all its ranks failed; optical
//     circuits are spliced around it, and the ring keeps its order.
//
// Splicing: the circuits of a removed host on one rail (NIC.Rail, its +
// and - ports on a RailX rail; ports without a rail form one group) are
// taken in port order, each paired with the next unpaired one whose peer
// is on another host, and the two peers of each pair are joined directly,
// on the ports that went to the removed host. On a rail ring u -> h -> w
// this gives u -> w: the ring closes over the remaining nodes, on the same
// optical switch (a RailX rail's switch serves one row or column), and no
// port gains a circuit. A peer left unpaired (a ring of two, an odd
// number of circuits) keeps a free port, so a host whose only circuits
// went to a removed hub can end up without one.

// Survivors is what a fabric keeps after failures (Topology.Without).
type Survivors struct {
	// Ranks are the ranks of the original topology that keep working,
	// ascending: rank i of Topology is rank Ranks[i] of the original.
	Ranks []int `json:"ranks"`
	// Idle are healthy ranks left out, ascending: the other ranks of a
	// failed node of a K-hop line or grid, and the nodes of the rows and
	// columns a RailX allocation disables. A recovery excludes them
	// together with the failed ranks.
	Idle []int `json:"idle"`
	// Topology is the survivors' topology.
	Topology *Topology `json:"topology"`
}

// Without returns the fabric left when the given ranks of t fail: which
// ranks keep working and their topology, whose ring order crosses between
// hosts only over links the fabric has (see the top of survivors.go for
// K-hop lines, RailX grids and other fabrics). A K-hop line that K or
// more consecutive failures split is no error, unlike for KHopRing: each
// piece becomes an HB domain, and the flat ring crosses between them over
// the DCN. Duplicate failed ranks count once. It is an error if t is invalid, a failed rank is out of
// range or nothing survives, with the reason (no rank survives, or no
// fault-free sub-grid remains).
func (t *Topology) Without(failed []int) (*Survivors, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("fabric without ranks %v: %w", failed, err)
	}
	dead, err := t.failedRanks(failed)
	if err != nil {
		return nil, err
	}
	_, kline := t.kHopPorts()
	xs, ys, grid := t.grid()
	cut := make([]bool, len(t.Hosts))
	for h, ranks := range t.HostRanks() {
		all, some := true, false
		for _, r := range ranks {
			all = all && dead[r]
			some = some || dead[r]
		}
		// On a K-hop line or a grid a node with a failed rank is failed.
		cut[h] = len(ranks) > 0 && all || some && (kline || grid)
	}
	var alloc *Allocation
	if grid {
		if alloc, err = t.allocate(xs, ys, cut); err != nil {
			return nil, err
		}
		cols, rows := map[int]bool{}, map[int]bool{}
		for _, i := range alloc.Cols {
			cols[xs[i]] = true
		}
		for _, j := range alloc.Rows {
			rows[ys[j]] = true
		}
		for h, x := range t.Hosts {
			cut[h] = cut[h] || !cols[x.Coord[0]] || !rows[x.Coord[1]]
		}
	}
	s := &Survivors{Ranks: []int{}, Idle: []int{}}
	for r, rk := range t.Ranks {
		switch {
		case !cut[rk.Host] && !dead[r]:
			s.Ranks = append(s.Ranks, r)
		case !dead[r]:
			s.Idle = append(s.Idle, r)
		}
	}
	if len(s.Ranks) == 0 {
		return nil, fmt.Errorf("fabric without ranks %v: no rank survives (%d failed, %d healthy ranks on failed or disabled nodes)", failed, len(t.Ranks)-len(s.Idle), len(s.Idle))
	}
	b := t.bypass(cut)
	if grid {
		if b.Ring, err = gridRing(b, xs, ys, alloc); err != nil {
			return nil, fmt.Errorf("fabric without ranks %v: %w", failed, err)
		}
	}
	s.Topology = b.Subset(s.Ranks)
	if err := s.Topology.Validate(); err != nil {
		return nil, fmt.Errorf("fabric without ranks %v: %w", failed, err)
	}
	return s, nil
}

// Bypass returns a copy of t in which the given hosts carry no circuit and
// the optical links are rewired around them as the fabric can (see the top
// of survivors.go): on a K-hop line their neighbours switch to backup
// links and HB domains split where none reaches, and the flat ring is
// folded again; elsewhere their circuits are spliced and the ring keeps
// its order. Hosts, ranks and NICs stay as they are; the bypassed hosts'
// ranks close the ring, for Subset to drop. Duplicates count once; an
// invalid t or a host out of range is an error.
func (t *Topology) Bypass(hosts []int) (*Topology, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("bypass hosts %v: %w", hosts, err)
	}
	cut := make([]bool, len(t.Hosts))
	for _, h := range hosts {
		if h < 0 || h >= len(t.Hosts) {
			return nil, fmt.Errorf("bypass host %d: outside the %d hosts", h, len(t.Hosts))
		}
		cut[h] = true
	}
	out := t.bypass(cut)
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("bypass hosts %v: %w", hosts, err)
	}
	return out, nil
}

// failedRanks turns a list of failed ranks into a mask.
func (t *Topology) failedRanks(failed []int) ([]bool, error) {
	dead := make([]bool, len(t.Ranks))
	for _, r := range failed {
		if r < 0 || r >= len(t.Ranks) {
			return nil, fmt.Errorf("failed rank %d: outside the %d ranks", r, len(t.Ranks))
		}
		dead[r] = true
	}
	return dead, nil
}

// bypass is Bypass on a mask of hosts.
func (t *Topology) bypass(cut []bool) *Topology {
	out := *t
	out.Hosts = slices.Clone(t.Hosts)
	if ports, ok := t.kHopPorts(); ok {
		out.Circuits, out.Ring = t.kHopBypass(&out, cut, ports)
		return &out
	}
	out.Circuits = t.splice(cut)
	if len(t.Ring) > 0 {
		out.Ring = cutRing(t.RingOrder(), t, cut)
	}
	return &out
}

// cutRing returns ring without the ranks of cut hosts, then those ranks.
func cutRing(ring []int, t *Topology, cut []bool) []int {
	out := make([]int, 0, len(ring))
	var tail []int
	for _, r := range ring {
		if cut[t.Ranks[r].Host] {
			tail = append(tail, r)
		} else {
			out = append(out, r)
		}
	}
	return append(out, tail...)
}

// KHopReach returns K if t is an InfinitePOD K-hop line, as BuildKRing
// makes one: every host has one coordinate, its line position, and its OCS
// ports are named "+d" and "-d" (the fibres to the nodes d positions ahead
// and back), d up to K. Otherwise it returns 0.
func (t *Topology) KHopReach() int {
	ports, ok := t.kHopPorts()
	if !ok {
		return 0
	}
	k := 0
	for p := range ports {
		k = max(k, p.D, -p.D)
	}
	return k
}

// kHopPort names the port of host Host reaching D line positions ahead
// (D > 0) or back (D < 0).
type kHopPort struct{ Host, D int }

// kHopPorts returns the ports of a K-hop line by host and signed reach,
// and whether t is one: every host has one coordinate and every OCS port
// is named +d or -d, at least one of them.
func (t *Topology) kHopPorts() (map[kHopPort]int, bool) {
	for _, h := range t.Hosts {
		if len(h.Coord) != 1 {
			return nil, false
		}
	}
	ports := map[kHopPort]int{}
	for i, n := range t.NICs {
		if n.Class != OCS {
			continue
		}
		d, err := strconv.Atoi(n.Name)
		if err != nil || d == 0 || len(n.Name) < 2 || n.Name[0] != '+' && n.Name[0] != '-' {
			return nil, false
		}
		ports[kHopPort{n.Host, d}] = i
	}
	return ports, len(ports) > 0
}

// kHopBypass returns the circuits and ring of a K-hop line without the cut
// hosts, and sets out's HB domains: every domain's remaining hosts in line
// order, split where consecutive ones have no link, each piece a domain.
func (t *Topology) kHopBypass(out *Topology, cut []bool, ports map[kHopPort]int) ([]Circuit, []int) {
	var order []int // original domains, by first host
	members := map[int][]int{}
	for h, x := range t.Hosts {
		if x.HBDomain < 0 || cut[h] {
			continue
		}
		if _, ok := members[x.HBDomain]; !ok {
			order = append(order, x.HBDomain)
		}
		members[x.HBDomain] = append(members[x.HBDomain], h)
	}
	type pair struct{ a, b int }
	links := map[pair][2]int{} // consecutive hosts -> their ports
	var pieces [][]int
	for _, d := range order {
		hs := members[d]
		slices.SortStableFunc(hs, func(a, b int) int { return t.Hosts[a].Coord[0] - t.Hosts[b].Coord[0] })
		start := 0
		for i := 1; i <= len(hs); i++ {
			if i < len(hs) {
				u, w := hs[i-1], hs[i]
				gap := t.Hosts[w].Coord[0] - t.Hosts[u].Coord[0]
				pu, okU := ports[kHopPort{u, gap}]
				pw, okW := ports[kHopPort{w, -gap}]
				if okU && okW && gap > 0 {
					links[pair{min(u, w), max(u, w)}] = [2]int{pu, pw}
					continue
				}
			}
			pieces = append(pieces, hs[start:i])
			start = i
		}
	}
	for h := range out.Hosts {
		if cut[h] {
			out.Hosts[h].HBDomain = -1
		}
	}
	for i, p := range pieces {
		for _, h := range p {
			out.Hosts[h].HBDomain = i
		}
	}
	// Keep the circuits that still join consecutive hosts (or hosts
	// outside any domain), add the backup links that are missing.
	var circuits []Circuit
	for _, c := range t.Circuits {
		a, b := t.NICs[c.A].Host, t.NICs[c.B].Host
		if cut[a] || cut[b] {
			continue
		}
		if _, ok := links[pair{min(a, b), max(a, b)}]; ok {
			delete(links, pair{min(a, b), max(a, b)})
		} else if t.Hosts[a].HBDomain >= 0 || t.Hosts[b].HBDomain >= 0 {
			continue
		}
		circuits = append(circuits, c)
	}
	for _, p := range pieces {
		for i := 1; i < len(p); i++ {
			if l, ok := links[pair{min(p[i-1], p[i]), max(p[i-1], p[i])}]; ok {
				circuits = append(circuits, Circuit{A: l[0], B: l[1]})
			}
		}
	}
	if len(t.Ring) == 0 {
		return circuits, nil
	}
	hr := t.HostRanks()
	ring := make([]int, 0, len(t.Ranks))
	for _, p := range pieces {
		ring = foldHosts(ring, hr, p)
	}
	for h, x := range t.Hosts {
		if x.HBDomain < 0 && !cut[h] {
			ring = append(ring, hr[h]...)
		}
	}
	for h := range t.Hosts {
		if cut[h] {
			ring = append(ring, hr[h]...)
		}
	}
	return circuits, ring
}

// splice returns t's circuits with the cut hosts spliced out (see the top
// of survivors.go).
func (t *Topology) splice(cut []bool) []Circuit {
	cs := slices.Clone(t.Circuits)
	peer := map[int]int{} // port -> index in cs
	for i, c := range cs {
		peer[c.A], peer[c.B] = i, i
	}
	gone := make([]bool, len(cs))
	for h := range t.Hosts {
		if !cut[h] {
			continue
		}
		type group struct{ peers, circuits []int }
		groups := map[int]*group{} // by rail; peer ports in port order
		var rails []int
		for p, n := range t.NICs {
			i, ok := peer[p]
			if n.Host != h || !ok || gone[i] {
				continue
			}
			q := cs[i].A
			if q == p {
				q = cs[i].B
			}
			gone[i] = true
			delete(peer, p)
			delete(peer, q)
			if t.NICs[q].Host == h {
				continue
			}
			g := groups[n.Rail]
			if g == nil {
				g = &group{}
				groups[n.Rail] = g
				rails = append(rails, n.Rail)
			}
			g.peers = append(g.peers, q)
			g.circuits = append(g.circuits, i)
		}
		for _, rail := range rails {
			g := groups[rail]
			paired := make([]bool, len(g.peers))
			for k, a := range g.peers {
				for j := k + 1; j < len(g.peers) && !paired[k]; j++ {
					b := g.peers[j]
					if paired[j] || t.NICs[a].Host == t.NICs[b].Host {
						continue
					}
					paired[k], paired[j] = true, true
					peer[a], peer[b] = len(cs), len(cs)
					cs = append(cs, Circuit{A: a, B: b, Bandwidth: t.spliceBandwidth(cs[g.circuits[k]], cs[g.circuits[j]])})
					gone = append(gone, false)
				}
			}
		}
	}
	out := make([]Circuit, 0, len(cs))
	for i, c := range cs {
		if !gone[i] {
			out = append(out, c)
		}
	}
	return out
}

// spliceBandwidth is the bandwidth of a circuit spliced from a and b: the
// slower of the two (0 stands for the OCS class default).
func (t *Topology) spliceBandwidth(a, b Circuit) float64 {
	def := t.Classes[OCS].Bandwidth
	bw := func(c Circuit) float64 {
		if c.Bandwidth > 0 {
			return c.Bandwidth
		}
		return def
	}
	if m := min(bw(a), bw(b)); m != def {
		return m
	}
	return 0
}

// grid returns the distinct column and row coordinates, ascending, if
// every host has two coordinates and together they fill that grid once.
func (t *Topology) grid() (xs, ys []int, ok bool) {
	seen := map[[2]int]bool{}
	for _, h := range t.Hosts {
		if len(h.Coord) != 2 || seen[[2]int{h.Coord[0], h.Coord[1]}] {
			return nil, nil, false
		}
		seen[[2]int{h.Coord[0], h.Coord[1]}] = true
		xs = append(xs, h.Coord[0])
		ys = append(ys, h.Coord[1])
	}
	slices.Sort(xs)
	slices.Sort(ys)
	xs, ys = slices.Compact(xs), slices.Compact(ys)
	return xs, ys, len(t.Hosts) > 0 && len(xs)*len(ys) == len(t.Hosts)
}

// allocate runs LargestAllocation on the grid (xs, ys: its coordinates)
// with the failed hosts as faults, in grid indices.
func (t *Topology) allocate(xs, ys []int, failed []bool) (*Allocation, error) {
	var faults []GridFault
	for h, x := range t.Hosts {
		if failed[h] {
			faults = append(faults, GridFault{X: slices.Index(xs, x.Coord[0]), Y: slices.Index(ys, x.Coord[1])})
		}
	}
	a, err := LargestAllocation(len(xs), len(ys), faults)
	if err != nil {
		return nil, fmt.Errorf("fabric without %d failed nodes: %w", len(faults), err)
	}
	if a.Size == 0 {
		return nil, fmt.Errorf("fabric without %d failed nodes: no fault-free sub-grid of the %dx%d grid remains (every row or column holds a failed node)", len(faults), len(xs), len(ys))
	}
	return a, nil
}

// gridRing returns the flat ring of an allocation of grid b: a
// Hamiltonian ring of the kept rows and columns, crossing between nodes
// over b's circuits (or, on a grid without circuits, over the packet links
// of rows and columns).
func gridRing(b *Topology, xs, ys []int, a *Allocation) ([]int, error) {
	at := map[[2]int]int{}
	for h, x := range b.Hosts {
		at[[2]int{x.Coord[0], x.Coord[1]}] = h
	}
	cyc, err := GridHamiltonianCycle(len(a.Cols), len(a.Rows))
	if err != nil {
		return nil, err
	}
	hosts := make([]int, len(cyc))
	for i, v := range cyc {
		hosts[i] = at[[2]int{xs[a.Cols[v%len(a.Cols)]], ys[a.Rows[v/len(a.Cols)]]}]
	}
	if len(b.Circuits) == 0 {
		// A grid of packet links (GridOnly): hosts of a row or column
		// reach each other directly, whatever ranks cross.
		hr := b.HostRanks()
		var ring []int
		for _, h := range hosts {
			ring = append(ring, hr[h]...)
		}
		return ring, nil
	}
	ring, err := HamiltonianRingOrder(b, hosts)
	if err != nil {
		return nil, fmt.Errorf("ring over the %dx%d allocation: %w", len(a.Cols), len(a.Rows), err)
	}
	return ring, nil
}
