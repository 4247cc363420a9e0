package topo

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// Directed Hamiltonian decomposition of the complete symmetric digraph K*_n
// (RailX: A Flexible, Scalable, and Low-Cost Network Architecture for Hyper-Scale LLM Training Systems; Lemma 3.1 and appendix A.1 of the paper).
//
// RailX needs, for the k nodes of a row, k-1 directed rings (one per rail)
// such that every ordered pair of nodes (A, B) is an arc A -> B of exactly
// one ring: then A's + port meets B's - port on one rail and A's - port
// meets B's + port on another, the two direct links per pair of Lemma
// 3.1. That is a decomposition of K*_k into k-1 directed Hamiltonian
// cycles, which exists for every k except 4 and 6 (Tillson 1980).
//
// Odd n: Walecki's (n-1)/2 undirected cycles (railx_rings.go), each taken in
// both directions: [C0, reverse(C0), C1, reverse(C1), ...].
//
// Even n >= 8: Tillson's construction is long; this file builds the
// decomposition from the odd one instead, with a small search:
//
//  1. let m = n-1 (odd) and D_0..D_{m-2} the directed cycles of K*_m from
//     Walecki; colour every arc of K*_m by the cycle that holds it;
//  2. find a "rainbow" Hamiltonian path P of K*_m that starts at Walecki's
//     middle node and uses exactly one arc of every colour;
//  3. for each arc a -> b of P, of colour j, insert the new node z = n-1
//     into D_j between a and b (a -> z -> b): D_j becomes a Hamiltonian
//     cycle of K*_n; the arc a -> b it lost is on P;
//  4. close P through z: z -> P[0] -> ... -> P[m-1] -> z is the n-1st
//     cycle.
//
// Every arc of K*_n is then used once: arcs of K*_m are on the D_j or on P
// (never both, as each arc of P was removed from its D_j); the arcs into z
// are a -> z for the m-1 arc tails a of P plus P[m-1] -> z (all m nodes
// once), and the arcs out of z likewise. Step 2 is an exact-cover problem
// (each colour once, each node but the first entered once, no cycle),
// solved by depth-first search that always branches on the colour or node
// with the fewest remaining choices, with randomized tie-breaks (a PCG
// source seeded by n, so the result is deterministic) and restarts on a
// growing node budget. For n = 4 and 6 no rainbow path exists and the
// search proves it in a few steps; those sizes are rejected up front with
// Tillson's theorem. The search is fast for even n up to
// MaxDirectedDecomposition = 160, the row of a radix-320 OCS (n = 64 in a
// few milliseconds, every even n <= 128 in under 0.25 s and <= 160 in under
// a second on one core, measured); above that its running time grows to
// seconds, so it is refused. Results are cached per n.

// MaxDirectedDecomposition is the largest even n DirectedHamiltonianCycles
// decomposes (odd n have no limit below maxRingNodes).
const MaxDirectedDecomposition = 160

var directedCache sync.Map // n -> [][]int

// DirectedHamiltonianCycles returns n-1 directed Hamiltonian cycles that
// decompose the complete symmetric digraph K*_n: each cycle lists the
// nodes 0..n-1 in ring order (cycle c has arcs c[t] -> c[t+1] and
// c[n-1] -> c[0]) and every ordered pair of distinct nodes is an arc of
// exactly one cycle. n = 1 gives no cycle and n = 2 the single cycle
// [0 1]. n = 4 and n = 6 have no such decomposition (Tillson) and even
// n > MaxDirectedDecomposition is not supported: both are errors.
func DirectedHamiltonianCycles(n int) ([][]int, error) {
	switch {
	case n < 1:
		return nil, fmt.Errorf("directed Hamiltonian decomposition of K*_%d: n must be positive", n)
	case n == 1:
		return [][]int{}, nil
	case n == 2:
		return [][]int{{0, 1}}, nil
	case n == 4 || n == 6:
		return nil, fmt.Errorf("directed Hamiltonian decomposition of K*_%d: none exists (Tillson: K*_n splits into n-1 directed Hamiltonian cycles for every n except 4 and 6); use an odd number of nodes, 2, or at least 8", n)
	case n > maxRingNodes:
		return nil, fmt.Errorf("directed Hamiltonian decomposition of K*_%d: at most %d nodes", n, maxRingNodes)
	case n%2 == 0 && n > MaxDirectedDecomposition:
		return nil, fmt.Errorf("directed Hamiltonian decomposition of K*_%d: even n above %d is not supported (the construction searches; odd n has no limit)", n, MaxDirectedDecomposition)
	}
	if c, ok := directedCache.Load(n); ok {
		return copyCycles(c.([][]int)), nil
	}
	var cycles [][]int
	if n%2 == 1 {
		und, err := WaleckiCycles(n)
		if err != nil {
			return nil, err
		}
		cycles = bothDirections(und)
	} else {
		var err error
		if cycles, err = evenDecomposition(n); err != nil {
			return nil, err
		}
	}
	if err := VerifyDecomposition(n, cycles, true); err != nil {
		return nil, fmt.Errorf("directed Hamiltonian decomposition of K*_%d: internal error: %w", n, err)
	}
	directedCache.Store(n, cycles)
	return copyCycles(cycles), nil
}

