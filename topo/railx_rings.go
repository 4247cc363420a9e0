package topo

import "fmt"

// Walecki's Hamiltonian decomposition of K_n, n odd (RailX: A Flexible, Scalable, and Low-Cost Network Architecture for Hyper-Scale LLM Training Systems
// "Topology" and the paper's appendix A.1).
//
// RailX joins the k nodes of one row (or column) into an all-to-all
// topology with k-1 rails: each rail is a ring through all k nodes, and the
// rings are chosen so that every pair of nodes is adjacent on some ring
// (Lemma 3.1). For odd k = 2q+1 Walecki's construction gives q undirected
// Hamiltonian cycles that use every edge of K_k exactly once:
//
//  1. number the nodes 0..2q-1 around a circle and put node 2q in the
//     middle;
//  2. for i = 0..q-1 the zig-zag path (i, i-1, i+1, i-2, i+2, ...,
//     i+q-1, i-q) (mod 2q) visits the 2q outer nodes;
//  3. joining both ends of path i to the middle node 2q closes cycle i.
//
// Path i holds exactly the edges {x, y} with x+y = 2i-1 or 2i (mod 2q),
// so the paths are edge-disjoint, and each outer node meets the middle node
// on exactly one cycle. Running every cycle on two rails, once in each
// direction, gives the k-1 directed rings of Lemma 3.1
// (DirectedHamiltonianCycles).

// WaleckiCycles returns Walecki's decomposition of the complete graph K_n
// for odd n: (n-1)/2 Hamiltonian cycles, each a list of the n nodes in
// ring order starting at node n-1, that together use every edge of K_n
// exactly once. For n = 5 they are [4 0 3 1 2] and [4 1 0 2 3]; for n = 1
// there are none. Even n has no such decomposition (every node would need
// odd degree): it is an error.
func WaleckiCycles(n int) ([][]int, error) {
	if n < 1 || n%2 == 0 {
		return nil, fmt.Errorf("Walecki decomposition of K_%d: n must be odd and positive (an even complete graph has odd degree; see DirectedHamiltonianCycles)", n)
	}
	if n > maxRingNodes {
		return nil, fmt.Errorf("Walecki decomposition of K_%d: at most %d nodes", n, maxRingNodes)
	}
	q := (n - 1) / 2
	m := 2 * q
	out := make([][]int, q)
	for i := 0; i < q; i++ {
		c := make([]int, 0, n)
		c = append(c, m, i)
		for t := 1; t <= q; t++ {
			c = append(c, ((i-t)%m+m)%m)
			if t < q {
				c = append(c, (i+t)%m)
			}
		}
		out[i] = c
	}
	return out, nil
}

// maxRingNodes bounds the nodes of one decomposition and of one RailX
// dimension (a RailX row is at most R/2 nodes for an OCS of radix R, 160
// for the largest radix the paper names); it keeps the n^2 checks below
// from being asked for absurd sizes.
const maxRingNodes = 1 << 10

// VerifyDecomposition checks that cycles decompose the complete graph on
// nodes 0..n-1 into Hamiltonian cycles: every cycle visits each node
// exactly once, and every edge (undirected: each unordered pair; directed:
// each ordered pair, a cycle read in list order) is used by exactly one
// cycle. It returns the first violation found.
func VerifyDecomposition(n int, cycles [][]int, directed bool) error {
	if n < 1 || n > maxRingNodes {
		return fmt.Errorf("decomposition of %d nodes: want 1..%d", n, maxRingNodes)
	}
	want := n * (n - 1) // directed arcs
	if !directed {
		want /= 2
	}
	perCycle := n
	if n == 2 && !directed {
		perCycle = 1 // the single edge of K_2
	}
	if n == 1 {
		perCycle = 0
	}
	if len(cycles)*perCycle != want {
		return fmt.Errorf("%d cycles of %d nodes cannot cover the %d edges of the complete graph (want %d cycles)", len(cycles), n, want, want/max(perCycle, 1))
	}
	used := make([]int, n*n) // edge -> 1 + cycle index
	seen := make([]int, n)   // node -> 1 + cycle index
	for ci, c := range cycles {
		if len(c) != n {
			return fmt.Errorf("cycle %d has %d nodes, want %d", ci, len(c), n)
		}
		for _, v := range c {
			if v < 0 || v >= n {
				return fmt.Errorf("cycle %d: node %d out of range", ci, v)
			}
			if seen[v] == ci+1 {
				return fmt.Errorf("cycle %d visits node %d twice", ci, v)
			}
			seen[v] = ci + 1
		}
		steps := n
		if n == 2 && !directed {
			steps = 1
		}
		for t := 0; t < steps && n > 1; t++ {
			a, b := c[t], c[(t+1)%n]
			if !directed && a > b {
				a, b = b, a
			}
			if prev := used[a*n+b]; prev != 0 {
				return fmt.Errorf("edge %d-%d is on cycles %d and %d", a, b, prev-1, ci)
			}
			used[a*n+b] = ci + 1
		}
	}
	return nil
}
