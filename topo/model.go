package topo

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
)

// LinkClass says what kind of link carries traffic between two ranks.
type LinkClass string

// Link classes.
const (
	// HBD is a high-bandwidth domain link: inside a host (NVLink, shared
	// memory) or inside a multi-host HB domain.
	HBD LinkClass = "hbd"
	// EPS is the electrical packet network, reached through a NIC.
	EPS LinkClass = "eps"
	// OCS is an optical circuit between two NIC ports of different hosts.
	OCS LinkClass = "ocs"
	// None means there is no direct path (rail-only fabrics between
	// different rails of different domains): traffic must be forwarded.
	None LinkClass = "none"
)

// LinkParams are the alpha-beta parameters of a link: a fixed latency per
// message and a bandwidth.
type LinkParams struct {
	// Bandwidth in bytes per second.
	Bandwidth float64 `json:"bandwidth"`
	// Latency in seconds.
	Latency float64 `json:"latency"`
}

// Time is the alpha-beta time of one message of n bytes.
func (p LinkParams) Time(n float64) float64 {
	if p.Bandwidth <= 0 {
		return p.Latency
	}
	return p.Latency + n/p.Bandwidth
}

// Host is one machine (or one emulated machine).
type Host struct {
	Name string `json:"name"`
	// HBDomain groups hosts into multi-host HB domains; hosts with the
	// same non-negative domain talk over HBD links. -1: the host alone.
	HBDomain int `json:"hb_domain"`
	// Coord places the host on a grid (RailX: [x, y]); empty if unused.
	Coord []int `json:"coord,omitempty"`
	// ToR is the top-of-rack switch the host hangs off (-1 unknown).
	ToR int `json:"tor"`
	// NUMANodes is the number of NUMA nodes (0 unknown).
	NUMANodes int `json:"numa_nodes,omitempty"`
}

// Rank is one process of the job.
type Rank struct {
	Host      int `json:"host"`
	LocalRank int `json:"local_rank"`
	// NIC is the index in Topology.NICs of the NIC the rank sends through
	// (-1: none, or unknown).
	NIC int `json:"nic"`
	// Rail is the rail of the rank's NIC (-1: not rail-organised).
	Rail int `json:"rail"`
	NUMA int `json:"numa"`
	// Ports are the OCS ports (indices in Topology.NICs) this rank drives:
	// a circuit on one of them carries only this rank's traffic, and other
	// ranks of the host reach it through this rank. A port no rank lists
	// is shared by every rank of its host.
	Ports []int `json:"ports,omitempty"`
}

// NIC is a network port of a host.
type NIC struct {
	Host int    `json:"host"`
	Name string `json:"name,omitempty"`
	NUMA int    `json:"numa"`
	Rail int    `json:"rail"`
	// Class is EPS for a port on the packet network, OCS for a port on an
	// optical circuit switch.
	Class LinkClass `json:"class"`
	// Bandwidth in bytes per second (0: the class default).
	Bandwidth float64 `json:"bandwidth,omitempty"`
	// SwitchPort is the number of an OCS port on the optical circuit
	// switch, which numbers its ports once for the whole fabric. Unset
	// (nil), it is the port's place among the NICs of class OCS in NIC
	// order, as in a fabric described whole; Subset (and so Without and
	// a shrunk or split communicator's topology) sets it on the ports it
	// keeps wherever that order no longer gives it, so that every
	// topology derived from a fabric names the switch's own ports. A host
	// described apart from its fabric (a spare) sets it to the switch
	// ports it is cabled to. Only OCS NICs have one (see
	// Topology.SwitchPort).
	SwitchPort *int `json:"switch_port,omitempty"`
}