// bothDirections returns [C0, reverse(C0), C1, reverse(C1), ...], every
// reverse starting at the same node as its cycle.
func bothDirections(und [][]int) [][]int {
	out := make([][]int, 0, 2*len(und))
	for _, c := range und {
		out = append(out, append([]int(nil), c...), reverseCycle(c))
	}
	return out
}

// reverseCycle returns the cycle c run backwards, from the same start.
func reverseCycle(c []int) []int {
	r := make([]int, len(c))
	if len(c) == 0 {
		return r
	}
	r[0] = c[0]
	for i := 1; i < len(c); i++ {
		r[i] = c[len(c)-i]
	}
	return r
}

func copyCycles(c [][]int) [][]int {
	out := make([][]int, len(c))
	for i := range c {
		out[i] = append([]int(nil), c[i]...)
	}
	return out
}

// evenDecomposition builds the decomposition of K*_n, n even >= 8, from
// the odd one of K*_{n-1} and a rainbow path (steps 1-4 above).
func evenDecomposition(n int) ([][]int, error) {
	m := n - 1
	und, err := WaleckiCycles(m)
	if err != nil {
		return nil, err
	}
	q := len(und)
	// Directed cycles D_j: j < q forward, j >= q reversed (this order of
	// colours keeps the search's tie-breaks as measured).
	d := make([][]int, 2*q)
	for i, c := range und {
		d[i] = append([]int(nil), c...)
		d[i+q] = reverseCycle(c)
	}
	path, err := rainbowPath(m, d, m-1, uint64(n))
	if err != nil {
		return nil, fmt.Errorf("directed Hamiltonian decomposition of K*_%d: %w", n, err)
	}
	// col[a*m+b] = cycle holding arc a -> b.
	col := make([]int, m*m)
	for j, c := range d {
		for t := range c {
			col[c[t]*m+c[(t+1)%m]] = j
		}
	}
	z := m // the new node n-1
	out := make([][]int, 0, n-1)
	out = append(out, d...)
	for t := 0; t+1 < len(path); t++ {
		a, b := path[t], path[t+1]
		j := col[a*m+b]
		c := out[j]
		nc := make([]int, 0, n)
		for i, v := range c {
			nc = append(nc, v)
			if v == a && c[(i+1)%m] == b {
				nc = append(nc, z)
			}
		}
		out[j] = nc
	}
	out = append(out, append([]int{z}, path...))
	return out, nil
}

// rainbowSearch is the state of the exact-cover search for a rainbow
// Hamiltonian path (see the file comment).
type rainbowSearch struct {
	m, colours int
	start      int
	next       []int // next[c*m+x]: successor of x on cycle c
	col        []int // col[x*m+y]: cycle of arc x -> y
	succ, pred []int
	used       []bool
	fragStart  []int // for a fragment's end: its start
	fragEnd    []int // for a fragment's start: its end
	order      []int // tie-break order of colours and nodes
	rng        *rand.Rand
	nodes      int
	limit      int
}

