// Tests of the NUMA-aware port permutation (ports.go): hand cases, a
// brute-force check that the min-cost flow is optimal for its documented
// objective, validity (every port once, counts realised), and the
// topo.Topology helper.

package plan

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/occl/occl/topo"
)

// numaCost is the objective of assignPorts for one server: pairs of
// circuits to one peer sharing a NUMA node, then pairs of used ports
// sharing a node.
func numaCost(sel map[int][]Port) (same, balance int) {
	used := map[int]int{}
	for _, ps := range sel {
		per := map[int]int{}
		for _, p := range ps {
			same += per[p.NUMA]
			per[p.NUMA]++
			balance += used[p.NUMA]
			used[p.NUMA]++
		}
	}
	return
}

// bruteNUMA returns the best objective over every assignment of circuit
// slots to ports.
func bruteNUMA(counts []int, ports []Port) (int, int) {
	var slots []int
	for j, k := range counts {
		for ; k > 0; k-- {
			slots = append(slots, j)
		}
	}
	bestS, bestB := -1, -1
	used := make([]bool, len(ports))
	sel := map[int][]Port{}
	var rec func(k int)
	rec = func(k int) {
		if k == len(slots) {
			s, b := numaCost(sel)
			if bestS < 0 || s < bestS || (s == bestS && b < bestB) {
				bestS, bestB = s, b
			}
			return
		}
		for i, p := range ports {
			if used[i] {
				continue
			}
			used[i] = true
			sel[slots[k]] = append(sel[slots[k]], p)
			rec(k + 1)
			sel[slots[k]] = sel[slots[k]][:len(sel[slots[k]])-1]
			used[i] = false
		}
	}
	rec(0)
	return bestS, bestB
}

func TestPortMappingNUMA(t *testing.T) {
	// Two servers, two ports each on NUMA nodes 0 and 1 (listed node 0
	// twice first on server 1), two circuits: one per node at both ends.
	ports := [][]Port{
		{{NIC: 10, NUMA: 0}, {NIC: 11, NUMA: 0}, {NIC: 12, NUMA: 1}},
		{{NIC: 20, NUMA: 1}, {NIC: 21, NUMA: 0}, {NIC: 22, NUMA: 0}},
	}
	xs, err := PortMapping(counts(2, [3]int{0, 1, 2}), ports)
	if err != nil {
		t.Fatal(err)
	}
	if want := []topo.Circuit{{A: 10, B: 21}, {A: 12, B: 20}}; !reflect.DeepEqual(xs, want) {
		t.Fatalf("PortMapping = %v, want %v", xs, want)
	}
	// All ports on one node: still mapped, nothing better possible.
	one := [][]Port{{{1, 0}, {2, 0}}, {{3, 0}, {4, 0}}}
	if xs, err := PortMapping(counts(2, [3]int{0, 1, 2}), one); err != nil || !reflect.DeepEqual(xs, []topo.Circuit{{A: 1, B: 3}, {A: 2, B: 4}}) {
		t.Fatalf("one NUMA node: %v %v", xs, err)
	}
}

