package topo

import (
	"strings"
	"testing"
)

// A HyperX row is all-to-all exactly as Lemma 3.1 says, for odd k in
// 3..51 and even k in 8..40, read back through the port map (Peer).
func TestRailXHyperXRowLemma31(t *testing.T) {
	var ks []int
	for k := 3; k <= 51; k += 2 {
		ks = append(ks, k)
	}
	for k := 8; k <= 40; k += 2 {
		ks = append(ks, k)
	}
	for _, k := range ks {
		f, err := NewRailXFabric(RailXHyperX, k, 1, k-1)
		if err != nil {
			t.Fatalf("k=%d: %v", k, err)
		}
		rings := make([][]int, k-1)
		for a := range rings {
			// Rebuild each rail's ring by following + ports from node 0.
			v := 0
			for i := 0; i < k; i++ {
				rings[a] = append(rings[a], v)
				next := f.Peer(v, DimX, a, true)
				if back := f.Peer(next, DimX, a, false); back != v {
					t.Fatalf("k=%d rail %d: %d+ -> %d but %d- -> %d", k, a, v, next, next, back)
				}
				v = next
			}
			if v != 0 {
				t.Fatalf("k=%d rail %d: ring does not close", k, a)
			}
		}
		checkLemma31(t, k, rings)
		if got := len(f.Links()); got != k*(k-1) {
			t.Fatalf("k=%d: %d links, want %d", k, got, k*(k-1))
		}
	}
}

func TestRailXTorusPorts(t *testing.T) {
	f, err := NewRailXFabric(RailXTorus, 4, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < f.Nodes(); n++ {
		x, y := f.Coord(n)
		for a := 0; a < 2; a++ {
			if p := f.Peer(n, DimX, a, true); p != f.Node((x+1)%4, y) {
				t.Fatalf("node %d X rail %d +: %d", n, a, p)
			}
			if p := f.Peer(n, DimX, a, false); p != f.Node((x+3)%4, y) {
				t.Fatalf("node %d X rail %d -: %d", n, a, p)
			}
			if p := f.Peer(n, DimY, a, true); p != f.Node(x, (y+1)%3) {
				t.Fatalf("node %d Y rail %d +: %d", n, a, p)
			}
		}
	}
	if got := len(f.Links()); got != 2*(4*3*2) {
		t.Fatalf("%d links", got)
	}
	for _, bad := range [][4]int{{-1, 0, 0, 1}, {0, 2, 0, 1}, {0, 0, 2, 1}, {12, 0, 0, 1}} {
		if p := f.Peer(bad[0], bad[1], bad[2], bad[3] == 1); p != -1 {
			t.Errorf("Peer%v = %d", bad, p)
		}
	}
	one, _ := NewRailXFabric(RailXTorus, 5, 1, 1)
	if one.RingsY != nil || one.Peer(0, DimY, 0, true) != -1 {
		t.Errorf("a one-row grid has Y circuits")
	}
}

func TestRailXFabricErrors(t *testing.T) {
	cases := []struct {
		kind    RailXKind
		x, y, r int
		want    string
	}{
		{"mesh", 3, 3, 2, "kind"},
		{RailXTorus, 0, 3, 2, "grid"},
		{RailXTorus, 3, 3, 0, "rails"},
		{RailXHyperX, 7, 7, 5, "at least 6 rails"},
		{RailXHyperX, 4, 1, 3, "Tillson"},
		{RailXHyperX, 5, 6, 5, "Tillson"},
	}
	for _, c := range cases {
		_, err := NewRailXFabric(c.kind, c.x, c.y, c.r)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
