package topo

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
)

// Optical ports and circuits
//
// A host of an OCS fabric has a few ports on the optical circuit switch
// besides its packet-network NIC (mFabric: three of four NICs per server).
// Each port hangs off one GPU's PCIe switch, so one rank drives it: that
// rank is the delegation rank for whatever host the port's circuit reaches.
// AddPorts gives every host its ports, Connect installs a circuit between
// two hosts on free ports, and PlaceCircuits chooses which host pairs get
// circuits for a demand matrix.

// SwitchPorts returns the NIC index of every port of the optical circuit
// switch that t has: the NICs of class OCS, in NIC order. SwitchPort gives
// each one's number on the switch; in a fabric described whole, without
// switch ports set, switch port p is NIC SwitchPorts()[p].
func (t *Topology) SwitchPorts() []int {
	var out []int
	for i, n := range t.NICs {
		if n.Class == OCS {
			out = append(out, i)
		}
	}
	return out
}

// SwitchPort returns the number of OCS NIC nic on the optical circuit
// switch: its NIC.SwitchPort if set, else its place among t's NICs of
// class OCS in NIC order. It returns -1 if nic is not an OCS NIC of t.
func (t *Topology) SwitchPort(nic int) int {
	if nic < 0 || nic >= len(t.NICs) || t.NICs[nic].Class != OCS {
		return -1
	}
	if p := t.NICs[nic].SwitchPort; p != nil {
		return *p
	}
	k := 0
	for _, n := range t.NICs[:nic] {
		if n.Class == OCS {
			k++
		}
	}
	return k
}

// switchPortMap returns the switch port of every OCS NIC of t, by NIC
// index.
func (t *Topology) switchPortMap() map[int]int {
	port := map[int]int{}
	k := 0
	for i, n := range t.NICs {
		if n.Class != OCS {
			continue
		}
		port[i] = k
		if n.SwitchPort != nil {
			port[i] = *n.SwitchPort
		}
		k++
	}
	return port
}

// SwitchSize returns the fewest ports a switch needs to hold t's OCS
// ports: one more than the highest switch port (0 without OCS ports).
func (t *Topology) SwitchSize() int {
	n := 0
	for _, p := range t.switchPortMap() {
		n = max(n, p+1)
	}
	return n
}

// validateSwitchPorts checks that only OCS NICs set a switch port, and
// that the switch ports of t's OCS NICs are non-negative and distinct.
func (t *Topology) validateSwitchPorts() error {
	owner := map[int]int{}
	for i, n := range t.NICs {
		if n.SwitchPort == nil {
			continue
		}
		if n.Class != OCS {
			return fmt.Errorf("NIC %d of class %s has switch port %d: only OCS NICs are switch ports", i, n.Class, *n.SwitchPort)
		}
		if *n.SwitchPort < 0 {
			return fmt.Errorf("NIC %d: negative switch port %d", i, *n.SwitchPort)
		}
	}
	port := t.switchPortMap()
	for _, i := range t.SwitchPorts() {
		p := port[i]
		if o, dup := owner[p]; dup {
			return fmt.Errorf("NICs %d and %d are both switch port %d", o, i, p)
		}
		owner[p] = i
	}
	return nil
}

// SwitchCircuits returns t's circuits with their ends as switch ports (see
// SwitchPort), normalized and sorted, without bandwidths: the
// cross-connects the switch holds for t. It fails if a circuit joins a NIC
// that is not an OCS port.
func (t *Topology) SwitchCircuits() ([]Circuit, error) {
	port := t.switchPortMap()
	out := make([]Circuit, 0, len(t.Circuits))
	for _, c := range t.Circuits {
		a, okA := port[c.A]
		b, okB := port[c.B]
		if !okA || !okB {
			return nil, fmt.Errorf("circuit %d-%d joins NICs that are not OCS ports", c.A, c.B)
		}
		out = append(out, Circuit{A: a, B: b}.Normalize())
	}
	slices.SortStableFunc(out, func(x, y Circuit) int { return cmp.Compare(x.A, y.A) })
	return out, nil
}

