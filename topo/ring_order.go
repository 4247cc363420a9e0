package topo

import "fmt"

// Ring-order helpers: turn a ring of hosts into a Topology.Ring, the order
// of ranks that flat ring schedules follow, so that every hop of the flat
// ring is a physical link.
//
// HamiltonianRingOrder is for rings whose hops between hosts are optical
// circuits (a RailX Hamiltonian ring, ring_grid.go). A circuit ends on
// ports that particular ranks drive (Rank.Ports), so the flat ring must
// leave a host from the rank that drives the outgoing circuit and enter the
// next host at the rank that drives the other end. Steps:
//
//  1. for each hop host[s] -> host[s+1] list the usable (exit rank, entry
//     rank) pairs: one per circuit between the two hosts, -1 for a port
//     any rank of the host may use; hosts of one HB domain need no circuit
//     (any pair);
//  2. inside a host the ring runs entry rank, the other ranks in local
//     order, exit rank, so entry and exit must differ on a host of two or
//     more ranks: pick one pair per hop satisfying that at every host, by
//     dynamic programming around the ring (fix the last hop's pair, sweep
//     forward keeping which pairs are reachable, check the closing host,
//     then walk back), which is linear in the number of pairs;
//  3. emit the hosts' ranks in that order.
//
// FoldedRingOrder is for InfinitePOD K-hop rings (the InfinitePOD paper): a
// line of nodes closes into a ring by loopback at both ends, so the flat
// ring goes out along the line through the first half of every node's
// GPUs and comes back through the second half; every hop is then between
// line neighbours or inside a node.

// ringHop is one way to cross from a host to the next one: the rank that
// leaves and the rank that arrives (-1: any rank of its host).
type ringHop struct{ exit, entry int }

// HamiltonianRingOrder returns the ranks of the given hosts in a ring
// order that follows the cyclic host order hosts[0], hosts[1], ...,
// hosts[0] and crosses from each host to the next over an optical circuit
// whose two ports the crossing ranks may drive (or inside an HB domain).
// If hosts lists every host of t, the result is a permutation of all ranks
// fit for Topology.Ring. It is an error if two consecutive hosts are
// joined by no circuit, or if no choice of circuits lets every host be
// entered and left by different ranks.
func HamiltonianRingOrder(t *Topology, hosts []int) ([]int, error) {
	hr, err := ringHosts(t, hosts)
	if err != nil {
		return nil, err
	}
	L := len(hosts)
	owner := make([]int, len(t.NICs))
	for i := range owner {
		owner[i] = -1
	}
	for r, rk := range t.Ranks {
		for _, p := range rk.Ports {
			if p < 0 || p >= len(owner) {
				return nil, fmt.Errorf("ring order: rank %d drives port %d of %d", r, p, len(owner))
			}
			owner[p] = r
		}
	}
	opts := make([][]ringHop, L)
	if L > 1 {
		// Steps by unordered host pair (two steps share a pair when L = 2).
		steps := make(map[[2]int][]int, L)
		for s := 0; s < L; s++ {
			a, b := hosts[s], hosts[(s+1)%L]
			steps[[2]int{min(a, b), max(a, b)}] = append(steps[[2]int{min(a, b), max(a, b)}], s)
			ha, hb := t.Hosts[a], t.Hosts[b]
			if ha.HBDomain >= 0 && ha.HBDomain == hb.HBDomain {
				opts[s] = append(opts[s], ringHop{-1, -1})
			}
		}
		for i, c := range t.Circuits {
			if c.A < 0 || c.B < 0 || c.A >= len(t.NICs) || c.B >= len(t.NICs) {
				return nil, fmt.Errorf("ring order: circuit %d joins ports %d and %d of %d", i, c.A, c.B, len(t.NICs))
			}
			ha, hb := t.NICs[c.A].Host, t.NICs[c.B].Host
			for _, s := range steps[[2]int{min(ha, hb), max(ha, hb)}] {
				if hosts[s] == ha {
					opts[s] = addHop(opts[s], ringHop{owner[c.A], owner[c.B]})
				} else {
					opts[s] = addHop(opts[s], ringHop{owner[c.B], owner[c.A]})
				}
			}
		}
	}
	return ringThroughHosts(hosts, hr, opts)
}

// addHop appends h unless an equal hop is listed.
func addHop(opts []ringHop, h ringHop) []ringHop {
	for _, o := range opts {
		if o == h {
			return opts
		}
	}
	return append(opts, h)
}

// ringHosts checks that hosts are distinct hosts of t and returns every
// host's ranks in local-rank order.
func ringHosts(t *Topology, hosts []int) ([][]int, error) {
	if t == nil || len(hosts) == 0 {
		return nil, fmt.Errorf("ring order: no hosts")
	}
	seen := make([]bool, len(t.Hosts))
	for _, h := range hosts {
		if h < 0 || h >= len(t.Hosts) {
			return nil, fmt.Errorf("ring order: host %d out of range (%d hosts)", h, len(t.Hosts))
		}
		if seen[h] {
			return nil, fmt.Errorf("ring order: host %d listed twice", h)
		}
		seen[h] = true
	}
	hr := make([][]int, len(t.Hosts))
	for r, rk := range t.Ranks {
		if rk.Host < 0 || rk.Host >= len(t.Hosts) {
			return nil, fmt.Errorf("ring order: rank %d on host %d of %d", r, rk.Host, len(t.Hosts))
		}
		hr[rk.Host] = append(hr[rk.Host], r)
	}
	// Ranks were appended in rank order; sort each host's by local rank
	// (insertion sort: hosts are small and usually already in order).
	for _, rs := range hr {
		for i := 1; i < len(rs); i++ {
			for j := i; j > 0 && t.Ranks[rs[j]].LocalRank < t.Ranks[rs[j-1]].LocalRank; j-- {
				rs[j], rs[j-1] = rs[j-1], rs[j]
			}
		}
	}
	for _, h := range hosts {
		if len(hr[h]) == 0 {
			return nil, fmt.Errorf("ring order: host %d has no rank", h)
		}
	}
	return hr, nil
}