func TestPortMappingOptimalAndValid(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 200; trial++ {
		n := 2 + r.IntN(4)
		ports := make([][]Port, n)
		id := 100
		for i := range ports {
			k := 1 + r.IntN(5)
			for p := 0; p < k; p++ {
				ports[i] = append(ports[i], Port{NIC: id, NUMA: r.IntN(3)})
				id += 1 + r.IntN(3)
			}
		}
		// Random circuits within the port budgets.
		c := newCounts(n)
		free := make([]int, n)
		for i := range free {
			free[i] = len(ports[i])
		}
		for k := 0; k < 3*n; k++ {
			i, j := r.IntN(n), r.IntN(n)
			if i != j && free[i] > 0 && free[j] > 0 {
				c[i][j]++
				c[j][i]++
				free[i]--
				free[j]--
			}
		}
		xs, err := PortMapping(c, ports)
		if err != nil {
			t.Fatal(err)
		}
		owner := map[int]int{}
		for i, ps := range ports {
			for _, p := range ps {
				owner[p.NIC] = i
			}
		}
		used := map[int]bool{}
		got := newCounts(n)
		for _, x := range xs {
			if used[x.A] || used[x.B] {
				t.Fatalf("port reused in %v", xs)
			}
			used[x.A], used[x.B] = true, true
			a, b := owner[x.A], owner[x.B]
			if a >= b {
				t.Fatalf("cross connect %v: servers %d, %d", x, a, b)
			}
			got[a][b]++
			got[b][a]++
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("cross connects realise %v, want %v", got, c)
		}
		for i := range ports {
			sel := assignPorts(c[i], ports[i])
			s, b := numaCost(sel)
			bs, bb := bruteNUMA(c[i], ports[i])
			if s != bs || b != bb {
				t.Fatalf("server %d (counts %v, ports %v): cost %d/%d, optimum %d/%d", i, c[i], ports[i], s, b, bs, bb)
			}
		}
		again, _ := PortMapping(c, ports)
		if !reflect.DeepEqual(again, xs) {
			t.Fatal("PortMapping is not deterministic")
		}
	}
}

func TestPortMappingBadInput(t *testing.T) {
	ports := [][]Port{{{1, 0}}, {{2, 0}}}
	bad := []struct {
		name  string
		c     [][]int
		ports [][]Port
	}{
		{"too many circuits", counts(2, [3]int{0, 1, 2}), ports},
		{"duplicate port", counts(2, [3]int{0, 1, 1}), [][]Port{{{1, 0}}, {{1, 0}}}},
		{"asymmetric", [][]int{{0, 1}, {0, 0}}, ports},
		{"size", counts(3), ports},
	}
	for _, tc := range bad {
		if _, err := PortMapping(tc.c, tc.ports); !errors.Is(err, ErrDemand) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := TopologyCircuits(nil, nil); err == nil {
		t.Error("nil topology accepted")
	}
}

func TestTopologyCircuits(t *testing.T) {
	// 3 hosts x 4 ranks, ranks 0-1 on NUMA 0 and 2-3 on NUMA 1; 4 ports
	// per host, port i driven by local rank i.
	top := topo.Uniform(3, 4)
	for r := range top.Ranks {
		top.Ranks[r].NUMA = top.Ranks[r].LocalRank / 2
	}
	top.AddPorts(4, false)
	c := counts(3, [3]int{0, 1, 2}, [3]int{0, 2, 2}, [3]int{1, 2, 1})
	cs, err := TopologyCircuits(top, c)
	if err != nil {
		t.Fatal(err)
	}
	top.Circuits = cs
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(cs) != 5 {
		t.Fatalf("%d circuits, want 5", len(cs))
	}
	// Each pair with two circuits uses both NUMA nodes at both ends.
	numa := map[[2]int]map[[2]int]bool{}
	for _, x := range cs {
		a, b := top.NICs[x.A], top.NICs[x.B]
		k := [2]int{a.Host, b.Host}
		if numa[k] == nil {
			numa[k] = map[[2]int]bool{}
		}
		numa[k][[2]int{a.NUMA, b.NUMA}] = true
	}
	for _, k := range [][2]int{{0, 1}, {0, 2}} {
		if !numa[k][[2]int{0, 0}] || !numa[k][[2]int{1, 1}] {
			t.Fatalf("hosts %v: NUMA pairs %v, want 0-0 and 1-1", k, numa[k])
		}
	}
	// The circuits are usable paths between the ranks driving them.
	if p := top.Path(top.PortOwner(cs[0].A), top.PortOwner(cs[0].B)); p.Class != topo.OCS {
		t.Fatalf("path over circuit %v: %v", cs[0], p.Class)
	}
}
