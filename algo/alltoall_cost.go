package algo

import (
	"math"

	"github.com/occl/occl/topo"
)

// PredictRoute returns the model's time for running route on the byte
// matrix (bytes[s][d] from rank s to rank d).
func (m *Model) PredictRoute(route *Route, bytes [][]int) float64 {
	total := 0.0
	for k := 0; k < route.Phases; k++ {
		flows := route.Flows(k, bytes)
		if len(flows) == 0 {
			continue
		}
		step := make([]flow, 0, len(flows))
		for pair, b := range flows {
			step = append(step, flow{pair[0], pair[1], float64(b)})
		}
		total += m.stepTime(step)
	}
	return total
}

// predictPairwise is the pairwise exchange's time on the byte matrix.
func (m *Model) predictPairwise(bytes [][]int) float64 {
	n := len(bytes)
	total := 0.0
	for s := 1; s < n; s++ {
		var step []flow
		for r := 0; r < n; r++ {
			if b := bytes[r][(r+s)%n]; b > 0 {
				step = append(step, flow{r, (r + s) % n, float64(b)})
			}
		}
		if len(step) > 0 {
			total += m.stepTime(step)
		}
	}
	return total
}

// AllToAllRoute returns the route of all-to-all schedule a on the byte
// matrix, or nil if a is not a routed schedule or does not fit the
// topology (no grid coordinates for AlgoXY, a domain missing a rail for
// AlgoRailForward, no circuits for AlgoDelegated): the schedule's
// Impl.Route from the table.
func (m *Model) AllToAllRoute(a Algorithm, bytes [][]int) *Route {
	im := implOf(OpAllToAllV, a)
	if im == nil || im.Route == nil {
		return nil
	}
	return im.Route(m.t, bytes)
}

// predictMatrix predicts an all-to-all implementation on the byte matrix,
// with its route (nil if unrouted).
func (m *Model) predictMatrix(im *Impl, bytes [][]int) (float64, *Route, bool) {
	if len(bytes) != len(m.t.Ranks) {
		return 0, nil, false
	}
	switch {
	case im.Route != nil:
		r := im.Route(m.t, bytes)
		if r == nil {
			return 0, nil, false
		}
		return m.PredictRoute(r, bytes), r, true
	case im.MatrixCost != nil:
		return im.MatrixCost(m, bytes), nil, true
	}
	return 0, nil, false
}

// PredictAllToAll returns the model's time for all-to-all schedule a on
// the byte matrix, and false if a does not apply.
func (m *Model) PredictAllToAll(a Algorithm, bytes [][]int) (float64, bool) {
	im := implOf(OpAllToAllV, a)
	if im == nil {
		return 0, false
	}
	t, _, ok := m.predictMatrix(im, bytes)
	return t, ok
}

// ChooseAllToAll returns the all-to-all schedule with the lowest predicted
// time on the byte matrix, its route (nil for an unrouted schedule such as
// the pairwise exchange) and the time. The first all-to-all schedule of
// the table (the pairwise exchange) is the default: a schedule that cannot
// carry the traffic (a flow without a path) is never chosen while another
// can.
func (m *Model) ChooseAllToAll(bytes [][]int) (Algorithm, *Route, float64) {
	best, bestT := AlgoAuto, math.Inf(1)
	var bestR *Route
	for _, s := range schedules {
		im := s.Impl(OpAllToAllV)
		if im == nil {
			continue
		}
		t, r, ok := m.predictMatrix(im, bytes)
		if best == AlgoAuto {
			best = s.Algorithm
			if ok {
				bestR, bestT = r, t
			}
			continue
		}
		if ok && t < bestT {
			best, bestR, bestT = s.Algorithm, r, t
		}
	}
	return best, bestR, bestT
}

// ChooseRoute returns the route of an all-to-all of the byte matrix: the
// forced schedule's (AlgoAuto: none) if it has a route that fits, else
// ChooseAllToAll's; nil for an unrouted schedule.
func (m *Model) ChooseRoute(bytes [][]int, forced Algorithm) *Route {
	if forced != AlgoAuto {
		if r := m.AllToAllRoute(forced, bytes); r != nil {
			return r
		}
	}
	_, r, _ := m.ChooseAllToAll(bytes)
	return r
}

// UniformBytes returns the byte matrix of an all-to-all of n ranks with
// block bytes between every pair.
func UniformBytes(n, block int) [][]int {
	out := make([][]int, n)
	for i := range out {
		out[i] = make([]int, n)
		for j := range out[i] {
			out[i][j] = block
		}
	}
	return out
}

// Topology returns the topology the model describes.
func (m *Model) Topology() *topo.Topology { return m.t }