// ringThroughHosts chooses one hop per step (opts[s] leads from hosts[s]
// to hosts[s+1]) so that no host of two or more ranks is entered and left
// by the same rank, and returns the resulting rank order.
func ringThroughHosts(hosts []int, hr [][]int, opts [][]ringHop) ([]int, error) {
	L := len(hosts)
	if L == 1 {
		return append([]int(nil), hr[hosts[0]]...), nil
	}
	for s := range opts {
		if len(opts[s]) == 0 {
			return nil, fmt.Errorf("ring order: hosts %d and %d are not joined by a circuit", hosts[s], hosts[(s+1)%L])
		}
	}
	compat := func(h, entry, exit int) bool {
		return len(hr[h]) <= 1 || entry < 0 || exit < 0 || entry != exit
	}
	reach := make([][]bool, L-1)
	for s := range reach {
		reach[s] = make([]bool, len(opts[s]))
	}
	chosen := make([]ringHop, L)
	found := false
	for _, last := range opts[L-1] {
		// Entries that may arrive at hosts[s]: summarised as "any" (a -1 or
		// two distinct ranks) or a single rank.
		anyEntry, oneEntry, haveEntry := last.entry < 0, last.entry, true
		for s := 0; s <= L-2 && haveEntry; s++ {
			h := hosts[s]
			nAny, nOne, nHave := false, -2, false
			for i, o := range opts[s] {
				ok := len(hr[h]) <= 1 || o.exit < 0 || anyEntry || oneEntry != o.exit
				reach[s][i] = ok
				if !ok {
					continue
				}
				switch {
				case o.entry < 0 || (nHave && nOne != o.entry):
					nAny = true
				default:
					nOne = o.entry
				}
				nHave = true
			}
			anyEntry, oneEntry, haveEntry = nAny, nOne, nHave
		}
		if !haveEntry {
			continue
		}
		// Walk back from the last hop.
		chosen[L-1] = last
		ok := true
		for s := L - 2; s >= 0 && ok; s-- {
			ok = false
			for i, o := range opts[s] {
				if reach[s][i] && compat(hosts[s+1], o.entry, chosen[s+1].exit) {
					chosen[s], ok = o, true
					break
				}
			}
		}
		if ok {
			found = true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("ring order: no choice of circuits enters and leaves every host through different ranks")
	}
	var out []int
	for s, h := range hosts {
		entry, exit := chosen[(s+L-1)%L].entry, chosen[s].exit
		out = appendHostRanks(out, hr[h], entry, exit)
	}
	return out, nil
}

// appendHostRanks appends a host's ranks: entry first, exit last, the
// others in local order between; -1 means any rank.
func appendHostRanks(out, ranks []int, entry, exit int) []int {
	if len(ranks) == 1 {
		return append(out, ranks[0])
	}
	switch {
	case entry < 0 && exit < 0:
		entry, exit = ranks[0], ranks[len(ranks)-1]
	case entry < 0:
		entry = ranks[0]
		if entry == exit {
			entry = ranks[1]
		}
	case exit < 0:
		exit = ranks[len(ranks)-1]
		if exit == entry {
			exit = ranks[len(ranks)-2]
		}
	}
	out = append(out, entry)
	for _, r := range ranks {
		if r != entry && r != exit {
			out = append(out, r)
		}
	}
	return append(out, exit)
}

// FoldedRingOrder returns the ranks of the given hosts, a line in line
// order, as a folded ring: out along the line through the first half
// (rounded up) of every host's ranks in local order, back along the line
// through the second half in reverse local order. Every hop is then inside
// a host or between line neighbours, as an InfinitePOD ring closed by
// loopback at both ends needs. A host of one rank is visited only on the
// way out, so the closing hop of a line of single-rank hosts joins the
// line's two ends.
func FoldedRingOrder(t *Topology, hosts []int) ([]int, error) {
	hr, err := ringHosts(t, hosts)
	if err != nil {
		return nil, err
	}
	return foldHosts(nil, hr, hosts), nil
}

// foldHosts appends the folded ring of hosts (hr: ranks per host in local
// order) to out.
func foldHosts(out []int, hr [][]int, hosts []int) []int {
	for _, h := range hosts {
		rs := hr[h]
		out = append(out, rs[:(len(rs)+1)/2]...)
	}
	for i := len(hosts) - 1; i >= 0; i-- {
		rs := hr[hosts[i]]
		for j := len(rs) - 1; j >= (len(rs)+1)/2; j-- {
			out = append(out, rs[j])
		}
	}
	return out
}