// AddPorts adds perHost OCS ports to every host: port i of a host is
// driven by its local rank i mod (ranks of the host), so that the circuits
// of a host spread over its ranks, unless shared is set, in which case no
// rank owns them and every rank of the host may use them. Ports take the
// NUMA node of their owner.
func (t *Topology) AddPorts(perHost int, shared bool) {
	hosts := t.HostRanks()
	for h, ranks := range hosts {
		for i := 0; i < perHost; i++ {
			nic := len(t.NICs)
			port := NIC{Host: h, Name: fmt.Sprintf("ocs%d", i), Rail: -1, Class: OCS}
			if len(ranks) > 0 {
				r := ranks[i%len(ranks)]
				port.NUMA = t.Ranks[r].NUMA
				if !shared {
					t.Ranks[r].Ports = append(t.Ranks[r].Ports, nic)
				}
			}
			t.NICs = append(t.NICs, port)
		}
	}
}

// FreePorts returns the OCS ports of host h that carry no circuit.
func (t *Topology) FreePorts(h int) []int {
	used := map[int]bool{}
	for _, c := range t.Circuits {
		used[c.A], used[c.B] = true, true
	}
	var out []int
	for i, n := range t.NICs {
		if n.Host == h && n.Class == OCS && !used[i] {
			out = append(out, i)
		}
	}
	return out
}

// Connect installs a circuit of bandwidth bw (0: the OCS class default)
// between a free port of host a and a free port of host b. Among free
// ports it prefers one whose owner drives the fewest circuits to the other
// host already, so that several circuits between two hosts land on
// different ranks (and NUMA nodes) and their traffic is balanced.
func (t *Topology) Connect(a, b int, bw float64) error {
	if a < 0 || b < 0 || a >= len(t.Hosts) || b >= len(t.Hosts) || a == b {
		return fmt.Errorf("circuit between hosts %d and %d: want two different hosts of %d", a, b, len(t.Hosts))
	}
	pa, err := t.pickPort(a, b)
	if err != nil {
		return err
	}
	pb, err := t.pickPort(b, a)
	if err != nil {
		return err
	}
	t.Circuits = append(t.Circuits, Circuit{A: pa, B: pb, Bandwidth: bw})
	return nil
}

// pickPort chooses a free port of host h for a circuit to host peer.
func (t *Topology) pickPort(h, peer int) (int, error) {
	free := t.FreePorts(h)
	if len(free) == 0 {
		return 0, fmt.Errorf("circuit between hosts %d and %d: host %d has no free OCS port", h, peer, h)
	}
	// Circuits host h already has to peer, per owner (-1: shared).
	load := map[int]int{}
	numaLoad := map[int]int{}
	for _, c := range t.Circuits {
		for _, e := range [][2]int{{c.A, c.B}, {c.B, c.A}} {
			if t.NICs[e[0]].Host == h && t.NICs[e[1]].Host == peer {
				load[t.PortOwner(e[0])]++
				numaLoad[t.NICs[e[0]].NUMA]++
			}
		}
	}
	sort.SliceStable(free, func(i, j int) bool {
		oi, oj := t.PortOwner(free[i]), t.PortOwner(free[j])
		if load[oi] != load[oj] {
			return load[oi] < load[oj]
		}
		return numaLoad[t.NICs[free[i]].NUMA] < numaLoad[t.NICs[free[j]].NUMA]
	})
	return free[0], nil
}

// HostDemand sums a rank-to-rank demand matrix (bytes from rank i to rank
// j) into a host-to-host one.
func (t *Topology) HostDemand(demand [][]float64) [][]float64 {
	out := make([][]float64, len(t.Hosts))
	for i := range out {
		out[i] = make([]float64, len(t.Hosts))
	}
	for i, row := range demand {
		for j, d := range row {
			out[t.Ranks[i].Host][t.Ranks[j].Host] += d
		}
	}
	return out
}

