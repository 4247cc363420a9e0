package comm

import (
	"fmt"
	"strings"
	"sync"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport/emu"
)

// WithTopology describes the fabric (OCCL_TOPO: a JSON file or a spec such
// as hosts=4x2,hbd=8GB/s,eps=1GB/s). It must have exactly one rank per
// rank of the communicator. The topology decides which ranks count as one
// host (so one machine can run several emulated hosts: shared memory inside
// an emulated host, TCP between them) and gives the cost model its link
// parameters, from which the schedules are chosen.
func WithTopology(t *topo.Topology) Option { return func(c *config) { c.topology = t } }

// WithEmulation shapes every connection to the topology's link bandwidth
// and latency (OCCL_EMULATE=1), with transport/emu: one machine then
// behaves like the multi-host fabric the topology describes, for tests and
// benchmarks. It needs WithTopology.
func WithEmulation(on bool) Option { return func(c *config) { c.emulate = on } }

// FabricStats returns the counters of the emulated fabric that shapes the
// communicator's connections (WithEmulation), and false if there is none.
// Stats.Links says which emulated links its traffic crossed, in indices of
// Topology() (hosts and NICs; a rewire keeps them): a test can check that
// after a reconfiguration the new circuits carry the traffic and no frame
// crosses a port it should avoid. The counters run from when the
// communicator was made and only grow; take one Stats before and use
// emu.Stats.Since for what moved in between.
//
// The in-process communicators of one NewLocal, Split, Shrink or GrowLocal
// share one fabric, so each reports the frames of all their ranks; a
// communicator of its own process counts the frames this process's ranks
// of it sent. Communicators made from it (Split, Shrink, Grow) have fabrics
// of their own.
func (c *Communicator) FabricStats() (emu.Stats, bool) {
	f := c.linker.emulator()
	if f == nil {
		return emu.Stats{}, false
	}
	return f.Stats(), true
}

// emulate makes the emulated fabric under key when the configuration asks
// for one (nil if not emulating); package setup wraps the connections in
// it.
func emulate(cfg config, key uint64, local bool) (*emu.Fabric, error) {
	if !cfg.emulate {
		return nil, nil
	}
	if !local {
		emu.CleanStale("")
	}
	f, err := emu.New(cfg.topology, cfg.emuConfig(key, local))
	if err != nil {
		return nil, fmt.Errorf("emulated fabric: %w", err)
	}
	return f, nil
}

// vhostSep separates a machine's host id from the emulated host's number.
const vhostSep = "/vhost"

// virtualHostID is this rank's host identity under a topology: the real
// machine's identity (so emulated hosts on different machines never merge)
// and the emulated host.
func virtualHostID(real string, t *topo.Topology, rank int) string {
	return fmt.Sprintf("%s%s%d", real, vhostSep, t.Ranks[rank].Host)
}

// machineIDs maps host ids, virtual or not, to the ids of the machines
// the ranks run on: a virtual id loses its last vhostSep and what follows.
func machineIDs(hostIDs []string) []string {
	out := make([]string, len(hostIDs))
	for i, h := range hostIDs {
		out[i] = h
		if j := strings.LastIndex(h, vhostSep); j >= 0 {
			out[i] = h[:j]
		}
	}
	return out
}

// WithFabricRanks says that rank r of the communicator Init makes is rank
// ranks[r] of the communicator that spans the fabric, as for one made by
// Split: FabricRanks reports them, reconfig.Reconfigure rewires the new
// communicator onto its part of a fabric-wide target, and a fabric-wide
// topology (OCCL_TOPO or WithTopology, with one rank per rank of the
// fabric) is narrowed to these ranks. It builds a sub-communicator among
// its members only, where Split needs every rank of the parent; the torch
// backend makes its groups this way.
func WithFabricRanks(ranks []int) Option {
	return func(c *config) { c.fabricRanks = append([]int(nil), ranks...) }
}

