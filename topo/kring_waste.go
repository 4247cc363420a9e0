package topo

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// GPU waste of InfinitePOD K-hop rings (the InfinitePOD paper;
// the paper's appendix C, Eq. 1 and Table 7) and of switch-based HB
// domains (sec. 2, fragmentation formula).
//
// A breakpoint is a run of K or more consecutive failed nodes: the line
// splits there and the TP groups of the segment before it may end with a
// partial group whose healthy GPUs are wasted (kring_tp.go). Appendix C
// bounds the expected waste ratio by Eq. 1,
//
//	E_WR <= 2 (N_t - R) P_s^K,
//
// with N_t the TP size in GPUs, R GPUs per node and P_s the probability
// that a node fails. Table 7 lists this bound for a GPU failure rate of
// 0.875% and N_t = 32. Its six entries are exactly (2 N_t - R)(R p)^K,
// with p the GPU failure rate and R p the node failure probability to
// first order (R=4: 7.35%, 0.257%, 9.00e-5; R=8: 27.4%, 1.92%, 0.134%),
// a coefficient slightly above Eq. 1's 2(N_t - R); the R=4, K=4 entry is
// printed as 9.00x10^-4, an exponent off by one whether read as a ratio
// or a percentage. WasteBoundEq1 and WasteBoundTable7 give both.
//
// The bound is loose: each breakpoint wastes on average (m-1)/2 of the
// m = N_t/R nodes of a group, and breakpoints occur at (1-P_s) P_s^K per
// node, so the expected extra waste ratio is about
// (1-P_s) P_s^K (N_t - R) / (2R) (FirstOrderBreakWaste), 4R times below
// Eq. 1. EstimateKRingWaste measures it by Monte Carlo: it draws failures
// (a seeded math/rand/v2 PCG source, deterministic for a seed), places TP
// groups with Algorithm 2 and counts the wasted healthy GPUs, skipping
// from failure to failure with geometric gaps so that the cost grows with
// the number of failures, not nodes.
//
// For switch-based HB domains of fixed size the waste is fragmentation
// alone: ((HBD_size - N_fault) mod TP) / HBD_size (SwitchHBDWaste). A
// K-hop line without breakpoints is one HB domain of the whole line, and
// PlaceTPGroups wastes exactly that.

// WasteBoundEq1 returns the paper's Eq. 1 bound on the expected GPU waste
// ratio of InfinitePOD: 2(N_t - R) P_s^K for TP groups of tp GPUs, R =
// gpusPerNode GPUs per node, K hops and node failure probability
// nodeFail.
func WasteBoundEq1(tp, gpusPerNode, k int, nodeFail float64) float64 {
	return 2 * float64(tp-gpusPerNode) * math.Pow(nodeFail, float64(k))
}

// WasteBoundTable7 returns the value Table 7 of the paper lists for TP
// groups of tp GPUs, R = gpusPerNode GPUs per node, K hops and GPU failure
// rate gpuFail: (2 N_t - R)(R p)^K (see the file comment for how it
// relates to Eq. 1).
func WasteBoundTable7(tp, gpusPerNode, k int, gpuFail float64) float64 {
	return float64(2*tp-gpusPerNode) * math.Pow(float64(gpusPerNode)*gpuFail, float64(k))
}

// NodeFailProb returns the probability that a node of gpusPerNode GPUs has
// a failed GPU (and so fails as a whole) when each GPU fails independently
// with probability gpuFail: 1 - (1 - p)^R.
func NodeFailProb(gpuFail float64, gpusPerNode int) float64 {
	return 1 - math.Pow(1-gpuFail, float64(gpusPerNode))
}

// FirstOrderBreakWaste returns the expected extra waste ratio caused by
// breakpoints, to first order: (1 - P_s) P_s^K (N_t - R) / (2R).
func FirstOrderBreakWaste(tp, gpusPerNode, k int, nodeFail float64) float64 {
	return (1 - nodeFail) * math.Pow(nodeFail, float64(k)) * float64(tp-gpusPerNode) / float64(2*gpusPerNode)
}

// SwitchHBDWaste returns the fragmentation waste ratio of a switch-based
// HB domain of hbdSize GPUs with faultyGPUs failed GPUs running TP groups
// of tp GPUs: ((hbdSize - faultyGPUs) mod tp) / hbdSize. It returns 0 for
// non-positive sizes.
func SwitchHBDWaste(hbdSize, faultyGPUs, tp int) float64 {
	if hbdSize <= 0 || tp <= 0 || faultyGPUs < 0 || faultyGPUs > hbdSize {
		return 0
	}
	return float64((hbdSize-faultyGPUs)%tp) / float64(hbdSize)
}