// ConnectFor installs circuits on t's free OCS ports for a rank-to-rank
// demand (bytes from rank i to rank j): the host pairs PlaceCircuits
// chooses with the OCS and EPS class bandwidths, each joined by Connect.
func (t *Topology) ConnectFor(demand [][]float64) error {
	if len(demand) != len(t.Ranks) {
		return fmt.Errorf("circuits for a demand of %d ranks on a topology of %d", len(demand), len(t.Ranks))
	}
	ports := make([]int, len(t.Hosts))
	total := 0
	for h := range ports {
		ports[h] = len(t.FreePorts(h))
		total += ports[h]
	}
	if total == 0 {
		return fmt.Errorf("the topology has no free OCS ports (add ocs_ports=N to the spec)")
	}
	ocs, eps := t.Classes[OCS].Bandwidth, t.Classes[EPS].Bandwidth
	if ocs <= 0 || eps <= 0 {
		return fmt.Errorf("circuit placement needs ocs and eps bandwidths")
	}
	for _, pair := range PlaceCircuits(t.HostDemand(demand), ports, ocs, eps) {
		if err := t.Connect(pair[0], pair[1], 0); err != nil {
			return err
		}
	}
	return t.Validate()
}

// PlaceCircuits chooses host pairs for circuits from a host-to-host demand
// matrix (bytes from host i to host j). A circuit carries ocs bytes per
// second in each direction; traffic between hosts without a circuit shares
// the hosts' packet-network NICs, eps bytes per second each.
//
// It installs circuits in rounds, one port per host per round, each round
// a matching of hosts: pairs are taken greedily by the time their next
// circuit saves (the traffic it takes off both hosts' shared packet NICs,
// d/eps, for a pair's first circuit; what it takes off the pair's other
// circuits, d/(c ocs) - d/((c+1) ocs), for the (c+1)-th; d is the pair's
// demand in both directions), each host at most once per round, while
// both hosts have a free port (ports[h]). Rounds repeat until no pair with
// demand can get a circuit. So the heaviest pairs get circuits first, a
// heavy pair gets several when that saves more than serving a light one,
// and no host spends all its ports before the others had their turn.
// (mFabric's planner instead serves the single bottleneck pair each step;
// reconfig/plan compares the two.) Ties go to the heavier pair, then the
// lower-numbered one. It returns one entry per circuit, a pair repeated
// for several circuits, in the order chosen; it is pure and deterministic.
func PlaceCircuits(demand [][]float64, ports []int, ocs, eps float64) [][2]int {
	n := len(demand)
	free := append([]int(nil), ports...)
	var edges []pairGain
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if d := demand[i][j] + demand[j][i]; d > 0 && free[i] > 0 && free[j] > 0 {
				edges = append(edges, pairGain{i: i, j: j, d: d})
			}
		}
	}
	used := make([]bool, n)
	var out [][2]int
	for {
		// Drop pairs that can no longer get a circuit (ports never come
		// back), and price the others.
		live := edges[:0]
		for _, e := range edges {
			if free[e.i] == 0 || free[e.j] == 0 {
				continue
			}
			e.gain = e.d / eps
			if e.c > 0 {
				c := float64(e.c)
				e.gain = e.d/(c*ocs) - e.d/((c+1)*ocs)
			}
			live = append(live, e)
		}
		edges = live
		if len(edges) == 0 {
			return out
		}
		slices.SortFunc(edges, comparePairs)
		clear(used)
		for k := range edges {
			e := &edges[k]
			if used[e.i] || used[e.j] {
				continue
			}
			used[e.i], used[e.j] = true, true
			e.c++
			free[e.i]--
			free[e.j]--
			out = append(out, [2]int{e.i, e.j})
		}
	}
}

// pairGain is a host pair in PlaceCircuits: its demand, its circuits so
// far and what its next circuit would save.
type pairGain struct {
	i, j int
	d    float64
	c    int
	gain float64
}

// comparePairs orders pairs by gain, then demand (both descending), then
// index.
func comparePairs(x, y pairGain) int {
	switch {
	case x.gain != y.gain:
		return cmp.Compare(y.gain, x.gain)
	case x.d != y.d:
		return cmp.Compare(y.d, x.d)
	case x.i != y.i:
		return cmp.Compare(x.i, y.i)
	}
	return cmp.Compare(x.j, y.j)
}
