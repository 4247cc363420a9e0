// Tests of the completion-time model and the paper's max D/C
// (completion.go) on hand-computed cases and malformed input.

package plan

import (
	"errors"
	"math"
	"testing"
)

func TestEvaluate(t *testing.T) {
	// 3 servers; 0-1 has 2 circuits, the rest goes over the packet network.
	s := [][]float64{
		{5, 8, 3},
		{2, 0, 4},
		{1, 6, 0},
	}
	c := counts(3, [3]int{0, 1, 2})
	bw := Bandwidths{OCS: 2, EPS: 1}
	r, err := Evaluate(s, c, bw)
	if err != nil {
		t.Fatal(err)
	}
	// Circuits 0-1: max(8, 2) / (2*2) = 2. Packet NICs: server 0 TX 3 RX
	// 1 -> 3; server 1 TX 4 RX 6 -> 6; server 2 TX 7 RX 7 -> 7.
	if r.OCS != 2 || r.Pair != [2]int{0, 1} || r.EPS != 7 || r.Server != 2 || r.Time != 7 {
		t.Fatalf("Evaluate = %+v", r)
	}
	// The paper's measure on the upper-triangular form: pairs 10/2, 4/0.
	d, err := Undirected(s)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := MaxT(d, c); !math.IsInf(m, 1) {
		t.Fatalf("MaxT = %g, want +Inf", m)
	}
	full := counts(3, [3]int{0, 1, 2}, [3]int{0, 2, 1}, [3]int{1, 2, 1})
	if m, _ := MaxT(d, full); m != 10 {
		t.Fatalf("MaxT = %g, want 10 (1-2: 4+6)", m)
	}
	// Upper-triangular input gives D / (C * OCS) per circuit pair.
	if r, _ := Evaluate(d, full, bw); r.OCS != 5 || r.EPS != 0 || r.Time != 5 {
		t.Fatalf("Evaluate(D) = %+v", r)
	}
	// No packet network: traffic without a circuit never completes.
	if r, _ := Evaluate(s, c, Bandwidths{OCS: 1}); !math.IsInf(r.Time, 1) {
		t.Fatalf("no packet network: %+v", r)
	}
	if tm, err := CompletionTime(newMatrix(3), newCounts(3), bw); err != nil || tm != 0 {
		t.Fatalf("no demand: %g %v", tm, err)
	}
}

func TestEvaluateBadInput(t *testing.T) {
	s := [][]float64{{0, 1}, {1, 0}}
	bw := DefaultBandwidths()
	bad := []struct {
		name string
		s    [][]float64
		c    [][]int
		bw   Bandwidths
	}{
		{"asymmetric", s, [][]int{{0, 1}, {0, 0}}, bw},
		{"negative", s, [][]int{{0, -1}, {-1, 0}}, bw},
		{"diagonal", s, [][]int{{1, 0}, {0, 0}}, bw},
		{"size", s, [][]int{{0}}, bw},
		{"ragged", s, [][]int{{0, 1}, {1}}, bw},
		{"nan demand", [][]float64{{0, math.NaN()}, {1, 0}}, newCounts(2), bw},
		{"ocs bandwidth", s, newCounts(2), Bandwidths{EPS: 1}},
		{"eps bandwidth", s, newCounts(2), Bandwidths{OCS: 1, EPS: -1}},
		{"nan bandwidth", s, newCounts(2), Bandwidths{OCS: math.NaN(), EPS: 1}},
	}
	for _, tc := range bad {
		if _, err := Evaluate(tc.s, tc.c, tc.bw); !errors.Is(err, ErrDemand) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := MaxT(s, [][]int{{0, 1}, {0, 0}}); err == nil {
		t.Error("MaxT accepted an asymmetric plan")
	}
}
