package topo

import "testing"

func TestBuildRailOnly(t *testing.T) {
	top, err := BuildRailOnly(RailOnlyConfig{Domains: 4, GPUsPerDomain: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	if !top.RailOnly || len(top.Ranks) != 32 || len(top.Hosts) != 4 {
		t.Fatalf("rail-only %v, %d ranks, %d hosts", top.RailOnly, len(top.Ranks), len(top.Hosts))
	}
	for g, rk := range top.Ranks {
		if top.Hosts[rk.Host].HBDomain != g/8 || rk.Rail != g%8 || top.NICs[rk.NIC].Rail != g%8 {
			t.Fatalf("rank %d: %+v", g, rk)
		}
	}
	// Same domain: HBD; same rail: EPS; else no path.
	if p := top.Path(0, 7); p.Class != HBD {
		t.Fatalf("same domain: %s", p.Class)
	}
	if p := top.Path(0, 8); p.Class != EPS {
		t.Fatalf("same rail: %s", p.Class)
	}
	if p := top.Path(0, 9); p.Class != None {
		t.Fatalf("cross rail, cross domain: %s", p.Class)
	}
}

// A domain may span hosts (NVL72-like): HBD still joins them.
func TestBuildRailOnlyMultiHostDomains(t *testing.T) {
	top, err := BuildRailOnly(RailOnlyConfig{Domains: 3, GPUsPerDomain: 8, HostsPerDomain: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(top.Hosts) != 6 || top.Uniformity() != 4 {
		t.Fatalf("%d hosts, %d per host", len(top.Hosts), top.Uniformity())
	}
	if p := top.Path(0, 7); p.Class != HBD || top.Ranks[0].Host == top.Ranks[7].Host {
		t.Fatalf("across hosts of one domain: %s", p.Class)
	}
	for _, bad := range []RailOnlyConfig{{Domains: 3, GPUsPerDomain: 8, HostsPerDomain: 3}, {Domains: 0, GPUsPerDomain: 8}, {Domains: 3, GPUsPerDomain: -8}, {Domains: 3, GPUsPerDomain: 8, HostsPerDomain: -1}} {
		if _, err := BuildRailOnly(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// Forwarding: for every pair, the forwarder is src itself when the pair
// shares a domain or a rail, else the rank of src's domain on dst's rail;
// both hops of the forwarded route are direct paths.
func TestRailOnlyForwarder(t *testing.T) {
	const d, k = 5, 4
	top, _ := BuildRailOnly(RailOnlyConfig{Domains: d, GPUsPerDomain: k, HostsPerDomain: 2})
	router, err := NewRailRouter(top)
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < d*k; s++ {
		for t2 := 0; t2 < d*k; t2++ {
			f := RailOnlyForwarder(k, s, t2)
			if g := router.Forwarder(s, t2); g != f {
				t.Fatalf("router(%d,%d) = %d, formula %d", s, t2, g, f)
			}
			direct := top.Path(s, t2).Class != None
			if direct != (f == s) {
				t.Fatalf("(%d,%d): direct %v but forwarder %d", s, t2, direct, f)
			}
			if f == s {
				continue
			}
			if f/k != s/k || f%k != t2%k {
				t.Fatalf("(%d,%d): forwarder %d is not in src's domain on dst's rail", s, t2, f)
			}
			if top.Path(s, f).Class != HBD || top.Path(f, t2).Class != EPS {
				t.Fatalf("(%d,%d) via %d: hops %s, %s", s, t2, f, top.Path(s, f).Class, top.Path(f, t2).Class)
			}
		}
	}
	if RailOnlyForwarder(0, 1, 2) != -1 || RailOnlyForwarder(4, -1, 2) != -1 || router.Forwarder(0, 99) != -1 {
		t.Fatal("bad arguments not -1")
	}
}

// On a topology whose domains lack a rail, the router says there is no
// path.
func TestRailRouterMissingRail(t *testing.T) {
	top := Uniform(2, 2)
	top.RailOnly = true
	top.Ranks[1].Rail = 5 // host 0 has rails 0 and 5; host 1 has 0 and 1
	top.NICs[1].Rail = 5
	r, err := NewRailRouter(top)
	if err != nil {
		t.Fatal(err)
	}
	if f := r.Forwarder(0, 3); f != -1 {
		t.Fatalf("forwarder %d for a rail host 0 lacks", f)
	}
	if f := r.Forwarder(1, 2); f != 0 {
		t.Fatalf("forwarder %d, want 0", f)
	}
	top.Ranks[0].Rail = -1
	if _, err := NewRailRouter(top); err == nil {
		t.Fatal("rank without a rail accepted")
	}
	if _, err := NewRailRouter(nil); err == nil {
		t.Fatal("nil topology accepted")
	}
}
