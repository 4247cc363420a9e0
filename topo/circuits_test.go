package topo

import (
	"fmt"
	"reflect"
	"testing"
)

func TestSpecPortsAndCircuits(t *testing.T) {
	top, err := FromSpec("hosts=4x2,nics=host,ocs_ports=2,eps=1GB/s,ocs=2GB/s,circuits=0-1/0-1/2-3")
	if err != nil {
		t.Fatal(err)
	}
	// 4 packet NICs, then 2 ports per host: ports 4,5 on host 0, ...
	if len(top.NICs) != 12 || len(top.Circuits) != 3 {
		t.Fatalf("%d NICs, %d circuits", len(top.NICs), len(top.Circuits))
	}
	if !reflect.DeepEqual(top.Ranks[0].Ports, []int{4}) || !reflect.DeepEqual(top.Ranks[1].Ports, []int{5}) {
		t.Fatalf("ports of host 0: %v %v", top.Ranks[0].Ports, top.Ranks[1].Ports)
	}
	// The two circuits between hosts 0 and 1 land on different ranks.
	owners := map[[2]int]bool{}
	for _, c := range top.Circuits[:2] {
		owners[[2]int{top.PortOwner(c.A), top.PortOwner(c.B)}] = true
	}
	if !owners[[2]int{0, 2}] || !owners[[2]int{1, 3}] {
		t.Fatalf("circuits 0-1 between ranks %v, want 0-2 and 1-3", owners)
	}
	cases := []struct {
		a, b  int
		class LinkClass
		bw    float64
	}{
		{0, 1, HBD, 20e9},
		{0, 2, OCS, 2e9}, // owners of the two ends of a circuit
		{1, 3, OCS, 2e9},
		{0, 3, EPS, 1e9}, // rank 3 does not drive the port rank 0's circuit reaches
		{4, 6, OCS, 2e9},
		{4, 5, HBD, 20e9},
		{0, 4, EPS, 1e9}, // no circuit between hosts 0 and 2
		{2, 0, OCS, 2e9},
	}
	for _, c := range cases {
		p := top.Path(c.a, c.b)
		if p.Class != c.class || p.Bandwidth != c.bw {
			t.Errorf("path %d->%d: %s at %g, want %s at %g", c.a, c.b, p.Class, p.Bandwidth, c.class, c.bw)
		}
	}
	shared, err := FromSpec("hosts=2x2,nics=host,ocs_ports=1,ocs_shared=1,circuits=0-1")
	if err != nil {
		t.Fatal(err)
	}
	if p := shared.Path(1, 2); p.Class != OCS {
		t.Fatalf("shared port: path 1->2 is %s", p.Class)
	}
	for _, bad := range []string{
		"hosts=2x2,ocs_ports=1,circuits=0-1/0-1", // out of ports
		"hosts=2x2,ocs_ports=1,circuits=0-0",
		"hosts=2x2,ocs_ports=1,circuits=0-5",
		"hosts=2x2,ocs_ports=x",
		"hosts=2x2,circuits=0:1",
	} {
		if _, err := FromSpec(bad); err == nil {
			t.Errorf("FromSpec(%q) accepted", bad)
		}
	}
}

func TestSubsetDropsPortsOfDroppedRanks(t *testing.T) {
	top, err := FromSpec("hosts=2x2,ocs_ports=2,circuits=0-1/0-1")
	if err != nil {
		t.Fatal(err)
	}
	sub := top.Subset([]int{0, 2})
	if err := sub.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(sub.Circuits) != 1 || sub.Path(0, 1).Class != OCS {
		t.Fatalf("subset circuits %+v, path %s", sub.Circuits, sub.Path(0, 1).Class)
	}
}

