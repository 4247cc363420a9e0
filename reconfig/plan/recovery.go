// Optical circuits around failed hosts: bypass them, or switch a spare
// into the place of one.

package plan

import (
	"fmt"
	"slices"

	"github.com/occl/occl/topo"
)

// RecoveryCircuits returns the target topology of an optical fabric after
// the given hosts of t failed: t with only the circuits that touched them
// changed, for reconfig.Reconfigure once the survivors have their
// communicator.
//
// Without a spare (spare < 0) the failed hosts are bypassed
// (topo.Topology.Bypass): on an optical circuit switch the circuits a
// failed host had on one rail are spliced, its neighbours joined to each
// other on the ports that went to it, so a rail's ring closes over the
// remaining hosts ("RailX: A Flexible, Scalable, and Low-Cost Network
// Architecture for Hyper-Scale LLM Training Systems", sec. 6.6: the
// switches bypass a failed node); on an InfinitePOD K-hop line the
// neighbours switch to the backup fibre that reaches past it
// ("InfinitePOD: Building Datacenter-Scale High-Bandwidth Domain for LLM
// with Optical Circuit Switching Transceivers", sec. 4.2), and an HB
// domain splits where none does.
//
// With a spare host, the spare takes the place of failed[0]: every circuit
// of that host moves, at the far end unchanged, to a free OCS port of the
// spare (the port of the same name if free, else one of the same rail,
// else the first free one), and the spare's ranks take the failed host's
// places in the ring, by local rank; the other failed hosts are bypassed.
// This takes the switch to join any two of its ports, as the mFabric
// paper's does (on training Mixture-of-Experts models over a
// reconfigurable optical fabric, sec. 5.2); a fabric whose switches serve
// one row each (RailX) needs a spare on the failed host's rails.
//
// Hosts, ranks and NICs stay t's, so the switch ports keep their numbers;
// no circuit touches a failed host, no port carries two circuits, and
// circuits between healthy hosts stay as they were. The failed hosts'
// ranks close the ring, so that the survivors' part of the target (Subset
// of the survivors' ranks, and the spare's once they joined) rings over
// them alone. It is an error if t is invalid, a host is out of range, the
// spare failed, has another number of ranks than the host it replaces or
// too few free ports for its circuits, or t is a K-hop line, whose fibres
// join fixed line neighbours and cannot reach a spare.
func RecoveryCircuits(t *topo.Topology, failed []int, spare int) (*topo.Topology, error) {
	if t == nil {
		return nil, fmt.Errorf("recovery circuits: nil topology")
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("recovery circuits: %w", err)
	}
	for _, h := range failed {
		if h < 0 || h >= len(t.Hosts) {
			return nil, fmt.Errorf("recovery circuits: failed host %d: outside the %d hosts", h, len(t.Hosts))
		}
	}
	if spare < 0 || len(failed) == 0 {
		return t.Bypass(failed)
	}
	if spare >= len(t.Hosts) {
		return nil, fmt.Errorf("recovery circuits: spare host %d: outside the %d hosts", spare, len(t.Hosts))
	}
	if slices.Contains(failed, spare) {
		return nil, fmt.Errorf("recovery circuits: spare host %d is among the failed hosts %v", spare, failed)
	}
	if k := t.KHopReach(); k > 0 {
		return nil, fmt.Errorf("recovery circuits: K-hop line (K = %d): node %s's fibres reach fixed line neighbours, so spare %s cannot take its place; bypass it (no spare)",
			k, t.Hosts[failed[0]].Name, t.Hosts[spare].Name)
	}
	out, err := replaceHost(t, failed[0], spare)
	if err != nil {
		return nil, fmt.Errorf("recovery circuits: %w", err)
	}
	return out.Bypass(failed)
}

// replaceHost returns a copy of t in which spare holds the circuits and
// the ring places of host h.
func replaceHost(t *topo.Topology, h, spare int) (*topo.Topology, error) {
	hr := t.HostRanks()
	if len(hr[h]) != len(hr[spare]) {
		return nil, fmt.Errorf("spare %s has %d ranks, failed host %s %d", t.Hosts[spare].Name, len(hr[spare]), t.Hosts[h].Name, len(hr[h]))
	}
	out := *t
	out.Circuits = make([]topo.Circuit, 0, len(t.Circuits))
	free := t.FreePorts(spare)
	var moved []topo.Circuit
	for _, c := range t.Circuits {
		ha, hb := t.NICs[c.A].Host, t.NICs[c.B].Host
		switch {
		case ha == h && hb == spare:
			free = append(free, c.B) // the spare would join itself
		case ha == spare && hb == h:
			free = append(free, c.A)
		case ha == h || hb == h:
			moved = append(moved, c)
		default:
			out.Circuits = append(out.Circuits, c)
		}
	}
	slices.Sort(free)
	if len(moved) > len(free) {
		return nil, fmt.Errorf("spare %s has %d free OCS ports, failed host %s had %d circuits to move", t.Hosts[spare].Name, len(free), t.Hosts[h].Name, len(moved))
	}
	for _, c := range moved {
		end := &c.A
		if t.NICs[c.B].Host == h {
			end = &c.B
		}
		k := sparePort(t, free, *end)
		*end = free[k]
		free = slices.Delete(free, k, k+1)
		out.Circuits = append(out.Circuits, c)
	}
	if len(t.Ring) > 0 {
		swap := map[int]int{}
		for l := range hr[h] {
			swap[hr[h][l]], swap[hr[spare][l]] = hr[spare][l], hr[h][l]
		}
		out.Ring = slices.Clone(t.Ring)
		for i, r := range out.Ring {
			if s, ok := swap[r]; ok {
				out.Ring[i] = s
			}
		}
	}
	return &out, nil
}

// sparePort picks, among the free ports of the spare, the one to take
// over port p: the same name, else the same rail, else the first. free
// is not empty.
func sparePort(t *topo.Topology, free []int, p int) int {
	for _, same := range []func(n topo.NIC) bool{
		func(n topo.NIC) bool { return n.Name == t.NICs[p].Name },
		func(n topo.NIC) bool { return n.Rail == t.NICs[p].Rail },
	} {
		for k, q := range free {
			if same(t.NICs[q]) {
				return k
			}
		}
	}
	return 0
}
