package topo

import "fmt"

// InfinitePOD topology builder ("InfinitePOD: Building Datacenter-Scale High-Bandwidth Domain for LLM with Optical Circuit Switching Transceivers", the paper's sec. 4.1
// and 4.2, Figures 2 and 4).
//
// Each ring of healthy nodes (a K-hop segment, or a TP group from
// PlaceTPGroups / PlaceTPGroupsToR) is one high-bandwidth domain: its GPUs
// talk GPU to GPU over the optical links of the ring, without switches.
// Steps:
//
//  1. every node of a ring becomes a Host (Coord = its line position,
//     HBDomain = the ring's index, ToR = node div NodesPerToR when given);
//  2. every GPU becomes a Rank with its own DCN NIC (EPS, rail = local
//     rank), for the DP/PP traffic that leaves the HB domain;
//  3. every node gets 2K OCS ports, "+1".."+K" towards the next nodes of
//     the line and "-1".."-K" towards the previous ones; the ring's active
//     links become circuits: consecutive ring nodes d positions apart
//     join port +d of the first to port -d of the second (the other ports
//     are the idle backups);
//  4. Topology.Ring is the folded ring of every HB domain (FoldedRingOrder:
//     out through the first half of each node's GPUs, back through the
//     second), domains one after the other.

// KRingConfig describes an InfinitePOD line.
type KRingConfig struct {
	// Nodes on the line and K, the hop reach of a node's links.
	Nodes int `json:"nodes"`
	K     int `json:"k"`
	// GPUsPerNode is R; K must not exceed it.
	GPUsPerNode int `json:"gpus_per_node"`
	// Faults are the failed nodes; no ring may use them.
	Faults []int `json:"faults"`
	// NodesPerToR, if positive, deploys the line across ToRs
	// (DeployLine, Algorithm 3) and sets Host.ToR; 0 keeps node order.
	NodesPerToR int `json:"nodes_per_tor,omitempty"`
	// Classes are the link parameters (zero fields: DefaultClasses).
	Classes LinkClasses `json:"classes"`
}

// line returns the line order of the configuration.
func (c *KRingConfig) line() ([]int, error) {
	if c.NodesPerToR > 0 {
		return DeployLine(c.Nodes, c.NodesPerToR)
	}
	if c.NodesPerToR < 0 {
		return nil, fmt.Errorf("InfinitePOD: %d nodes per ToR", c.NodesPerToR)
	}
	return identityLine(c.Nodes), nil
}

