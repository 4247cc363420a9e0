package topo

import (
	"strings"
	"testing"
)

// checkPhysicalRing checks that t.Ring is a permutation of the ranks and
// that every hop, the closing one included, is a direct link: inside a
// host or HB domain, or over an optical circuit the two ranks drive.
func checkPhysicalRing(t *testing.T, top *Topology) {
	t.Helper()
	checkRing(t, top, false)
}

// checkRing is checkPhysicalRing; with domainBreaks it also allows the
// ring to jump from one HB domain to the next (a topology of several
// rings, each one HB domain, concatenated), once per domain.
func checkRing(t *testing.T, top *Topology, domainBreaks bool) {
	t.Helper()
	ring := top.Ring
	if len(ring) != len(top.Ranks) {
		t.Fatalf("ring of %d ranks, topology of %d", len(ring), len(top.Ranks))
	}
	// Port owners and circuits by host pair, to check hops without
	// Path's linear scans.
	owner := make([]int, len(top.NICs))
	for i := range owner {
		owner[i] = -1
	}
	for r, rk := range top.Ranks {
		for _, p := range rk.Ports {
			owner[p] = r
		}
	}
	type pair struct{ a, b int }
	links := map[pair]bool{}
	for _, c := range top.Circuits {
		ra, rb := owner[c.A], owner[c.B]
		links[pair{ra, rb}] = true
		links[pair{rb, ra}] = true
	}
	seen := make([]bool, len(top.Ranks))
	jumps := map[int]bool{}
	for i, r := range ring {
		if seen[r] {
			t.Fatalf("rank %d twice in the ring", r)
		}
		seen[r] = true
		s := ring[(i+1)%len(ring)]
		hr, hs := top.Ranks[r].Host, top.Ranks[s].Host
		if hr == hs || (top.Hosts[hr].HBDomain >= 0 && top.Hosts[hr].HBDomain == top.Hosts[hs].HBDomain) {
			continue
		}
		if domainBreaks && top.Hosts[hr].HBDomain >= 0 && !jumps[top.Hosts[hr].HBDomain] {
			jumps[top.Hosts[hr].HBDomain] = true
			continue
		}
		if !links[pair{r, s}] {
			t.Fatalf("ring hop %d -> %d (hosts %d -> %d) is not over a circuit the two ranks drive", r, s, hr, hs)
		}
	}
}

