package topo

import (
	"reflect"
	"strings"
	"testing"
)

// checkLemma31 checks RailX Lemma 3.1 on the directed rings of k nodes,
// one per rail: every pair of nodes (A, B) is directly connected on two
// different rails, A+ to B- on one and A- to B+ on the other, and on no
// other rail; every rail is a Hamiltonian ring.
func checkLemma31(t *testing.T, k int, rings [][]int) {
	t.Helper()
	if len(rings) != k-1 {
		t.Fatalf("k=%d: %d rails, want %d", k, len(rings), k-1)
	}
	// plusToMinus[a][b] = rail on which a's + port meets b's - port.
	plusToMinus := make([][]int, k)
	for a := range plusToMinus {
		plusToMinus[a] = make([]int, k)
		for b := range plusToMinus[a] {
			plusToMinus[a][b] = -1
		}
	}
	for rail, ring := range rings {
		if len(ring) != k {
			t.Fatalf("k=%d rail %d: ring of %d nodes", k, rail, len(ring))
		}
		seen := make([]bool, k)
		for i, v := range ring {
			if v < 0 || v >= k || seen[v] {
				t.Fatalf("k=%d rail %d: ring %v is not Hamiltonian", k, rail, ring)
			}
			seen[v] = true
			w := ring[(i+1)%k]
			if w < 0 || w >= k {
				t.Fatalf("k=%d rail %d: node %d", k, rail, w)
			}
			if plusToMinus[v][w] >= 0 {
				t.Fatalf("k=%d: %d+ meets %d- on rails %d and %d (not edge-disjoint)", k, v, w, plusToMinus[v][w], rail)
			}
			plusToMinus[v][w] = rail
		}
	}
	for a := 0; a < k; a++ {
		for b := 0; b < k; b++ {
			if a == b {
				continue
			}
			ra, rb := plusToMinus[a][b], plusToMinus[b][a]
			if ra < 0 || rb < 0 {
				t.Fatalf("k=%d: pair (%d,%d) lacks a link: A+B- on rail %d, A-B+ on rail %d", k, a, b, ra, rb)
			}
			if ra == rb {
				t.Fatalf("k=%d: pair (%d,%d) has both links on rail %d", k, a, b, ra)
			}
		}
	}
}

// Lemma 3.1 for every odd n in 3..51 and every even n in 8..40, plus 64
// (the RailX row of a radix-128 OCS).
func TestDirectedDecompositionLemma31(t *testing.T) {
	var ns []int
	for n := 3; n <= 51; n += 2 {
		ns = append(ns, n)
	}
	for n := 8; n <= 40; n += 2 {
		ns = append(ns, n)
	}
	ns = append(ns, 64)
	for _, n := range ns {
		c, err := DirectedHamiltonianCycles(n)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if err := VerifyDecomposition(n, c, true); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		checkLemma31(t, n, c)
	}
}

// Every even n up to the documented limit decomposes (BenchmarkDirectedHamiltonianCycles64
// shows how long one takes).
func TestDirectedDecompositionAllEven(t *testing.T) {
	if testing.Short() {
		t.Skip("even n 42..128 take about 1.5 s in all")
	}
	for n := 42; n <= 128; n += 2 {
		c, err := DirectedHamiltonianCycles(n)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if err := VerifyDecomposition(n, c, true); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
}

func TestDirectedDecompositionSmallAndBad(t *testing.T) {
	if c, err := DirectedHamiltonianCycles(1); err != nil || len(c) != 0 {
		t.Errorf("n=1: %v %v", c, err)
	}
	if c, err := DirectedHamiltonianCycles(2); err != nil || !reflect.DeepEqual(c, [][]int{{0, 1}}) {
		t.Errorf("n=2: %v %v", c, err)
	}
	for _, n := range []int{4, 6} {
		_, err := DirectedHamiltonianCycles(n)
		if err == nil || !strings.Contains(err.Error(), "Tillson") {
			t.Errorf("n=%d: %v", n, err)
		}
	}
	for _, n := range []int{0, -2, MaxDirectedDecomposition + 2, 1 << 20} {
		if _, err := DirectedHamiltonianCycles(n); err == nil {
			t.Errorf("n=%d accepted", n)
		}
	}
	// Odd n far above the even limit is closed-form.
	if c, err := DirectedHamiltonianCycles(301); err != nil || len(c) != 300 {
		t.Errorf("n=301: %d cycles, %v", len(c), err)
	}
}

// The decomposition is deterministic and callers cannot corrupt the cache.
func TestDirectedDecompositionDeterministic(t *testing.T) {
	a, _ := DirectedHamiltonianCycles(20)
	a[0][0] = -1
	b, _ := DirectedHamiltonianCycles(20)
	if err := VerifyDecomposition(20, b, true); err != nil {
		t.Fatalf("cache corrupted by a caller: %v", err)
	}
	directedCache.Delete(20)
	c, _ := DirectedHamiltonianCycles(20)
	if !reflect.DeepEqual(b, c) {
		t.Fatalf("two constructions differ")
	}
}

// The rainbow search itself proves K*_4 and K*_6 impossible (Tillson's
// exceptions), which is why they are rejected up front.
func TestRainbowPathImpossibleForTillsonExceptions(t *testing.T) {
	for _, m := range []int{3, 5} {
		und, _ := WaleckiCycles(m)
		q := len(und)
		d := make([][]int, 2*q)
		for i, c := range und {
			d[i], d[i+q] = c, reverseCycle(c)
		}
		if p, err := rainbowPath(m, d, m-1, 1); err == nil {
			t.Errorf("K*_%d: found rainbow path %v", m+1, p)
		}
	}
}
