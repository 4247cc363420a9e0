// mFabric Algorithm 1, ReconfigureOCS (sec. 5.2, "Topology Controller"),
// lines 2-14: the greedy circuit planner, as published.
//
// Steps, for a server-level demand D and alpha optical ports per server:
//
//  1. D is made upper triangular by adding TX and RX: the pair demand of
//     i < j is d = D[i][j] + D[j][i] (line 5 and the comment above it).
//  2. C = 0; avail[v] = alpha[v]; T[i][j] = +Inf where d > 0, else 0
//     (lines 2-4).
//  3. Loop (lines 6-14): (i, j) = the pair with the largest T, the
//     bottleneck. If avail[i] > 0 and avail[j] > 0, add a circuit:
//     C[i][j]++, C[j][i]++, avail[i]--, avail[j]--, T[i][j] = d/C[i][j].
//     Otherwise stop.
//
// The paper leaves ties open; here they go to the larger pair demand, then
// to the lower-numbered pair (i, then j), so every pair with no circuit yet
// (all at +Inf) is served heaviest first. The loop also stops when no pair
// has demand, or fewer than two servers have a free port. Since every pair
// without a circuit (+Inf) outranks every pair with one, the loop is run
// as a scan of the pairs sorted by demand (a linear-time radix sort), then
// a binary max-heap keyed by (T, d, -i, -j) over the pairs that have
// circuits: O(N^2 + K log K) for K circuits, instead of a scan of the
// N x N matrix per circuit. A consequence worth knowing: with demand
// between every two servers and fewer ports than peers, no pair gets a
// second circuit, however heavy.
//
// Steps 4-5 of the algorithm (the NIC-level mapping and its NUMA-aware
// permutation) are PortMapping in ports.go.

package plan

import (
	"fmt"
	"math"
	"slices"
)

// MFabric is mFabric's Algorithm 1 (ReconfigureOCS) as published: it
// returns C, the symmetric number of circuits between every two servers,
// for a server-level demand d (bytes; any non-negative square matrix: the
// pair demand of i < j is d[i][j] + d[j][i], so the upper-triangular form
// of ServerDemand and a directed matrix give the same plan) and ports[v]
// optical ports on server v. It serves the bottleneck pair (largest demand
// per circuit, +Inf while a pair with demand has none) one circuit at a
// time and stops at the first bottleneck whose servers have no free port,
// even if other pairs could still get circuits: see MFabricContinue.
func MFabric(d [][]float64, ports []int) ([][]int, error) {
	return greedy(d, ports, false)
}

// pairKey is one server pair with demand, as the planner ranks it.
type pairKey struct {
	i, j int32
	d    float64 // pair demand, TX + RX
	t    float64 // d / circuits, +Inf with no circuit
}

// before says whether pair a is a larger bottleneck than pair b: larger T,
// then larger demand, then the lower-numbered pair.
func before(a, b *pairKey) bool {
	if a.t != b.t {
		return a.t > b.t
	}
	if a.d != b.d {
		return a.d > b.d
	}
	if a.i != b.i {
		return a.i < b.i
	}
	return a.j < b.j
}

// pairHeap is a binary max-heap of pairs under before.
type pairHeap []pairKey

func (h pairHeap) down(k int) {
	n := len(h)
	for {
		l := 2*k + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && before(&h[r], &h[l]) {
			m = r
		}
		if !before(&h[m], &h[k]) {
			return
		}
		h[k], h[m] = h[m], h[k]
		k = m
	}
}

func (h pairHeap) init() {
	for k := len(h)/2 - 1; k >= 0; k-- {
		h.down(k)
	}
}

// checkPorts checks a per-server port count vector for n servers.
func checkPorts(ports []int, n int) error {
	if len(ports) != n {
		return fmt.Errorf("%w: %d port counts for %d servers", ErrDemand, len(ports), n)
	}
	for v, p := range ports {
		if p < 0 {
			return fmt.Errorf("%w: server %d has %d ports", ErrDemand, v, p)
		}
	}
	return nil
}

