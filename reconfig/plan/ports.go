// NUMA-aware port permutation: mFabric Algorithm 1 lines 15-16
// (GetNICMapping, permuteLinks) and sec. 5.2 step 4.
//
// From circuit counts C and each server's OCS ports (NIC index, NUMA node),
// PortMapping produces the port-level cross connects. Steps:
//
//  1. For every server i independently, decide how many of its circuits to
//     each peer j go to each of its NUMA nodes, x[j][n], with
//     sum_n x[j][n] = C[i][j] and sum_j x[j][n] <= ports of node n. The
//     choice minimises, first, the number of pairs of circuits to the same
//     peer that share a NUMA node (sum over j, n of x(x-1)/2: zero exactly
//     when every peer's circuits are on different nodes, which is the
//     paper's "TX and RX NICs in different NUMA nodes"), and second the
//     imbalance of used ports over the nodes (sum over n of u(u-1)/2 for u
//     used ports), the paper's "balanced the number of NICs across each
//     NUMA node" (sec. 5.3). It is solved exactly as a min-cost flow
//     (source -> peer -> NUMA node -> sink, convex costs as parallel unit
//     arcs of increasing cost, successive shortest paths with
//     Bellman-Ford): the graph has at most 2 * ports + 2 nodes.
//  2. Within a NUMA node, ports are taken in the order given, peers in
//     increasing server order.
//  3. For each pair i < j, i's ports for j and j's ports for i, each sorted
//     by (NUMA node, order given), are joined in turn: the k-th circuit
//     joins the k-th of each side, so like nodes meet where they can.
//
// Every port is used at most once; the result depends only on the input.

package plan

import (
	"fmt"
	"math"
	"sort"

	"github.com/occl/occl/topo"
)

// Port is one optical port of a server: its NIC index in the topology
// (unique across servers; a topo.Circuit joins two of them) and the NUMA
// node the NIC hangs off.
type Port struct {
	NIC  int
	NUMA int
}

// PortMapping returns the circuits that realise the circuit counts c
// on the ports of every server (ports[i] are server i's OCS ports), the
// circuits between two servers spread over different NUMA nodes where the
// ports allow (see the top of ports.go). It fails if c is not a symmetric
// non-negative matrix with a zero diagonal of the right size, if a server
// has more circuits than ports, or if a NIC repeats. Circuits
// come ordered by server pair (i < j) and then NUMA node.
func PortMapping(c [][]int, ports [][]Port) ([]topo.Circuit, error) {
	n := len(ports)
	if err := checkCircuits(c, n); err != nil {
		return nil, err
	}
	seen := map[int]int{}
	for i, ps := range ports {
		for _, p := range ps {
			if s, dup := seen[p.NIC]; dup {
				return nil, fmt.Errorf("%w: port %d on servers %d and %d", ErrDemand, p.NIC, s, i)
			}
			seen[p.NIC] = i
		}
		total := 0
		for _, k := range c[i] {
			total += k
		}
		if total > len(ps) {
			return nil, fmt.Errorf("%w: server %d has %d circuits and %d ports", ErrDemand, i, total, len(ps))
		}
	}
	// sel[i][j]: server i's ports for its circuits to j.
	sel := make([]map[int][]Port, n)
	for i := range ports {
		sel[i] = assignPorts(c[i], ports[i])
	}
	var out []topo.Circuit
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := sel[i][j], sel[j][i]
			for k := range a {
				out = append(out, topo.Circuit{A: a[k].NIC, B: b[k].NIC})
			}
		}
	}
	return out, nil
}

// assignPorts chooses server ports for the circuits counts[j] to every
// peer j, spread over NUMA nodes (step 1 and 2 of ports.go). The caller
// has checked that there are enough ports.
func assignPorts(counts []int, ports []Port) map[int][]Port {
	var peers []int
	total := 0
	for j, k := range counts {
		if k > 0 {
			peers = append(peers, j)
			total += k
		}
	}
	out := map[int][]Port{}
	if total == 0 {
		return out
	}
	// NUMA nodes in increasing order, each with its ports in given order.
	var nodes []int
	group := map[int][]Port{}
	for _, p := range ports {
		if _, ok := group[p.NUMA]; !ok {
			nodes = append(nodes, p.NUMA)
		}
		group[p.NUMA] = append(group[p.NUMA], p)
	}
	sort.Ints(nodes)

	// Min-cost flow: 0 source, 1..P peers, P+1..P+G nodes, P+G+1 sink.
	P, G := len(peers), len(nodes)
	f := newFlow(P + G + 2)
	src, sink := 0, P+G+1
	w := int64(len(ports))*int64(len(ports)) + 1 // primary cost weight
	peerNode := make([][]int, P)                 // first arc index of each peer -> node bundle
	for a, j := range peers {
		f.add(src, 1+a, counts[j], 0)
		peerNode[a] = make([]int, G)
		for b, nd := range nodes {
			peerNode[a][b] = len(f.arcs)
			for k := 0; k < min(counts[j], len(group[nd])); k++ {
				f.add(1+a, 1+P+b, 1, int64(k)*w)
			}
		}
	}
	for b, nd := range nodes {
		for u := 0; u < len(group[nd]); u++ {
			f.add(1+P+b, sink, 1, int64(u))
		}
	}
	f.run(src, sink, total)

	next := make([]int, G) // next unused port of each node
	for a, j := range peers {
		var got []Port
		for b, nd := range nodes {
			// Flow on the bundle peer a -> node b.
			x := 0
			for k := 0; k < min(counts[j], len(group[nd])); k++ {
				arc := peerNode[a][b] + 2*k
				x += f.arcs[arc^1].cap // flow = residual capacity of the reverse arc
			}
			got = append(got, group[nd][next[b]:next[b]+x]...)
			next[b] += x
		}
		out[j] = got
	}
	return out
}

