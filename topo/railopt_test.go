package topo

import (
	"strings"
	"testing"
)

func TestBuildRailOptimized(t *testing.T) {
	top, err := BuildRailOptimized(RailOptConfig{Hosts: 4, GPUsPerHost: 8, NUMANodes: 2, Classes: LinkClasses{EPS: LinkParams{Bandwidth: 50e9}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(top.Ranks) != 32 || len(top.NICs) != 32 || top.RailOnly || top.Uniformity() != 8 {
		t.Fatalf("%d ranks %d NICs", len(top.Ranks), len(top.NICs))
	}
	for r, rk := range top.Ranks {
		if rk.Host != r/8 || rk.LocalRank != r%8 || rk.Rail != r%8 || top.NICs[rk.NIC].Rail != r%8 || rk.NUMA != (r%8)/4 {
			t.Fatalf("rank %d: %+v", r, rk)
		}
	}
	if p := top.Path(1, 2); p.Class != HBD {
		t.Fatalf("same host: %s", p.Class)
	}
	if p := top.Path(1, 10); p.Class != EPS || p.Bandwidth != 50e9 || p.Latency != DefaultClasses()[EPS].Latency {
		t.Fatalf("across rails and hosts: %+v", p)
	}
	for _, bad := range []RailOptConfig{{Hosts: 0, GPUsPerHost: 8}, {Hosts: 4, GPUsPerHost: 0}, {Hosts: 4, GPUsPerHost: 8, NUMANodes: 9}, {Hosts: 1 << 20, GPUsPerHost: 1 << 10}, {Hosts: 1, GPUsPerHost: 1, Classes: LinkClasses{HBD: LinkParams{Latency: -1}}}} {
		if _, err := BuildRailOptimized(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if _, err := BuildRailOptimized(RailOptConfig{Hosts: -1, GPUsPerHost: 8}); err == nil || !strings.Contains(err.Error(), "hosts") {
		t.Errorf("negative hosts: %v", err)
	}
}

func TestLinkClassesMap(t *testing.T) {
	m := LinkClasses{}.Map()
	for c, p := range DefaultClasses() {
		if m[c] != p {
			t.Fatalf("zero classes: %s = %+v", c, m[c])
		}
	}
	m = LinkClasses{HBD: LinkParams{Bandwidth: 900e9}, OCS: LinkParams{Latency: 1e-7}}.Map()
	if m[HBD].Bandwidth != 900e9 || m[HBD].Latency != DefaultClasses()[HBD].Latency || m[OCS].Latency != 1e-7 || m[OCS].Bandwidth != DefaultClasses()[OCS].Bandwidth {
		t.Fatalf("partial classes: %+v", m)
	}
}