// Circuit is an optical circuit, or a cross-connect to make, between two
// OCS ports. It is occl's one type for a pair of ports: in topologies, in
// plans (package reconfig/plan), in reconfig's Controller and at the
// switch (package reconfig/ocs), which converts it to its wire format.
//
// A port is named by its NIC index (in Topology.NICs) everywhere but at
// the switch, which numbers its own ports once for the whole fabric:
// Topology.SwitchPort gives a NIC's number there (NIC.SwitchPort), and
// SwitchCircuits gives a topology's circuits in switch ports.
type Circuit struct {
	A int `json:"a"`
	B int `json:"b"`
	// Bandwidth in bytes per second (0: the OCS class default). A switch
	// ignores it.
	Bandwidth float64 `json:"bandwidth,omitempty"`
}

// Normalize returns c with A <= B.
func (c Circuit) Normalize() Circuit {
	if c.A > c.B {
		c.A, c.B = c.B, c.A
	}
	return c
}

// String formats c's ports as "A-B" (the syntax of the circuits= spec key
// and of the OCS tools).
func (c Circuit) String() string { return strconv.Itoa(c.A) + "-" + strconv.Itoa(c.B) }

// Topology is what is connected to what: hosts, ranks, NICs and circuits,
// with alpha-beta parameters per link class. It is plain data: builders
// make it, the JSON format stores it, and everything else reads it.
type Topology struct {
	Name     string                   `json:"name,omitempty"`
	Hosts    []Host                   `json:"hosts"`
	Ranks    []Rank                   `json:"ranks"`
	NICs     []NIC                    `json:"nics,omitempty"`
	Circuits []Circuit                `json:"circuits,omitempty"`
	Classes  map[LinkClass]LinkParams `json:"classes"`
	// RailOnly says there is no packet path between different rails of
	// different HB domains (a rail-only fabric).
	RailOnly bool `json:"rail_only,omitempty"`
	// GridOnly says hosts reach only the hosts of their own row or column
	// of the grid their Coord places them on (RailX): traffic between
	// other hosts must be forwarded.
	GridOnly bool `json:"grid_only,omitempty"`
	// Ring, if set, is the order of ranks that flat ring schedules follow
	// (a permutation of all ranks), so that every hop of the ring is a
	// physical link: the line order of an InfinitePOD K-hop ring, a
	// Hamiltonian ring of a RailX row. Empty means rank order.
	Ring []int `json:"ring,omitempty"`
}

// DefaultClasses are parameters for a fabric described without numbers:
// shared memory inside a host, a 100 Gb/s packet network, 100 Gb/s circuits.
func DefaultClasses() map[LinkClass]LinkParams {
	return map[LinkClass]LinkParams{
		HBD: {Bandwidth: 20e9, Latency: 1e-6},
		EPS: {Bandwidth: 12.5e9, Latency: 10e-6},
		OCS: {Bandwidth: 12.5e9, Latency: 5e-6},
	}
}

// Uniform returns a topology of hosts hosts with perHost ranks each (rank r
// on host r/perHost), one EPS NIC per rank on rail = local rank
// (rail-optimised), and the default class parameters.
func Uniform(hosts, perHost int) *Topology {
	t := &Topology{Classes: DefaultClasses()}
	for h := 0; h < hosts; h++ {
		t.Hosts = append(t.Hosts, Host{Name: fmt.Sprintf("host%d", h), HBDomain: -1, ToR: -1})
		for l := 0; l < perHost; l++ {
			nic := len(t.NICs)
			t.NICs = append(t.NICs, NIC{Host: h, Name: fmt.Sprintf("nic%d", l), Rail: l, Class: EPS})
			t.Ranks = append(t.Ranks, Rank{Host: h, LocalRank: l, NIC: nic, Rail: l})
		}
	}
	return t
}

