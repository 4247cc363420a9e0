// Planners that do better than Algorithm 1 as published, and the choice
// between them.
//
// MFabricContinue (an improvement on the mFabric paper's Algorithm 1):
// Algorithm 1's loop with line 13 changed from "stop" to
// "drop this pair and go on". Steps: (1)-(2) as Algorithm 1; (3) take the
// pair with the largest T; if both servers have a free port add a circuit
// and update T = d/C, else remove the pair for good (ports are never
// freed, so it can never be served) and repeat; stop when no pair is left
// or fewer than two servers have a free port. Up to the step where
// Algorithm 1 stops both take identical steps, after it the variant only
// adds circuits, so its completion time (completion.go, OCS >= EPS) is
// never longer. Under the paper's pure max D/C the two are always equal:
// Algorithm 1 stops at the bottleneck, which nothing can serve later.
//
// PlaceMatching adapts topo.PlaceCircuits (matching rounds ranked by the
// time each circuit saves, counting the packet network). Compare runs the
// three planners on one demand and scores them with Evaluate; Best keeps
// the fastest.

package plan

import "github.com/occl/occl/topo"

// MFabricContinue is Algorithm 1 that does not stop at a bottleneck it
// cannot serve: it skips pairs with a server out of ports and keeps
// serving the next largest T until no pair with demand can get a circuit.
// Arguments and result are those of MFabric; its plan contains MFabric's
// and its completion time is never longer (see completion.go).
func MFabricContinue(d [][]float64, ports []int) ([][]int, error) {
	return greedy(d, ports, true)
}

// PlaceMatching is topo.PlaceCircuits as a planner of this package: d and
// ports as for MFabric, bw the circuit and packet bandwidths its gains are
// computed with. It returns circuit counts.
func PlaceMatching(d [][]float64, ports []int, bw Bandwidths) ([][]int, error) {
	n, err := checkPairs(d)
	if err != nil {
		return nil, err
	}
	if err := checkPorts(ports, n); err != nil {
		return nil, err
	}
	if err := bw.check(); err != nil {
		return nil, err
	}
	c := newCounts(n)
	for _, p := range topo.PlaceCircuits(d, ports, bw.OCS, bw.EPS) {
		c[p[0]][p[1]]++
		c[p[1]][p[0]]++
	}
	return c, nil
}

// Planner is a named circuit planner: Plan returns symmetric circuit
// counts for a server demand and per-server port counts.
type Planner struct {
	// Name is one of the Name constants for the planners of this package.
	Name string
	// Plan takes a server demand (any non-negative square matrix; pairs
	// count d[i][j] + d[j][i]) and per-server port counts.
	Plan func(d [][]float64, ports []int) ([][]int, error)
}

// Planner names.
const (
	NameMFabric         = "mfabric"
	NameMFabricContinue = "mfabric-continue"
	NameMatching        = "matching"
)

// Candidates returns the planners Compare and Best try, in order of
// preference on a tie: MFabricContinue, PlaceMatching (with bw) and
// MFabric.
func Candidates(bw Bandwidths) []Planner {
	return []Planner{
		{NameMFabricContinue, MFabricContinue},
		{NameMatching, func(d [][]float64, ports []int) ([][]int, error) { return PlaceMatching(d, ports, bw) }},
		{NameMFabric, MFabric},
	}
}

// Result is one planner's plan and its modelled completion time.
type Result struct {
	// Planner is the planner's name.
	Planner string
	// C is its plan: symmetric circuit counts between servers.
	C [][]int
	// Completion is Evaluate of the demand under C.
	Completion Completion
}

// Compare plans the directed server demand s with every planner of
// Candidates(bw) and scores each plan with Evaluate(s, plan, bw).
func Compare(s [][]float64, ports []int, bw Bandwidths) ([]Result, error) {
	if err := bw.check(); err != nil {
		return nil, err
	}
	var out []Result
	for _, p := range Candidates(bw) {
		c, err := p.Plan(s, ports)
		if err != nil {
			return nil, err
		}
		r, err := Evaluate(s, c, bw)
		if err != nil {
			return nil, err
		}
		out = append(out, Result{Planner: p.Name, C: c, Completion: r})
	}
	return out, nil
}

// Best returns the plan of Compare with the shortest completion time, the
// earlier candidate on a tie.
func Best(s [][]float64, ports []int, bw Bandwidths) (Result, error) {
	rs, err := Compare(s, ports, bw)
	if err != nil {
		return Result{}, err
	}
	best := rs[0]
	for _, r := range rs[1:] {
		if r.Completion.Time < best.Completion.Time {
			best = r
		}
	}
	return best, nil
}