func TestBuildRailXSmall(t *testing.T) {
	cases := []RailXConfig{
		{Kind: RailXHyperX, X: 5, Y: 5, Mesh: 2},            // rails 4
		{Kind: RailXHyperX, X: 8, Y: 3, Mesh: 1, Rails: 7},  // even row, Y needs 2
		{Kind: RailXHyperX, X: 9, Y: 1, Mesh: 4, Rails: 12}, // extra rails reuse cycles
		{Kind: RailXTorus, X: 4, Y: 3, Mesh: 3, Rails: 6},
		{Kind: RailXTorus, X: 2, Y: 2, Mesh: 2, Rails: 2},
		{Kind: RailXTorus, X: 3, Y: 5, Mesh: 1, Rails: 1},
		{Kind: RailXTorus, X: 1, Y: 1, Mesh: 3},
		{X: 7, Y: 7}, // defaults: torus, mesh 1, rails 6
	}
	for _, cfg := range cases {
		top, f, err := BuildRailX(cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		if err := top.Validate(); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		m, r := max(cfg.Mesh, 1), f.Rails
		y := max(cfg.Y, 1)
		dims := 0
		for _, k := range []int{cfg.X, y} {
			if k > 1 {
				dims++
			}
		}
		if len(top.Hosts) != cfg.X*y || len(top.Ranks) != cfg.X*y*m*m {
			t.Fatalf("%+v: %d hosts, %d ranks", cfg, len(top.Hosts), len(top.Ranks))
		}
		if len(top.NICs) != cfg.X*y*2*r*dims || len(top.Circuits) != len(top.NICs)/2 {
			t.Fatalf("%+v: %d NICs, %d circuits", cfg, len(top.NICs), len(top.Circuits))
		}
		// Every port is driven by a chip on the right edge of its node.
		for rk, rank := range top.Ranks {
			cx, cy := rank.LocalRank%m, rank.LocalRank/m
			for _, p := range rank.Ports {
				name := top.NICs[p].Name
				edge := map[string]bool{"x+": cx == m-1, "x-": cx == 0, "y+": cy == m-1, "y-": cy == 0}[name[:1]+name[len(name)-1:]]
				if !edge {
					t.Fatalf("%+v: rank %d (chip %d,%d) drives port %s", cfg, rk, cx, cy, name)
				}
			}
		}
		// Circuits join the nodes the port map says.
		for i, l := range f.Links() {
			c := top.Circuits[i]
			if top.NICs[c.A].Host != l.From || top.NICs[c.B].Host != l.To {
				t.Fatalf("%+v: circuit %d joins hosts %d,%d; port map says %d,%d", cfg, i, top.NICs[c.A].Host, top.NICs[c.B].Host, l.From, l.To)
			}
		}
		checkPhysicalRing(t, top)
		// Path agrees on a few hops.
		for i := 0; i < len(top.Ring) && i < 40; i++ {
			a, b := top.Ring[i], top.Ring[(i+1)%len(top.Ring)]
			if p := top.Path(a, b); p.Class != HBD && p.Class != OCS {
				t.Fatalf("%+v: Path(%d,%d) = %s", cfg, a, b, p.Class)
			}
		}
	}
}

// In a HyperX every two nodes of a row (or column) share two circuits, so
// Path finds an OCS path between the chips that drive them.
func TestBuildRailXHyperXAllToAll(t *testing.T) {
	top, _, err := BuildRailX(RailXConfig{Kind: RailXHyperX, X: 7, Y: 7})
	if err != nil {
		t.Fatal(err)
	}
	count := map[[2]int]int{}
	for _, c := range top.Circuits {
		a, b := top.NICs[c.A].Host, top.NICs[c.B].Host
		count[[2]int{min(a, b), max(a, b)}]++
	}
	for a := 0; a < 49; a++ {
		for b := a + 1; b < 49; b++ {
			sameLine := a%7 == b%7 || a/7 == b/7
			if got := count[[2]int{a, b}]; (sameLine && got != 2) || (!sameLine && got != 0) {
				t.Fatalf("nodes %d,%d: %d circuits", a, b, got)
			}
		}
	}
	if p := top.Path(0, 3); p.Class != OCS {
		t.Fatalf("Path(0,3) = %+v", p)
	}
}

func TestBuildRailXAllocationCoords(t *testing.T) {
	a, err := LargestAllocation(6, 6, []GridFault{{1, 1}, {4, 2}})
	if err != nil {
		t.Fatal(err)
	}
	top, _, err := BuildRailX(RailXConfig{Kind: RailXHyperX, X: len(a.Cols), Y: len(a.Rows), Cols: a.Cols, Rows: a.Rows})
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Hosts) != a.Size {
		t.Fatalf("%d hosts for an allocation of %d", len(top.Hosts), a.Size)
	}
	for _, h := range top.Hosts {
		for _, f := range []GridFault{{1, 1}, {4, 2}} {
			if h.Coord[0] == f.X && h.Coord[1] == f.Y {
				t.Fatalf("host %s sits on a fault", h.Name)
			}
		}
	}
	checkPhysicalRing(t, top)
}

func TestBuildRailXErrors(t *testing.T) {
	cases := []struct {
		cfg  RailXConfig
		want string
	}{
		{RailXConfig{X: 0, Y: 3}, "grid"},
		{RailXConfig{X: 3, Y: 3, Mesh: 2, Rails: 3}, "multiple"},
		{RailXConfig{X: 3, Y: 3, Mesh: -1}, "mesh"},
		{RailXConfig{X: 3, Y: 3, Kind: "ring"}, "kind"},
		{RailXConfig{X: 6, Y: 6, Kind: RailXHyperX}, "Tillson"},
		{RailXConfig{X: 7, Y: 7, Kind: RailXHyperX, Rails: 3}, "rails"},
		{RailXConfig{X: 3, Y: 2, Cols: []int{0, 1}}, "cols"},
		{RailXConfig{X: 3, Y: 2, Rows: []int{4, 4}}, "rows"},
		{RailXConfig{X: 1 << 12, Y: 1 << 12, Mesh: 8}, "ranks"},
		{RailXConfig{X: 3, Y: 3, Classes: LinkClasses{OCS: LinkParams{Bandwidth: -1}}}, "negative"},
	}
	for _, c := range cases {
		_, _, err := BuildRailX(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v (want %q)", c.cfg, err, c.want)
		}
	}
}
