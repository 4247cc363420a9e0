package topo

import (
	"reflect"
	"strings"
	"testing"
)

func TestHamiltonianRingOrderFollowsCircuits(t *testing.T) {
	// Four hosts of two ranks in a ring 0-1-2-3-0; each host has two
	// ports, driven by its two ranks; one circuit per ring hop.
	top, err := FromSpec("hosts=4x2,ocs_ports=2,circuits=0-1/1-2/2-3/3-0")
	if err != nil {
		t.Fatal(err)
	}
	ring, err := HamiltonianRingOrder(top, []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	top.Ring = ring
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	checkPhysicalRing(t, top)
	for i, r := range ring {
		s := ring[(i+1)%len(ring)]
		if p := top.Path(r, s); p.Class != HBD && p.Class != OCS {
			t.Fatalf("hop %d -> %d: %s", r, s, p.Class)
		}
	}
	// A missing circuit is reported.
	top.Circuits = top.Circuits[:3]
	if _, err := HamiltonianRingOrder(top, []int{0, 1, 2, 3}); err == nil || !strings.Contains(err.Error(), "not joined") {
		t.Fatalf("missing circuit: %v", err)
	}
}

func TestHamiltonianRingOrderTwoHosts(t *testing.T) {
	// Two hosts of two ranks: one circuit cannot carry both directions of
	// the ring through different ranks; two circuits on different ranks
	// can.
	one, _ := FromSpec("hosts=2x2,ocs_ports=2,circuits=0-1")
	if _, err := HamiltonianRingOrder(one, []int{0, 1}); err == nil {
		t.Fatalf("one circuit between two 2-rank hosts accepted")
	}
	two, _ := FromSpec("hosts=2x2,ocs_ports=2,circuits=0-1/0-1")
	ring, err := HamiltonianRingOrder(two, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	two.Ring = ring
	checkPhysicalRing(t, two)
	// Shared ports: any rank may use them.
	shared, _ := FromSpec("hosts=3x3,ocs_ports=2,ocs_shared=1,circuits=0-1/1-2/2-0")
	if ring, err = HamiltonianRingOrder(shared, []int{0, 1, 2}); err != nil || len(ring) != 9 {
		t.Fatalf("shared ports: %v %v", ring, err)
	}
}

func TestRingOrderArgumentErrors(t *testing.T) {
	top := Uniform(3, 2)
	for _, hosts := range [][]int{nil, {0, 0}, {0, 5}, {-1}} {
		if _, err := HamiltonianRingOrder(top, hosts); err == nil {
			t.Errorf("hosts %v accepted", hosts)
		}
		if _, err := FoldedRingOrder(top, hosts); err == nil {
			t.Errorf("folded: hosts %v accepted", hosts)
		}
	}
	// HB domain neighbours need no circuit.
	for h := range top.Hosts {
		top.Hosts[h].HBDomain = 0
	}
	if ring, err := HamiltonianRingOrder(top, []int{2, 0, 1}); err != nil || !reflect.DeepEqual(ring, []int{4, 5, 0, 1, 2, 3}) {
		t.Fatalf("HB domain ring: %v %v", ring, err)
	}
}

func TestFoldedRingOrder(t *testing.T) {
	top := Uniform(3, 4) // ranks 0-3, 4-7, 8-11
	ring, err := FoldedRingOrder(top, []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{0, 1, 4, 5, 8, 9, 11, 10, 7, 6, 3, 2}
	if !reflect.DeepEqual(ring, want) {
		t.Fatalf("folded ring %v, want %v", ring, want)
	}
	// Every hop stays on a host or joins line neighbours.
	for i, r := range ring {
		s := ring[(i+1)%len(ring)]
		if d := top.Ranks[r].Host - top.Ranks[s].Host; d < -1 || d > 1 {
			t.Fatalf("hop %d -> %d jumps %d hosts", r, s, d)
		}
	}
	odd := Uniform(2, 3) // halves of 2 and 1
	if ring, _ := FoldedRingOrder(odd, []int{1, 0}); !reflect.DeepEqual(ring, []int{3, 4, 0, 1, 2, 5}) {
		t.Fatalf("odd folded ring %v", ring)
	}
}