// Validate checks that every index points where it should and that ranks
// of a host have local ranks 0..n-1.
func (t *Topology) Validate() error {
	if len(t.Ranks) == 0 {
		return fmt.Errorf("topology has no ranks")
	}
	locals := map[int][]int{}
	for r, rk := range t.Ranks {
		if rk.Host < 0 || rk.Host >= len(t.Hosts) {
			return fmt.Errorf("rank %d: host %d out of range", r, rk.Host)
		}
		if rk.NIC >= len(t.NICs) || rk.NIC < -1 {
			return fmt.Errorf("rank %d: NIC %d out of range", r, rk.NIC)
		}
		if rk.NIC >= 0 && t.NICs[rk.NIC].Host != rk.Host {
			return fmt.Errorf("rank %d on host %d uses NIC %d of host %d", r, rk.Host, rk.NIC, t.NICs[rk.NIC].Host)
		}
		locals[rk.Host] = append(locals[rk.Host], rk.LocalRank)
	}
	owner := map[int]int{}
	for r, rk := range t.Ranks {
		for _, p := range rk.Ports {
			switch {
			case p < 0 || p >= len(t.NICs) || t.NICs[p].Class != OCS:
				return fmt.Errorf("rank %d: port %d is not an OCS NIC", r, p)
			case t.NICs[p].Host != rk.Host:
				return fmt.Errorf("rank %d on host %d drives port %d of host %d", r, rk.Host, p, t.NICs[p].Host)
			}
			if o, dup := owner[p]; dup {
				return fmt.Errorf("port %d is driven by ranks %d and %d", p, o, r)
			}
			owner[p] = r
		}
	}
	for h, ls := range locals {
		sort.Ints(ls)
		for i, l := range ls {
			if l != i {
				return fmt.Errorf("host %d: local ranks %v are not 0..%d", h, ls, len(ls)-1)
			}
		}
	}
	for i, n := range t.NICs {
		if n.Host < 0 || n.Host >= len(t.Hosts) {
			return fmt.Errorf("NIC %d: host %d out of range", i, n.Host)
		}
		if n.Class != EPS && n.Class != OCS {
			return fmt.Errorf("NIC %d: class %q, want eps or ocs", i, n.Class)
		}
	}
	if err := t.validateSwitchPorts(); err != nil {
		return err
	}
	used := map[int]bool{}
	for i, c := range t.Circuits {
		for _, p := range []int{c.A, c.B} {
			if p < 0 || p >= len(t.NICs) || t.NICs[p].Class != OCS {
				return fmt.Errorf("circuit %d: port %d is not an OCS NIC", i, p)
			}
			if used[p] {
				return fmt.Errorf("circuit %d: port %d already has a circuit", i, p)
			}
			used[p] = true
		}
		if t.NICs[c.A].Host == t.NICs[c.B].Host {
			return fmt.Errorf("circuit %d joins two ports of host %d", i, t.NICs[c.A].Host)
		}
	}
	for _, c := range []LinkClass{HBD, EPS} {
		if p, ok := t.Classes[c]; !ok || p.Bandwidth <= 0 {
			return fmt.Errorf("class %s needs a positive bandwidth", c)
		}
	}
	if len(t.Ring) > 0 {
		if len(t.Ring) != len(t.Ranks) {
			return fmt.Errorf("ring has %d ranks, the topology %d", len(t.Ring), len(t.Ranks))
		}
		seen := make([]bool, len(t.Ranks))
		for _, r := range t.Ring {
			if r < 0 || r >= len(t.Ranks) || seen[r] {
				return fmt.Errorf("ring %v is not a permutation of the ranks", t.Ring)
			}
			seen[r] = true
		}
	}
	return nil
}

// RingOrder returns the order of ranks flat rings follow: Ring if set,
// else 0..n-1.
func (t *Topology) RingOrder() []int {
	if len(t.Ring) == len(t.Ranks) {
		return append([]int(nil), t.Ring...)
	}
	out := make([]int, len(t.Ranks))
	for i := range out {
		out[i] = i
	}
	return out
}