// WasteSim describes a Monte-Carlo estimate of InfinitePOD GPU waste.
type WasteSim struct {
	// Nodes on the K-hop line, K hops, GPUs per node (R) and TP size
	// (N_t, a multiple of R).
	Nodes       int `json:"nodes"`
	K           int `json:"k"`
	GPUsPerNode int `json:"gpus_per_node"`
	TP          int `json:"tp"`
	// NodeFailProb is P_s, the independent failure probability of a node.
	NodeFailProb float64 `json:"node_fail_prob"`
	// Trials is the number of independent lines drawn (0 means 16).
	Trials int `json:"trials"`
	// Seed seeds the PCG source; equal seeds give equal estimates.
	Seed uint64 `json:"seed"`
}

// WasteEstimate is the result of EstimateKRingWaste, averaged over trials.
type WasteEstimate struct {
	// WasteRatio is wasted healthy GPUs over all GPUs.
	WasteRatio float64 `json:"waste_ratio"`
	// BreakWasteRatio is the part of WasteRatio due to breakpoints: the
	// waste minus that of the same healthy nodes on an unbroken line
	// ((healthy nodes mod m) R). Eq. 1 bounds this part.
	BreakWasteRatio float64 `json:"break_waste_ratio"`
	// StdErr is the standard error of BreakWasteRatio's mean.
	StdErr float64 `json:"std_err"`
	// Breakpoints is the mean number of breakpoints per line.
	Breakpoints float64 `json:"breakpoints"`
	// FailedRatio is the mean fraction of failed nodes.
	FailedRatio float64 `json:"failed_ratio"`
}

// EstimateKRingWaste estimates the GPU waste of Algorithm 2 placement on
// K-hop lines with independent node failures (see the file comment).
func EstimateKRingWaste(s WasteSim) (WasteEstimate, error) {
	var est WasteEstimate
	if s.Nodes < 1 || s.K < 1 {
		return est, fmt.Errorf("waste estimate: %d nodes, K = %d: want positive", s.Nodes, s.K)
	}
	if s.GPUsPerNode < 1 || s.TP < 1 || s.TP%s.GPUsPerNode != 0 {
		return est, fmt.Errorf("waste estimate: TP size %d is not a positive multiple of the %d GPUs per node", s.TP, s.GPUsPerNode)
	}
	m := s.TP / s.GPUsPerNode
	if !(s.NodeFailProb >= 0 && s.NodeFailProb <= 1) {
		return est, fmt.Errorf("waste estimate: node failure probability %g: want 0..1", s.NodeFailProb)
	}
	trials := s.Trials
	if trials == 0 {
		trials = 16
	}
	if trials < 1 || float64(trials)*float64(s.Nodes) > 1<<32 {
		return est, fmt.Errorf("waste estimate: %d trials of %d nodes: want 1..2^32 node draws", s.Trials, s.Nodes)
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x1f1e))
	total := float64(s.Nodes) * float64(s.GPUsPerNode)
	var sum, sumSq float64
	for t := 0; t < trials; t++ {
		wasted, healthy, breaks, failed := simulateLine(rng, s.Nodes, s.K, m, s.NodeFailProb)
		ratio := float64(wasted*s.GPUsPerNode) / total
		extra := float64((wasted-healthy%m)*s.GPUsPerNode) / total
		est.WasteRatio += ratio
		sum += extra
		sumSq += extra * extra
		est.Breakpoints += float64(breaks)
		est.FailedRatio += float64(failed) / float64(s.Nodes)
	}
	n := float64(trials)
	est.WasteRatio /= n
	est.BreakWasteRatio = sum / n
	est.Breakpoints /= n
	est.FailedRatio /= n
	if trials > 1 {
		v := (sumSq - sum*sum/n) / (n - 1)
		est.StdErr = math.Sqrt(math.Max(v, 0) / n)
	}
	return est, nil
}

// simulateLine draws one line of n nodes failing with probability pf and
// returns the wasted healthy nodes of Algorithm 2 with groups of m nodes,
// the healthy nodes, the breakpoints and the failed nodes.
func simulateLine(rng *rand.Rand, n, k, m int, pf float64) (wasted, healthy, breaks, failed int) {
	logKeep := math.Log1p(-pf)
	return lineWaste(n, k, m, func(int) int {
		switch {
		case pf >= 1:
			return 0
		case pf <= 0:
			return n
		}
		// Geometric: P(gap = g) = (1-pf)^g pf.
		g := math.Floor(math.Log(1-rng.Float64()) / logKeep)
		if g > float64(n) {
			return n
		}
		return int(g)
	})
}

// lineWaste walks a line of n nodes where gap(pos) is the number of
// healthy nodes from position pos to the next failure (n or more: none),
// and returns what simulateLine does.
func lineWaste(n, k, m int, gap func(pos int) int) (wasted, healthy, breaks, failed int) {
	comp, run := 0, 0 // healthy nodes of the current segment; failures since
	for pos := 0; pos < n; {
		g := min(gap(pos), n-pos)
		if g > 0 {
			if comp > 0 && run >= k {
				wasted += comp % m
				comp = 0
				breaks++
			}
			comp += g
			healthy += g
			run = 0
			pos += g
		}
		if pos < n {
			run++
			failed++
			pos++
		}
	}
	wasted += comp % m
	return wasted, healthy, breaks, failed
}
