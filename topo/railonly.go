package topo

import "fmt"

// Rail-only builder ("How to Build Low-cost Networks for Large Language Models (without Sacrificing Performance)?"; "Rail-only networks for LLM
// training", sec. 3-4).
//
// A rail-only fabric is D HB domains of K GPUs each. Inside a domain the
// GPUs share a non-blocking HB fabric (NVLink/NVSwitch); the GPU of rank i
// inside its domain sits on rail i, and rail i is a switch joining the
// rank-i GPUs of all domains. There is no spine: two GPUs of different
// domains and different rails have no network path (traffic is forwarded
// through the HB domain, see railonly_forward.go). Steps:
//
//  1. global rank g = d*K + i is GPU i of domain d (domain = g div K,
//     rail = g mod K, as in the paper);
//  2. a domain is HostsPerDomain hosts (K/HostsPerDomain GPUs each), all
//     with HBDomain = d, so that every pair inside the domain gets an HBD
//     path even across hosts (an NVL72-style multi-host domain);
//  3. GPU i gets one EPS NIC on rail i; the topology is marked RailOnly.

// RailOnlyConfig describes a rail-only fabric.
type RailOnlyConfig struct {
	// Domains is the number of HB domains D.
	Domains int `json:"domains"`
	// GPUsPerDomain is K, the GPUs (and rails) per domain.
	GPUsPerDomain int `json:"gpus_per_domain"`
	// HostsPerDomain splits each domain over several hosts (0 means 1); it
	// must divide GPUsPerDomain.
	HostsPerDomain int `json:"hosts_per_domain,omitempty"`
	// Classes are the link parameters (zero fields: DefaultClasses).
	Classes LinkClasses `json:"classes"`
}

// BuildRailOnly returns the topology of a rail-only fabric: rank g is GPU
// g mod K of domain g div K, on rail g mod K; hosts carry their HB domain;
// RailOnly is set so that Path reports no direct path across rails of
// different domains.
func BuildRailOnly(cfg RailOnlyConfig) (*Topology, error) {
	if err := checkCount("domains", cfg.Domains); err != nil {
		return nil, fmt.Errorf("rail-only: %w", err)
	}
	if err := checkCount("GPUs per domain", cfg.GPUsPerDomain); err != nil {
		return nil, fmt.Errorf("rail-only: %w", err)
	}
	if _, err := checkProduct("rail-only domains x GPUs", cfg.Domains, cfg.GPUsPerDomain); err != nil {
		return nil, err
	}
	hpd := cfg.HostsPerDomain
	if hpd == 0 {
		hpd = 1
	}
	if hpd < 0 || cfg.GPUsPerDomain%hpd != 0 {
		return nil, fmt.Errorf("rail-only: %d hosts per domain do not divide the %d GPUs of a domain", cfg.HostsPerDomain, cfg.GPUsPerDomain)
	}
	if err := cfg.Classes.check(); err != nil {
		return nil, fmt.Errorf("rail-only: %w", err)
	}
	k := cfg.GPUsPerDomain
	perHost := k / hpd
	n := cfg.Domains * k
	t := &Topology{
		Name:     fmt.Sprintf("rail-only %dx%d", cfg.Domains, k),
		Hosts:    make([]Host, cfg.Domains*hpd),
		Ranks:    make([]Rank, n),
		NICs:     make([]NIC, n),
		Classes:  cfg.Classes.Map(),
		RailOnly: true,
	}
	for h := range t.Hosts {
		d := h / hpd
		name := fmt.Sprintf("domain%d", d)
		if hpd > 1 {
			name = fmt.Sprintf("domain%d-host%d", d, h%hpd)
		}
		t.Hosts[h] = Host{Name: name, HBDomain: d, ToR: -1}
	}
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("rail%d", i)
	}
	for g := 0; g < n; g++ {
		d, i := g/k, g%k
		h := d*hpd + i/perHost
		t.NICs[g] = NIC{Host: h, Name: names[i], Rail: i, Class: EPS}
		t.Ranks[g] = Rank{Host: h, LocalRank: i % perHost, NIC: g, Rail: i}
	}
	return t, nil
}