// checkTopology validates the configured topology and fabric ranks against
// the size, narrowing a fabric-wide topology to the fabric ranks.
func (c *config) checkTopology(size int) error {
	if c.fabricRanks != nil {
		if len(c.fabricRanks) != size {
			return invalidf("%d fabric ranks for a communicator of %d", len(c.fabricRanks), size)
		}
		seen := map[int]bool{}
		for _, f := range c.fabricRanks {
			if f < 0 || seen[f] || (c.topology != nil && f >= len(c.topology.Ranks)) {
				return invalidf("fabric ranks %v: each must be distinct, non-negative and a rank of the topology", c.fabricRanks)
			}
			seen[f] = true
		}
		if c.topology != nil && len(c.topology.Ranks) != size {
			c.topology = c.topology.Subset(c.fabricRanks)
		}
	}
	if c.topology == nil {
		return nil
	}
	if n := len(c.topology.Ranks); n != size {
		return invalidf("topology describes %d ranks, the communicator has %d", n, size)
	}
	return nil
}

// setupModel gives the communicator its topology and cost model: the
// configured topology, or, across several hosts without one, a topology of
// the hosts it discovered with default link parameters. A single host
// without a topology keeps the size-based choice of algo.Select.
func (c *Communicator) setupModel() {
	t := c.cfg.topology
	if t == nil && c.NumHosts() > 1 {
		t = topo.FromHosts(c.hosts)
	}
	c.layout.Store(newLayout(t))
}

// layout is what a communicator derives from its topology. It is replaced
// as a whole when the fabric is rewired, so that readers on other
// goroutines (Algorithm, Predict, Topology) see one consistent version.
type layout struct {
	topo       *topo.Topology // nil: one host, no description
	model      *algo.Model
	hostGroups [][]int     // every host's ranks in local-rank order
	routes     *routeCache // all-to-all routes chosen on it; the worker's alone
	choices    choiceCache // schedules chosen on it by the cost model
}

// choiceCache remembers the cost model's choice of schedule per operation
// and size. Any goroutine may use it (Algorithm is public). It holds at
// most maxChoices entries and starts over when full, so a job that never
// repeats a size does not grow it without bound.
type choiceCache struct {
	mu sync.Mutex
	m  map[choiceKey]algo.Algorithm
}

type choiceKey struct {
	op    algo.Collective
	bytes int
}

const maxChoices = 1024

// get returns the choice for op on bytes, computing it with choose the
// first time.
func (cc *choiceCache) get(op algo.Collective, bytes int, choose func() algo.Algorithm) algo.Algorithm {
	k := choiceKey{op, bytes}
	cc.mu.Lock()
	a, ok := cc.m[k]
	cc.mu.Unlock()
	if ok {
		return a
	}
	a = choose()
	cc.mu.Lock()
	if cc.m == nil || len(cc.m) >= maxChoices {
		cc.m = make(map[choiceKey]algo.Algorithm)
	}
	cc.m[k] = a
	cc.mu.Unlock()
	return a
}

func newLayout(t *topo.Topology) *layout {
	if t == nil {
		return &layout{routes: newRouteCache()}
	}
	return &layout{topo: t, model: algo.NewModel(t), hostGroups: t.HostRanks(), routes: newRouteCache()}
}

// lay returns the current layout.
func (c *Communicator) lay() *layout { return c.layout.Load() }

// Topology returns the topology the communicator schedules for, or nil if
// it has none (one host and no OCCL_TOPO).
func (c *Communicator) Topology() *topo.Topology { return c.lay().topo }

// Predict returns the cost model's time in seconds for collective op with
// schedule a on bytes bytes (the full buffer), and whether the model covers
// it.
func (c *Communicator) Predict(op algo.Collective, a algo.Algorithm, bytes int) (float64, bool) {
	if c.lay().model == nil {
		return 0, false
	}
	return c.lay().model.Predict(op, a, bytes)
}
