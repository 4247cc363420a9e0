package topo

import "fmt"

// Rail-optimized builder.
//
// A rail-optimized cluster (the baseline of the rail-only paper,
// "How to Build Low-cost Networks for Large Language Models (without Sacrificing Performance)?", and of mFabric) is N hosts, each an HB domain of K
// GPUs joined by NVLink or shared memory, with one NIC per GPU. The NIC of
// local rank i sits on rail i, and every rail switch hangs off a common
// spine, so the packet network reaches any NIC from any NIC. Steps:
//
//  1. host h gets ranks h*K .. h*K+K-1 with local ranks 0..K-1;
//  2. local rank i gets NIC i of its host, class EPS, on rail i, on NUMA
//     node i*NUMANodes/K (GPUs spread evenly over the NUMA nodes);
//  3. the link classes come from the caller (zero fields: defaults).

// RailOptConfig describes a rail-optimized cluster.
type RailOptConfig struct {
	// Hosts is the number of hosts (HB domains of one host each).
	Hosts int `json:"hosts"`
	// GPUsPerHost is the number of ranks per host; rail i serves local
	// rank i of every host.
	GPUsPerHost int `json:"gpus_per_host"`
	// NUMANodes is the number of NUMA nodes per host the GPUs spread over
	// (0 means 1).
	NUMANodes int `json:"numa_nodes,omitempty"`
	// Classes are the link parameters (zero fields: DefaultClasses).
	Classes LinkClasses `json:"classes"`
}

// BuildRailOptimized returns the topology of a rail-optimized cluster:
// every rank has its own packet-network NIC on rail = local rank, and any
// NIC reaches any other (RailOnly is false).
func BuildRailOptimized(cfg RailOptConfig) (*Topology, error) {
	if err := checkCount("hosts", cfg.Hosts); err != nil {
		return nil, fmt.Errorf("rail-optimized: %w", err)
	}
	if err := checkCount("GPUs per host", cfg.GPUsPerHost); err != nil {
		return nil, fmt.Errorf("rail-optimized: %w", err)
	}
	if _, err := checkProduct("rail-optimized hosts x GPUs", cfg.Hosts, cfg.GPUsPerHost); err != nil {
		return nil, err
	}
	numa := cfg.NUMANodes
	if numa == 0 {
		numa = 1
	}
	if numa < 0 || numa > cfg.GPUsPerHost {
		return nil, fmt.Errorf("rail-optimized: %d NUMA nodes for %d GPUs per host: want 1..%d", cfg.NUMANodes, cfg.GPUsPerHost, cfg.GPUsPerHost)
	}
	if err := cfg.Classes.check(); err != nil {
		return nil, fmt.Errorf("rail-optimized: %w", err)
	}
	n := cfg.Hosts * cfg.GPUsPerHost
	t := &Topology{
		Name:    fmt.Sprintf("rail-optimized %dx%d", cfg.Hosts, cfg.GPUsPerHost),
		Hosts:   make([]Host, cfg.Hosts),
		Ranks:   make([]Rank, n),
		NICs:    make([]NIC, n),
		Classes: cfg.Classes.Map(),
	}
	names := make([]string, cfg.GPUsPerHost)
	for l := range names {
		names[l] = fmt.Sprintf("nic%d", l)
	}
	for h := range t.Hosts {
		t.Hosts[h] = Host{Name: fmt.Sprintf("host%d", h), HBDomain: -1, ToR: -1, NUMANodes: numa}
		for l := 0; l < cfg.GPUsPerHost; l++ {
			r := h*cfg.GPUsPerHost + l
			node := l * numa / cfg.GPUsPerHost
			t.NICs[r] = NIC{Host: h, Name: names[l], NUMA: node, Rail: l, Class: EPS}
			t.Ranks[r] = Rank{Host: h, LocalRank: l, NIC: r, Rail: l, NUMA: node}
		}
	}
	return t, nil
}
