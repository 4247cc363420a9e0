package topo

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Table 7 of the InfinitePOD paper ("InfinitePOD: Building Datacenter-Scale High-Bandwidth Domain for LLM with Optical Circuit Switching Transceivers"): upper bound of
// the expected GPU waste ratio, GPU failure rate 0.875%, N_t = 32.
var table7 = []struct {
	r, k  int
	value float64 // as a ratio
	tol   float64 // relative: the table's rounding
}{
	{4, 2, 0.0735, 0.001},
	{4, 3, 0.0026, 0.02},   // 0.26% (formula 0.257%)
	{4, 4, 9.00e-5, 0.001}, // printed 9.00e-4: exponent off by one, see kring_waste.go
	{8, 2, 0.274, 0.002},
	{8, 3, 0.0192, 0.001},
	{8, 4, 0.0013, 0.04}, // 0.13% (formula 0.134%)
}

func TestWasteBoundTable7(t *testing.T) {
	for _, c := range table7 {
		got := WasteBoundTable7(32, c.r, c.k, 0.00875)
		if math.Abs(got-c.value) > c.tol*c.value {
			t.Errorf("R=%d K=%d: %.4g, table %.4g", c.r, c.k, got, c.value)
		}
		// Eq. 1 with P_s = R p is the same order, a bit lower.
		eq1 := WasteBoundEq1(32, c.r, c.k, float64(c.r)*0.00875)
		if eq1 > got || eq1 < 0.8*got {
			t.Errorf("R=%d K=%d: Eq. 1 %.4g vs table formula %.4g", c.r, c.k, eq1, got)
		}
	}
}

// The Monte-Carlo estimate of breakpoint waste stays under Eq. 1 (a bound)
// and matches the first-order estimate (1-P)P^K (N_t-R)/(2R) within a
// stated tolerance: 15%, and 4 standard errors.
func TestEstimateKRingWasteAgainstEq1(t *testing.T) {
	cases := []struct {
		r, k  int
		nodes int
	}{
		{4, 2, 1 << 20},
		{4, 3, 1 << 23},
		{8, 2, 1 << 18},
		{8, 3, 1 << 21},
		{8, 4, 1 << 23},
	}
	for _, c := range cases {
		ps := float64(c.r) * 0.00875
		est, err := EstimateKRingWaste(WasteSim{Nodes: c.nodes, K: c.k, GPUsPerNode: c.r, TP: 32, NodeFailProb: ps, Trials: 4, Seed: 42})
		if err != nil {
			t.Fatal(err)
		}
		bound := WasteBoundEq1(32, c.r, c.k, ps)
		if est.BreakWasteRatio > bound {
			t.Errorf("R=%d K=%d: estimate %.3g above the Eq. 1 bound %.3g", c.r, c.k, est.BreakWasteRatio, bound)
		}
		first := FirstOrderBreakWaste(32, c.r, c.k, ps)
		diff := math.Abs(est.BreakWasteRatio - first)
		if diff > 0.15*first || diff > 4*est.StdErr+0.05*first {
			t.Errorf("R=%d K=%d: estimate %.4g ± %.2g, first order %.4g (%.0f breakpoints)", c.r, c.k, est.BreakWasteRatio, est.StdErr, first, est.Breakpoints)
		}
		if math.Abs(est.FailedRatio-ps) > 0.05*ps {
			t.Errorf("R=%d K=%d: failed ratio %.4g, want %.4g", c.r, c.k, est.FailedRatio, ps)
		}
	}
}