// flow is a small min-cost flow network with integer capacities and costs.
// Arcs come in pairs: arc k and its reverse k^1.
type flow struct {
	head []int
	arcs []flowArc
}

type flowArc struct {
	to, next, cap int
	cost          int64
}

func newFlow(n int) *flow {
	f := &flow{head: make([]int, n)}
	for i := range f.head {
		f.head[i] = -1
	}
	return f
}

func (f *flow) add(u, v, c int, cost int64) {
	f.arcs = append(f.arcs, flowArc{to: v, next: f.head[u], cap: c, cost: cost})
	f.head[u] = len(f.arcs) - 1
	f.arcs = append(f.arcs, flowArc{to: u, next: f.head[v], cap: 0, cost: -cost})
	f.head[v] = len(f.arcs) - 1
}

// run pushes up to want units from s to t along successive shortest paths
// (Bellman-Ford, so negative residual costs are fine) and returns the flow.
func (f *flow) run(s, t, want int) int {
	n := len(f.head)
	dist := make([]int64, n)
	via := make([]int, n)
	done := 0
	for done < want {
		for i := range dist {
			dist[i], via[i] = math.MaxInt64, -1
		}
		dist[s] = 0
		for round := 0; round < n; round++ {
			changed := false
			for u := 0; u < n; u++ {
				if dist[u] == math.MaxInt64 {
					continue
				}
				for k := f.head[u]; k >= 0; k = f.arcs[k].next {
					a := &f.arcs[k]
					if a.cap > 0 && dist[u]+a.cost < dist[a.to] {
						dist[a.to], via[a.to], changed = dist[u]+a.cost, k, true
					}
				}
			}
			if !changed {
				break
			}
		}
		if dist[t] == math.MaxInt64 {
			break
		}
		push := want - done
		for v := t; v != s; v = f.arcs[via[v]^1].to {
			push = min(push, f.arcs[via[v]].cap)
		}
		for v := t; v != s; v = f.arcs[via[v]^1].to {
			f.arcs[via[v]].cap -= push
			f.arcs[via[v]^1].cap += push
		}
		done += push
	}
	return done
}

// TopologyPorts returns the OCS ports of every host of t: the NICs of
// class OCS, by host, with their NIC index as id and their NUMA node, in
// NIC order.
func TopologyPorts(t *topo.Topology) ([][]Port, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil topology", ErrDemand)
	}
	out := make([][]Port, len(t.Hosts))
	for i, nic := range t.NICs {
		if nic.Class != topo.OCS {
			continue
		}
		if nic.Host < 0 || nic.Host >= len(t.Hosts) {
			return nil, fmt.Errorf("%w: NIC %d on host %d of %d", ErrDemand, i, nic.Host, len(t.Hosts))
		}
		out[nic.Host] = append(out[nic.Host], Port{NIC: i, NUMA: nic.NUMA})
	}
	return out, nil
}

// TopologyCircuits returns the circuits that realise the host-to-host
// circuit counts c on t's OCS ports, NUMA-aware as
// PortMapping: the full target set, meant to replace t.Circuits (circuits
// t already has are not kept or avoided). A circuit's bandwidth is the
// smaller of its two NICs' if both state one, else 0 (the OCS class
// default).
func TopologyCircuits(t *topo.Topology, c [][]int) ([]topo.Circuit, error) {
	ports, err := TopologyPorts(t)
	if err != nil {
		return nil, err
	}
	xs, err := PortMapping(c, ports)
	if err != nil {
		return nil, err
	}
	for k, x := range xs {
		if a, b := t.NICs[x.A].Bandwidth, t.NICs[x.B].Bandwidth; a > 0 && b > 0 {
			xs[k].Bandwidth = min(a, b)
		}
	}
	return xs, nil
}
