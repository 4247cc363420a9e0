package topo

import (
	"reflect"
	"strings"
	"testing"
)

func TestWaleckiExamples(t *testing.T) {
	// the RailX paper: k=5 and k=7.
	for n, want := range map[int][][]int{
		5: {{4, 0, 3, 1, 2}, {4, 1, 0, 2, 3}},
		7: {{6, 0, 5, 1, 4, 2, 3}, {6, 1, 0, 2, 5, 3, 4}, {6, 2, 1, 3, 0, 4, 5}},
		3: {{2, 0, 1}},
		1: {},
	} {
		got, err := WaleckiCycles(n)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("WaleckiCycles(%d) = %v, want %v", n, got, want)
		}
	}
}

// Every odd n in 3..51: (n-1)/2 Hamiltonian cycles covering every edge of
// K_n exactly once.
func TestWaleckiDecomposes(t *testing.T) {
	for n := 3; n <= 51; n += 2 {
		c, err := WaleckiCycles(n)
		if err != nil {
			t.Fatal(n, err)
		}
		if len(c) != (n-1)/2 {
			t.Fatalf("n=%d: %d cycles", n, len(c))
		}
		if err := VerifyDecomposition(n, c, false); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
}

func TestWaleckiRejectsEven(t *testing.T) {
	for _, n := range []int{0, -3, 2, 4, 64} {
		if _, err := WaleckiCycles(n); err == nil || !strings.Contains(err.Error(), "odd") {
			t.Errorf("WaleckiCycles(%d): %v", n, err)
		}
	}
}

func TestVerifyDecompositionCatchesErrors(t *testing.T) {
	good, _ := WaleckiCycles(7)
	cases := map[string][][]int{
		"too few cycles":  good[:2],
		"repeated node":   {{6, 0, 5, 1, 4, 2, 2}, good[1], good[2]},
		"repeated edge":   {good[0], good[0], good[2]},
		"node range":      {{6, 0, 5, 1, 4, 2, 9}, good[1], good[2]},
		"short cycle":     {{6, 0, 5}, good[1], good[2]},
		"directed as und": bothDirections(good),
	}
	for name, c := range cases {
		if err := VerifyDecomposition(7, c, false); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := VerifyDecomposition(7, bothDirections(good), true); err != nil {
		t.Errorf("both directions of Walecki: %v", err)
	}
}