// rainbowPath returns a Hamiltonian path of K*_m that starts at start and
// uses exactly one arc of each cycle of d (m-1 directed Hamiltonian cycles
// of K*_m that decompose it), or an error if the search budget runs out.
func rainbowPath(m int, d [][]int, start int, seed uint64) ([]int, error) {
	s := &rainbowSearch{m: m, colours: len(d), start: start}
	if s.colours != m-1 {
		return nil, fmt.Errorf("rainbow path: %d cycles for %d nodes", s.colours, m)
	}
	s.next = make([]int, s.colours*m)
	s.col = make([]int, m*m)
	for c, cyc := range d {
		for t := range cyc {
			a, b := cyc[t], cyc[(t+1)%m]
			s.next[c*m+a] = b
			s.col[a*m+b] = c
		}
	}
	s.succ = make([]int, m)
	s.pred = make([]int, m)
	s.fragStart = make([]int, m)
	s.fragEnd = make([]int, m)
	s.used = make([]bool, s.colours)
	s.rng = rand.New(rand.NewPCG(seed, 0x0cc1))
	const budget = 4 << 20 // total search nodes before giving up
	limit := 4 * m
	for total := 0; total < budget; limit += limit / 10 {
		for i := 0; i < m; i++ {
			s.succ[i], s.pred[i], s.fragStart[i], s.fragEnd[i] = -1, -1, i, i
		}
		for i := range s.used {
			s.used[i] = false
		}
		s.order = s.rng.Perm(m)
		s.nodes, s.limit = 0, limit
		ok := s.solve(0)
		total += s.nodes
		if !ok && s.nodes <= s.limit {
			// The search ran to the end of the tree: there is none.
			return nil, fmt.Errorf("K*_%d has no rainbow Hamiltonian path for this decomposition", m)
		}
		if ok {
			path := make([]int, 0, m)
			for x := start; x >= 0 && len(path) < m; x = s.succ[x] {
				path = append(path, x)
			}
			if len(path) != m {
				return nil, fmt.Errorf("rainbow path: internal error: path of %d nodes", len(path))
			}
			return path, nil
		}
	}
	return nil, fmt.Errorf("no rainbow path of K*_%d found within %d search steps", m, budget)
}

// feasible reports whether arc x -> y may be added.
func (s *rainbowSearch) feasible(x, y int) bool {
	return x != y && y != s.start && s.succ[x] < 0 && s.pred[y] < 0 && s.fragStart[x] != y
}

func (s *rainbowSearch) add(x, y int) {
	s.succ[x], s.pred[y] = y, x
	s.used[s.col[x*s.m+y]] = true
	a, b := s.fragStart[x], s.fragEnd[y]
	s.fragEnd[a], s.fragStart[b] = b, a
}

func (s *rainbowSearch) remove(x, y int) {
	a, b := s.fragStart[x], s.fragEnd[y]
	// Undo the join: a..x and y..b become two fragments again.
	s.fragEnd[a], s.fragStart[x] = x, a
	s.fragEnd[y], s.fragStart[b] = b, y
	s.succ[x], s.pred[y] = -1, -1
	s.used[s.col[x*s.m+y]] = false
}

// solve places the remaining arcs; arcs is the number placed so far.
func (s *rainbowSearch) solve(arcs int) bool {
	s.nodes++
	if arcs == s.m-1 {
		return true
	}
	if s.nodes > s.limit {
		return false
	}
	m := s.m
	// Pick the colour or the node (to be entered) with the fewest
	// feasible arcs.
	best, bestIsColour, bestCnt := -1, false, m+1
	for _, c := range s.order {
		if c >= s.colours || s.used[c] {
			continue
		}
		cnt := 0
		for x := 0; x < m && cnt < bestCnt; x++ {
			if s.succ[x] < 0 && s.feasible(x, s.next[c*m+x]) {
				cnt++
			}
		}
		if cnt < bestCnt {
			best, bestIsColour, bestCnt = c, true, cnt
			if cnt <= 1 {
				break
			}
		}
	}
	if bestCnt > 1 {
		for _, y := range s.order {
			if y == s.start || s.pred[y] >= 0 {
				continue
			}
			cnt := 0
			for x := 0; x < m && cnt < bestCnt; x++ {
				if s.feasible(x, y) && !s.used[s.col[x*m+y]] {
					cnt++
				}
			}
			if cnt < bestCnt {
				best, bestIsColour, bestCnt = y, false, cnt
				if cnt <= 1 {
					break
				}
			}
		}
	}
	if bestCnt == 0 {
		return false
	}
	off := s.rng.IntN(m)
	for i := 0; i < m; i++ {
		x := (i + off) % m
		var y int
		if bestIsColour {
			y = s.next[best*m+x]
			if !s.feasible(x, y) {
				continue
			}
		} else {
			y = best
			if !s.feasible(x, y) || s.used[s.col[x*m+y]] {
				continue
			}
		}
		s.add(x, y)
		if s.solve(arcs + 1) {
			return true
		}
		s.remove(x, y)
		if s.nodes > s.limit {
			return false
		}
	}
	return false
}