// HostRanks returns, for every host, its ranks in local-rank order.
func (t *Topology) HostRanks() [][]int {
	out := make([][]int, len(t.Hosts))
	for r, rk := range t.Ranks {
		h := out[rk.Host]
		for len(h) <= rk.LocalRank {
			h = append(h, -1)
		}
		h[rk.LocalRank] = r
		out[rk.Host] = h
	}
	return out
}

// Uniformity returns the ranks per host if every host has the same number
// of ranks, else 0.
func (t *Topology) Uniformity() int {
	hr := t.HostRanks()
	n := len(hr[0])
	for _, h := range hr {
		if len(h) != n {
			return 0
		}
	}
	return n
}

// Path describes how rank a reaches rank b directly.
type Path struct {
	Class LinkClass
	LinkParams
	// NICs used at each end (-1 for HBD paths).
	SrcNIC, DstNIC int
}

// Path returns the direct path from rank a to rank b: HBD inside a host or
// HB domain; an optical circuit if one joins a port of a's host that a may
// drive to a port of b's host that b may drive (the fastest if several);
// the packet network between the ranks' NICs; or None on a rail-only
// fabric across rails and domains.
func (t *Topology) Path(a, b int) Path {
	ra, rb := t.Ranks[a], t.Ranks[b]
	ha, hb := t.Hosts[ra.Host], t.Hosts[rb.Host]
	if ra.Host == rb.Host || (ha.HBDomain >= 0 && ha.HBDomain == hb.HBDomain) {
		return Path{Class: HBD, LinkParams: t.Classes[HBD], SrcNIC: -1, DstNIC: -1}
	}
	best := Path{Class: None, SrcNIC: -1, DstNIC: -1}
	for _, c := range t.Circuits {
		pa, pb := c.A, c.B
		if t.NICs[pa].Host != ra.Host {
			pa, pb = pb, pa
		}
		if t.NICs[pa].Host != ra.Host || t.NICs[pb].Host != rb.Host {
			continue
		}
		if o := t.PortOwner(pa); o >= 0 && o != a {
			continue
		}
		if o := t.PortOwner(pb); o >= 0 && o != b {
			continue
		}
		p := t.Classes[OCS]
		if c.Bandwidth > 0 {
			p.Bandwidth = c.Bandwidth
		}
		if best.Class == None || p.Bandwidth > best.Bandwidth {
			best = Path{Class: OCS, LinkParams: p, SrcNIC: pa, DstNIC: pb}
		}
	}
	if best.Class == OCS {
		return best
	}
	if t.RailOnly && ra.Rail != rb.Rail {
		return best
	}
	if ca, cb := ha.Coord, hb.Coord; t.GridOnly && len(ca) == 2 && len(cb) == 2 && ca[0] != cb[0] && ca[1] != cb[1] {
		return best
	}
	p := t.Classes[EPS]
	for _, nic := range []int{ra.NIC, rb.NIC} {
		if nic >= 0 && t.NICs[nic].Bandwidth > 0 && t.NICs[nic].Bandwidth < p.Bandwidth {
			p.Bandwidth = t.NICs[nic].Bandwidth
		}
	}
	return Path{Class: EPS, LinkParams: p, SrcNIC: ra.NIC, DstNIC: rb.NIC}
}

// PortOwner returns the rank that drives OCS port nic, or -1 if no rank
// lists it (the port is shared by its host's ranks).
func (t *Topology) PortOwner(nic int) int {
	for r, rk := range t.Ranks {
		for _, p := range rk.Ports {
			if p == nic {
				return r
			}
		}
	}
	return -1
}