// pairsOf validates d and ports and returns the pairs with demand, at
// T = +Inf, sorted as the bottleneck order ranks them: larger demand
// first, then the lower-numbered pair.
func pairsOf(d [][]float64, ports []int) ([]pairKey, int, error) {
	n, err := checkPairs(d)
	if err != nil {
		return nil, 0, err
	}
	if err := checkPorts(ports, n); err != nil {
		return nil, 0, err
	}
	out := make([]pairKey, 0, n*(n-1)/2)
	inf := math.Inf(1)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if v := d[i][j] + d[j][i]; v > 0 {
				out = append(out, pairKey{i: int32(i), j: int32(j), d: v, t: inf})
			}
		}
	}
	return sortByDemand(out), n, nil
}

// sortByDemand sorts pairs generated in (i, j) order by decreasing demand,
// keeping (i, j) order among equal demands: a stable least-significant-
// digit radix sort on the bits of the demand (positive floats order as
// their bit patterns), eight passes of a byte, a pass skipped when every
// key has the same byte there. O(P).
func sortByDemand(ps []pairKey) []pairKey {
	tmp := make([]pairKey, len(ps))
	for shift := uint(0); shift < 64; shift += 8 {
		var count [257]int
		for k := range ps {
			b := (^math.Float64bits(ps[k].d) >> shift) & 0xff
			count[b+1]++
		}
		if slices.Contains(count[1:], len(ps)) {
			continue
		}
		for b := 1; b < 257; b++ {
			count[b] += count[b-1]
		}
		for k := range ps {
			b := (^math.Float64bits(ps[k].d) >> shift) & 0xff
			tmp[count[b]] = ps[k]
			count[b]++
		}
		ps, tmp = tmp, ps
	}
	return ps
}

// greedy is Algorithm 1; with cont it skips a bottleneck that cannot be
// served (one of its servers is out of ports, for good: ports are never
// freed) instead of stopping, and goes on with the next largest T. Both
// take the same steps up to the point where Algorithm 1 stops.
//
// A pair with no circuit has T = +Inf, above every pair with one, so the
// loop first serves the pairs without circuits in demand order (phase 1,
// a scan of the sorted pairs) and only when none is left turns to the
// pairs with circuits, whose finite T = d/C changes (phase 2, a heap of at
// most sum(ports)/2 pairs). This is the loop of Algorithm 1 step for step.
func greedy(d [][]float64, ports []int, cont bool) ([][]int, error) {
	pairs, n, err := pairsOf(d, ports)
	if err != nil {
		return nil, err
	}
	avail := append([]int(nil), ports...)
	open := 0 // servers with a free port
	total := 0
	for _, a := range avail {
		if a > 0 {
			open++
		}
		total += a
	}
	c := newCounts(n)
	add := func(i, j int) {
		c[i][j]++
		c[j][i]++
		for _, v := range [2]int{i, j} {
			avail[v]--
			if avail[v] == 0 {
				open--
			}
		}
	}
	// Phase 1: pairs at T = +Inf, heaviest first.
	h := make(pairHeap, 0, min(len(pairs), total/2))
	for _, p := range pairs {
		if open < 2 {
			return c, nil // nothing can be served any more
		}
		i, j := int(p.i), int(p.j)
		if avail[i] == 0 || avail[j] == 0 {
			if !cont {
				return c, nil // Algorithm 1, line 13
			}
			continue
		}
		add(i, j)
		p.t = p.d
		h = append(h, p)
	}
	// Phase 2: every pair with demand has a circuit (or, continuing, is
	// out of ports for good); the bottleneck is the largest d/C.
	h.init()
	for len(h) > 0 && open >= 2 {
		top := &h[0]
		i, j := int(top.i), int(top.j)
		if avail[i] == 0 || avail[j] == 0 {
			if !cont {
				break // Algorithm 1, line 13
			}
			last := len(h) - 1
			h[0] = h[last]
			h = h[:last]
			h.down(0)
			continue
		}
		add(i, j)
		top.t = top.d / float64(c[i][j])
		h.down(0)
	}
	return c, nil
}