// The estimator agrees with PlaceTPGroups on the same line, and a seed
// fixes the result.
func TestEstimateKRingWasteDeterministic(t *testing.T) {
	s := WasteSim{Nodes: 5000, K: 2, GPUsPerNode: 4, TP: 16, NodeFailProb: 0.2, Trials: 3, Seed: 7}
	a, err := EstimateKRingWaste(s)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := EstimateKRingWaste(s)
	if a != b {
		t.Fatalf("same seed, different estimates: %+v %+v", a, b)
	}
	s.Seed = 8
	if c, _ := EstimateKRingWaste(s); c == a {
		t.Fatalf("different seeds, same estimate")
	}
	// No failures: the only waste is the line's own fragmentation.
	z, _ := EstimateKRingWaste(WasteSim{Nodes: 1001, K: 2, GPUsPerNode: 4, TP: 16, Trials: 1})
	if z.BreakWasteRatio != 0 || z.Breakpoints != 0 || z.WasteRatio != float64(1001%4*4)/float64(1001*4) {
		t.Fatalf("no failures: %+v", z)
	}
	// Everything failed: nothing healthy, nothing wasted.
	all, _ := EstimateKRingWaste(WasteSim{Nodes: 100, K: 2, GPUsPerNode: 4, TP: 16, NodeFailProb: 1, Trials: 1})
	if all.FailedRatio != 1 || all.WasteRatio != 0 {
		t.Fatalf("all failed: %+v", all)
	}
	for _, bad := range []WasteSim{
		{Nodes: 0, K: 1, GPUsPerNode: 4, TP: 16},
		{Nodes: 10, K: 1, GPUsPerNode: 4, TP: 6},
		{Nodes: 10, K: 1, GPUsPerNode: 4, TP: 16, NodeFailProb: 1.5},
		{Nodes: 10, K: 1, GPUsPerNode: 4, TP: 16, NodeFailProb: math.NaN()},
		{Nodes: 1 << 30, K: 1, GPUsPerNode: 4, TP: 16, Trials: 100},
	} {
		if _, err := EstimateKRingWaste(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// The simulator's walk over a line gives Algorithm 2's waste for the same
// failures.
func TestLineWasteMatchesPlacement(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := 0; trial < 300; trial++ {
		n, k, m := 1+rng.IntN(200), 1+rng.IntN(3), 1+rng.IntN(4)
		faults := randomFaults(rng, n, k, rng.Float64()*0.6, false)
		failed := make([]bool, n)
		for _, f := range faults {
			failed[f] = true
		}
		wasted, healthy, breaks, nf := lineWaste(n, k, m, func(pos int) int {
			g := 0
			for pos+g < n && !failed[pos+g] {
				g++
			}
			return g
		})
		p, _ := PlaceTPGroups(n, k, 4, 4*m, faults)
		segs, _ := KHopSegments(n, k, faults)
		if 4*wasted != p.WastedGPUs || healthy != n-len(faults) || nf != len(faults) || breaks != max(len(segs)-1, 0) {
			t.Fatalf("n=%d k=%d m=%d faults %v: walk (%d,%d,%d,%d), placement waste %d, %d segments", n, k, m, faults, wasted, healthy, breaks, nf, p.WastedGPUs, len(segs))
		}
	}
}

func TestSwitchHBDWaste(t *testing.T) {
	// InfinitePOD sec. 1: two HBDs of 32 GPUs with one failure each waste
	// 30 GPUs for TP-16; one HBD of 64 wastes 14.
	if got := 2 * SwitchHBDWaste(32, 1, 16) * 32; math.Abs(got-30) > 1e-9 {
		t.Errorf("2 x 32: %g", got)
	}
	if got := SwitchHBDWaste(64, 2, 16) * 64; math.Abs(got-14) > 1e-9 {
		t.Errorf("64: %g", got)
	}
	// NVL-36 running TP-16: >= 11%.
	if got := SwitchHBDWaste(36, 0, 16); got < 0.11 {
		t.Errorf("NVL-36 TP-16: %g", got)
	}
	if SwitchHBDWaste(0, 0, 16) != 0 || SwitchHBDWaste(8, 9, 4) != 0 {
		t.Error("bad sizes not 0")
	}
	if got := NodeFailProb(0.00875, 8); math.Abs(got-0.0679) > 1e-3 {
		t.Errorf("node fail prob %g (notes: about 7%% for 8-GPU machines)", got)
	}
}