// Load reads a topology from a JSON file and validates it.
func Load(path string) (*Topology, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse decodes and validates a JSON topology.
func Parse(b []byte) (*Topology, error) {
	var t Topology
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if t.Classes == nil {
		t.Classes = DefaultClasses()
	}
	for c, p := range DefaultClasses() {
		if _, ok := t.Classes[c]; !ok {
			t.Classes[c] = p
		}
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return &t, nil
}

// JSON encodes the topology, indented.
func (t *Topology) JSON() []byte {
	b, _ := json.MarshalIndent(t, "", "  ")
	return b
}

// Subset returns the topology of the given ranks of t, renumbered in the
// order given (rank i of the result is ranks[i] of t): hosts that keep no
// rank are dropped, local ranks are renumbered in order, NICs of dropped
// hosts and circuits touching them go away. The OCS ports it keeps keep
// their numbers on the switch (NIC.SwitchPort), so that the circuits of
// the result name the same switch ports as t's. A sub-communicator uses
// it.
func (t *Topology) Subset(ranks []int) *Topology {
	out := &Topology{Name: t.Name, RailOnly: t.RailOnly, GridOnly: t.GridOnly, Classes: map[LinkClass]LinkParams{}}
	for c, p := range t.Classes {
		out.Classes[c] = p
	}
	hostMap := map[int]int{}
	for _, r := range ranks {
		h := t.Ranks[r].Host
		if _, ok := hostMap[h]; !ok {
			hostMap[h] = len(out.Hosts)
			out.Hosts = append(out.Hosts, t.Hosts[h])
		}
	}
	keep := map[int]bool{}
	for _, r := range ranks {
		keep[r] = true
	}
	nicMap := map[int]int{}
	switchPort := t.switchPortMap()
	ocs := 0 // OCS ports kept so far
	for i, n := range t.NICs {
		if o := t.PortOwner(i); o >= 0 && !keep[o] {
			continue // nobody left to drive it
		}
		if nh, ok := hostMap[n.Host]; ok {
			nicMap[i] = len(out.NICs)
			n.Host = nh
			if n.Class == OCS {
				// The port keeps its number on the switch.
				if p := switchPort[i]; n.SwitchPort != nil || p != ocs {
					n.SwitchPort = &p
				}
				ocs++
			}
			out.NICs = append(out.NICs, n)
		}
	}
	local := map[int]int{}
	for _, r := range ranks {
		rk := t.Ranks[r]
		rk.Host = hostMap[rk.Host]
		rk.LocalRank = local[rk.Host]
		local[rk.Host]++
		if rk.NIC >= 0 {
			rk.NIC = nicMap[rk.NIC]
		}
		ports := rk.Ports
		rk.Ports = nil
		for _, p := range ports {
			rk.Ports = append(rk.Ports, nicMap[p])
		}
		out.Ranks = append(out.Ranks, rk)
	}
	for _, c := range t.Circuits {
		a, okA := nicMap[c.A]
		b, okB := nicMap[c.B]
		if okA && okB {
			out.Circuits = append(out.Circuits, Circuit{A: a, B: b, Bandwidth: c.Bandwidth})
		}
	}
	if len(t.Ring) > 0 {
		index := map[int]int{}
		for i, r := range ranks {
			index[r] = i
		}
		for _, r := range t.Ring {
			if i, ok := index[r]; ok {
				out.Ring = append(out.Ring, i)
			}
		}
	}
	return out
}

// FromHosts returns a topology of len(host) ranks where rank r is on host
// host[r] (hosts numbered from 0), one NIC per rank on the packet network,
// and the default link parameters: what a communicator knows of a fabric
// it was given no description of.
func FromHosts(host []int) *Topology {
	n := 0
	for _, h := range host {
		n = max(n, h+1)
	}
	t := &Topology{Classes: DefaultClasses()}
	for h := 0; h < n; h++ {
		t.Hosts = append(t.Hosts, Host{Name: fmt.Sprintf("host%d", h), HBDomain: -1, ToR: -1})
	}
	local := make([]int, n)
	for _, h := range host {
		nic := len(t.NICs)
		t.NICs = append(t.NICs, NIC{Host: h, Rail: local[h], Class: EPS})
		t.Ranks = append(t.Ranks, Rank{Host: h, LocalRank: local[h], NIC: nic, Rail: local[h]})
		local[h]++
	}
	return t
}