func TestPlaceCircuits(t *testing.T) {
	demand := [][]float64{
		{0, 8, 1, 0},
		{8, 0, 0, 1},
		{1, 0, 0, 4},
		{0, 1, 4, 0},
	}
	// The heavy pairs get both ports: 0-1 and 2-3 twice, the light pairs
	// stay on the packet network.
	got := PlaceCircuits(demand, []int{2, 2, 2, 2}, 1, 1)
	want := [][2]int{{0, 1}, {2, 3}, {0, 1}, {2, 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PlaceCircuits = %v, want %v", got, want)
	}
	// With a packet network much slower than a circuit, the light pairs
	// are worth a circuit too.
	got = PlaceCircuits(demand, []int{2, 2, 2, 2}, 1, 0.01)
	if len(got) != 4 || got[0] != [2]int{0, 1} {
		t.Fatalf("slow packet network: PlaceCircuits = %v", got)
	}
	served := map[[2]int]bool{}
	for _, p := range got {
		served[p] = true
	}
	if !served[[2]int{0, 2}] || !served[[2]int{1, 3}] {
		t.Fatalf("slow packet network: light pairs left without a circuit: %v", got)
	}
	// Pairs without demand get nothing; a host without ports is skipped
	// and the others keep going.
	if got := PlaceCircuits(demand, []int{0, 1, 1, 1}, 1, 1); !reflect.DeepEqual(got, [][2]int{{2, 3}}) {
		t.Fatalf("PlaceCircuits with host 0 full = %v", got)
	}
	if got := PlaceCircuits(demand, []int{0, 2, 2, 2}, 1, 1); !reflect.DeepEqual(got, [][2]int{{2, 3}, {2, 3}}) {
		t.Fatalf("PlaceCircuits with host 0 full = %v", got)
	}
	// Traffic going one way around a ring of hosts: every ring edge gets
	// a circuit, rather than the heaviest pairs two each.
	ring := [][]float64{
		{0, 9, 3, 2},
		{2, 0, 9, 3},
		{3, 2, 0, 9},
		{9, 3, 2, 0},
	}
	got = PlaceCircuits(ring, []int{2, 2, 2, 2}, 1, 1)
	edges := map[[2]int]int{}
	for _, p := range got {
		edges[p]++
	}
	if !reflect.DeepEqual(edges, map[[2]int]int{{0, 1}: 1, {1, 2}: 1, {2, 3}: 1, {0, 3}: 1}) {
		t.Fatalf("ring demand: PlaceCircuits = %v", got)
	}
}

func TestSpecGrid(t *testing.T) {
	top, err := FromSpec("hosts=6x1,grid=3x2")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(top.Hosts[4].Coord, []int{1, 1}) || !top.GridOnly {
		t.Fatalf("host 4 at %v, grid only %v", top.Hosts[4].Coord, top.GridOnly)
	}
	for _, c := range []struct {
		a, b  int
		class LinkClass
	}{{0, 2, EPS}, {0, 3, EPS}, {0, 4, None}, {5, 0, None}, {5, 2, EPS}} {
		if got := top.Path(c.a, c.b).Class; got != c.class {
			t.Errorf("path %d->%d: %s, want %s", c.a, c.b, got, c.class)
		}
	}
	for _, bad := range []string{"hosts=6x1,grid=2x2", "hosts=4x1,grid=2", "hosts=4x1,grid=0x4"} {
		if _, err := FromSpec(bad); err == nil {
			t.Errorf("FromSpec(%q) accepted", bad)
		}
	}
}

func TestConnectFor(t *testing.T) {
	top, err := FromSpec("hosts=4x1,ocs_ports=2")
	if err != nil {
		t.Fatal(err)
	}
	// Heavy traffic between hosts 0 and 1 and between 2 and 3.
	d := [][]float64{{0, 9, 1, 1}, {9, 0, 1, 1}, {1, 1, 0, 9}, {1, 1, 9, 0}}
	if err := top.ConnectFor(d); err != nil {
		t.Fatal(err)
	}
	if len(top.Circuits) != 4 || top.Path(0, 1).Class != OCS || top.Path(2, 3).Class != OCS {
		t.Fatalf("circuits %+v", top.Circuits)
	}
	if err := top.ConnectFor(d); err == nil {
		t.Fatal("placed circuits with every port taken")
	}
	if err := top.ConnectFor(d[:2]); err == nil {
		t.Fatal("accepted a demand of the wrong size")
	}
}

// TestSwitchCircuits checks the one conversion from NIC indices to switch
// ports: switch port p is the p-th OCS NIC, circuits come normalized and
// sorted, and a circuit on a packet NIC is refused.
func TestSwitchCircuits(t *testing.T) {
	top, err := FromSpec("hosts=4x2,nics=host,ocs_ports=2,eps=1GB/s,ocs=2GB/s,circuits=2-3/0-1")
	if err != nil {
		t.Fatal(err)
	}
	// NICs 0-3 are packet NICs; host h's OCS ports are NICs 4+2h, 5+2h,
	// switch ports 2h, 2h+1.
	if got, want := top.SwitchPorts(), []int{4, 5, 6, 7, 8, 9, 10, 11}; !reflect.DeepEqual(got, want) {
		t.Fatalf("SwitchPorts = %v, want %v", got, want)
	}
	got, err := top.SwitchCircuits()
	if err != nil {
		t.Fatal(err)
	}
	if want := []Circuit{{A: 0, B: 2}, {A: 4, B: 6}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("SwitchCircuits = %v, want %v", got, want)
	}
	top.Circuits = append(top.Circuits, Circuit{A: 11, B: 8, Bandwidth: 1e9})
	got, err = top.SwitchCircuits()
	if want := []Circuit{{A: 0, B: 2}, {A: 4, B: 6}, {A: 4, B: 7}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("with 11-8: SwitchCircuits = %v, %v", got, err)
	}
	top.Circuits = append(top.Circuits, Circuit{A: 0, B: 4})
	if _, err := top.SwitchCircuits(); err == nil {
		t.Fatal("a circuit on packet NIC 0 was converted")
	}
}

func TestCircuitNormalizeString(t *testing.T) {
	c := Circuit{A: 7, B: 3, Bandwidth: 2}
	if n := c.Normalize(); n != (Circuit{A: 3, B: 7, Bandwidth: 2}) {
		t.Fatalf("Normalize = %+v", n)
	}
	if s := c.String(); s != "7-3" {
		t.Fatalf("String = %q", s)
	}
}

// TestSwitchPortsKept: the survivors' topology of a failed host
// (Without) and a subset of ranks keep the switch's numbering of every
// OCS port they keep: a port has the number of the fabric's port of the
// same host and name, the survivors' circuits are the bypassed fabric's
// in switch ports, and a JSON round trip keeps them.
func TestSwitchPortsKept(t *testing.T) {
	fabric, err := FromSpec("hosts=4x2,nics=host,ocs_ports=2,circuits=0-1/1-2/2-3/3-0")
	if err != nil {
		t.Fatal(err)
	}
	surv, err := fabric.Without([]int{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	bypassed, err := fabric.Bypass([]int{1})
	if err != nil {
		t.Fatal(err)
	}
	want, err := bypassed.SwitchCircuits()
	if err != nil {
		t.Fatal(err)
	}
	// Host 1's ports 2 and 3 are gone; the bypass joins hosts 0 and 2 on
	// the ports that went to it: switch ports 0-4 (host 0's ocs0, host 2's
	// ocs0), as the fabric numbers them.
	if fmt.Sprint(want) != "[0-4 1-7 5-6]" {
		t.Fatalf("bypassed fabric's cross-connects %v", want)
	}
	byName := map[string]int{}
	for _, i := range fabric.SwitchPorts() {
		n := fabric.NICs[i]
		byName[fabric.Hosts[n.Host].Name+":"+n.Name] = fabric.SwitchPort(i)
	}
	roundTrip, err := Parse(surv.Topology.JSON())
	if err != nil {
		t.Fatal(err)
	}
	for name, top := range map[string]*Topology{
		"survivors":            surv.Topology,
		"survivors round trip": roundTrip,
		"subset":               fabric.Subset([]int{7, 6, 0, 1}),
	} {
		for _, i := range top.SwitchPorts() {
			n := top.NICs[i]
			if got, want := top.SwitchPort(i), byName[top.Hosts[n.Host].Name+":"+n.Name]; got != want {
				t.Errorf("%s: NIC %d (%s:%s) is switch port %d, want the fabric's %d", name, i, top.Hosts[n.Host].Name, n.Name, got, want)
			}
		}
		if name == "subset" {
			continue
		}
		got, err := top.SwitchCircuits()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: SwitchCircuits = %v, want the fabric's %v", name, got, want)
		}
		if n := top.SwitchSize(); n != 8 {
			t.Errorf("%s: SwitchSize = %d, want 8", name, n)
		}
	}
	// A subset that keeps the first hosts needs no number of its own.
	for _, n := range fabric.Subset([]int{0, 1, 2, 3}).NICs {
		if n.SwitchPort != nil {
			t.Errorf("NIC %s has switch port %d set where the NIC order gives it", n.Name, *n.SwitchPort)
		}
	}
}

// TestSwitchPortsSpec: switch_ports= numbers a host's OCS ports as the
// switch does, and Validate refuses a switch port twice or on a packet
// NIC.
func TestSwitchPortsSpec(t *testing.T) {
	spare, err := FromSpec("hosts=1x2,nics=host,ocs_ports=2,switch_ports=8/9")
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, i := range spare.SwitchPorts() {
		got = append(got, spare.SwitchPort(i))
	}
	if fmt.Sprint(got) != "[8 9]" || spare.SwitchSize() != 10 {
		t.Fatalf("switch ports %v, size %d; want [8 9], 10", got, spare.SwitchSize())
	}
	if top, err := FromSpec("hosts=2x1,ocs_ports=2,switch_ports=3/10-12"); err != nil || top.SwitchPort(3) != 10 || top.SwitchPort(5) != 12 {
		t.Fatalf("switch_ports=3/10-12: %v", err)
	}
	for _, bad := range []string{"switch_ports=8", "switch_ports=8/8", "switch_ports=9-8", "switch_ports=x/1", "switch_ports=-1/2"} {
		if _, err := FromSpec("hosts=1x2,ocs_ports=2," + bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	p := 3
	spare.NICs[0].SwitchPort = &p // the packet NIC
	if err := spare.Validate(); err == nil {
		t.Error("a packet NIC with a switch port validated")
	}
}
