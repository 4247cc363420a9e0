package topo

import "fmt"

// Shared pieces of the topology builders (railopt.go, railonly.go,
// railx_topology.go, kring_topology.go): link parameters given by the
// caller, and the checks every builder makes on its arguments. Builders are
// pure functions: they read no file or environment and return an error,
// never panic, on bad input.

// LinkClasses are the alpha-beta parameters a builder gives each link
// class. A field left zero takes its value from DefaultClasses, so the zero
// LinkClasses means "the defaults".
type LinkClasses struct {
	// HBD: inside a host or HB domain (NVLink, a chip mesh, shared memory).
	HBD LinkParams `json:"hbd"`
	// EPS: the packet network, per NIC.
	EPS LinkParams `json:"eps"`
	// OCS: one optical circuit.
	OCS LinkParams `json:"ocs"`
}

// Map returns the parameters as Topology.Classes wants them, with zero
// fields replaced by the defaults. A zero bandwidth or latency inside a
// non-zero LinkParams also takes the default, so that setting only a
// bandwidth keeps the default latency.
func (c LinkClasses) Map() map[LinkClass]LinkParams {
	out := DefaultClasses()
	for class, p := range map[LinkClass]LinkParams{HBD: c.HBD, EPS: c.EPS, OCS: c.OCS} {
		d := out[class]
		if p.Bandwidth > 0 {
			d.Bandwidth = p.Bandwidth
		}
		if p.Latency > 0 {
			d.Latency = p.Latency
		}
		out[class] = d
	}
	return out
}

// check reports negative parameters, which the defaults cannot mend.
func (c LinkClasses) check() error {
	for class, p := range map[LinkClass]LinkParams{HBD: c.HBD, EPS: c.EPS, OCS: c.OCS} {
		if p.Bandwidth < 0 || p.Latency < 0 {
			return fmt.Errorf("class %s: bandwidth %g and latency %g must not be negative", class, p.Bandwidth, p.Latency)
		}
	}
	return nil
}

// maxBuilderRanks bounds the ranks a builder makes, so that a typo (a
// million hosts of a million GPUs) fails with an error instead of
// exhausting memory. It is far above the largest fabric of the papers
// (RailX: 200,704 chips).
const maxBuilderRanks = 1 << 24

// checkCount rejects a non-positive count.
func checkCount(what string, n int) error {
	if n < 1 {
		return fmt.Errorf("%s = %d: want at least 1", what, n)
	}
	return nil
}

// checkProduct rejects a product of counts above maxBuilderRanks without
// overflowing.
func checkProduct(what string, factors ...int) (int, error) {
	p := 1
	for _, f := range factors {
		if f < 1 {
			return 0, fmt.Errorf("%s: factor %d is not positive", what, f)
		}
		if p > maxBuilderRanks/f {
			return 0, fmt.Errorf("%s: %v is more than %d ranks", what, factors, maxBuilderRanks)
		}
		p *= f
	}
	return p, nil
}

// failedSet turns a list of failed node indices into a mask over n nodes.
// Duplicates are allowed; an index outside 0..n-1 is an error.
func failedSet(n int, faults []int) ([]bool, error) {
	failed := make([]bool, n)
	for _, f := range faults {
		if f < 0 || f >= n {
			return nil, fmt.Errorf("failed node %d is outside the %d nodes 0..%d", f, n, n-1)
		}
		failed[f] = true
	}
	return failed, nil
}