// BuildKRing returns the topology of the given rings of an InfinitePOD
// line: rings[i] lists node ids in line order, each two consecutive ones
// at most K line positions apart, all healthy, no node in two rings. With
// rings nil it uses the K-hop segments of all healthy nodes.
func BuildKRing(cfg KRingConfig, rings [][]int) (*Topology, error) {
	failed, err := khopArgs(cfg.Nodes, cfg.K, cfg.Faults)
	if err != nil {
		return nil, err
	}
	if cfg.GPUsPerNode < 1 {
		return nil, fmt.Errorf("InfinitePOD: %d GPUs per node: want at least 1", cfg.GPUsPerNode)
	}
	if cfg.K > cfg.GPUsPerNode {
		return nil, fmt.Errorf("InfinitePOD: K = %d hops need 2K = %d external paths, but a node of %d GPUs has 2R = %d (K <= R)", cfg.K, 2*cfg.K, cfg.GPUsPerNode, 2*cfg.GPUsPerNode)
	}
	if _, err := checkProduct("InfinitePOD GPUs", cfg.Nodes, cfg.GPUsPerNode); err != nil {
		return nil, err
	}
	if err := cfg.Classes.check(); err != nil {
		return nil, fmt.Errorf("InfinitePOD: %w", err)
	}
	line, err := cfg.line()
	if err != nil {
		return nil, err
	}
	pos := make([]int, cfg.Nodes)
	for i := range pos {
		pos[i] = -1
	}
	for p, v := range line {
		pos[v] = p
	}
	if rings == nil {
		rings = khopSegments(line, cfg.K, failed)
	}
	used := make([]bool, cfg.Nodes)
	for i, ring := range rings {
		if len(ring) == 0 {
			return nil, fmt.Errorf("InfinitePOD: ring %d is empty", i)
		}
		for j, v := range ring {
			switch {
			case v < 0 || v >= cfg.Nodes:
				return nil, fmt.Errorf("InfinitePOD: ring %d: node %d is outside 0..%d", i, v, cfg.Nodes-1)
			case pos[v] < 0:
				return nil, fmt.Errorf("InfinitePOD: ring %d: node %d is not on the deployed line", i, v)
			case failed[v]:
				return nil, fmt.Errorf("InfinitePOD: ring %d uses failed node %d", i, v)
			case used[v]:
				return nil, fmt.Errorf("InfinitePOD: node %d is in two rings", v)
			}
			used[v] = true
			if j > 0 {
				if d := pos[v] - pos[ring[j-1]]; d < 1 || d > cfg.K {
					return nil, fmt.Errorf("InfinitePOD: ring %d: nodes %d and %d are %d line positions apart; consecutive ring nodes must be 1..K = %d apart, in line order", i, ring[j-1], v, d, cfg.K)
				}
			}
		}
	}
	r, k := cfg.GPUsPerNode, cfg.K
	portsPerNode := r + 2*k // R DCN NICs, then +1..+K, -1..-K
	names := make([]string, portsPerNode)
	for l := 0; l < r; l++ {
		names[l] = fmt.Sprintf("dcn%d", l)
	}
	for d := 1; d <= k; d++ {
		names[r+d-1] = fmt.Sprintf("+%d", d)
		names[r+k+d-1] = fmt.Sprintf("-%d", d)
	}
	total := 0
	for _, ring := range rings {
		total += len(ring)
	}
	t := &Topology{
		Name:     fmt.Sprintf("infinitepod K=%d, %d nodes of %d GPUs", k, cfg.Nodes, r),
		Hosts:    make([]Host, 0, total),
		Ranks:    make([]Rank, 0, total*r),
		NICs:     make([]NIC, 0, total*portsPerNode),
		Circuits: make([]Circuit, 0, total),
		Classes:  cfg.Classes.Map(),
	}
	coords := make([]int, total)
	hostRings := make([][]int, 0, len(rings))
	for i, ring := range rings {
		hosts := make([]int, 0, len(ring))
		for j, v := range ring {
			h := len(t.Hosts)
			hosts = append(hosts, h)
			coords[h] = pos[v]
			tor := -1
			if cfg.NodesPerToR > 0 {
				tor = v / cfg.NodesPerToR
			}
			t.Hosts = append(t.Hosts, Host{Name: fmt.Sprintf("node%d", v), HBDomain: i, ToR: tor, Coord: coords[h : h+1 : h+1]})
			base := len(t.NICs)
			for p := 0; p < portsPerNode; p++ {
				n := NIC{Host: h, Name: names[p], Class: OCS, Rail: -1}
				if p < r {
					n.Class, n.Rail = EPS, p
				}
				t.NICs = append(t.NICs, n)
			}
			for l := 0; l < r; l++ {
				t.Ranks = append(t.Ranks, Rank{Host: h, LocalRank: l, NIC: base + l, Rail: l})
			}
			if j > 0 {
				d := pos[v] - pos[ring[j-1]]
				prevBase := base - portsPerNode
				t.Circuits = append(t.Circuits, Circuit{A: prevBase + r + d - 1, B: base + r + k + d - 1})
			}
		}
		hostRings = append(hostRings, hosts)
	}
	if len(t.Ranks) == 0 {
		return nil, fmt.Errorf("InfinitePOD: no healthy node to build a ring of")
	}
	all := make([]int, len(t.Ranks))
	for i := range all {
		all[i] = i
	}
	hr := make([][]int, len(t.Hosts))
	for h := range hr {
		hr[h] = all[h*r : (h+1)*r]
	}
	t.Ring = make([]int, 0, len(t.Ranks))
	for _, hosts := range hostRings {
		t.Ring = foldHosts(t.Ring, hr, hosts)
	}
	return t, nil
}
