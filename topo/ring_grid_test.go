package topo

import "testing"

// Every grid up to 12 x 12: the ring visits each node once and steps only
// between torus neighbours, the closing step included.
func TestGridHamiltonianCycle(t *testing.T) {
	for x := 1; x <= 12; x++ {
		for y := 1; y <= 12; y++ {
			ring, err := GridHamiltonianCycle(x, y)
			if err != nil {
				t.Fatal(x, y, err)
			}
			checkGridRing(t, x, y, ring)
		}
	}
	for _, bad := range [][2]int{{0, 3}, {3, -1}, {1 << 20, 1 << 20}} {
		if _, err := GridHamiltonianCycle(bad[0], bad[1]); err == nil {
			t.Errorf("grid %v accepted", bad)
		}
	}
}

func checkGridRing(t *testing.T, x, y int, ring []int) {
	t.Helper()
	if len(ring) != x*y {
		t.Fatalf("%dx%d: ring of %d", x, y, len(ring))
	}
	seen := make([]bool, x*y)
	for i, v := range ring {
		if v < 0 || v >= x*y || seen[v] {
			t.Fatalf("%dx%d: ring %v is not a permutation", x, y, ring)
		}
		seen[v] = true
		if len(ring) == 1 {
			continue
		}
		w := ring[(i+1)%len(ring)]
		dx := ((w%x-v%x)%x + x) % x
		dy := ((w/x-v/x)%y + y) % y
		neighbourX := dy == 0 && (dx == 1 || dx == x-1)
		neighbourY := dx == 0 && (dy == 1 || dy == y-1)
		if !neighbourX && !neighbourY {
			t.Fatalf("%dx%d: step %d -> %d is not between torus neighbours (ring %v)", x, y, v, w, ring)
		}
	}
}
