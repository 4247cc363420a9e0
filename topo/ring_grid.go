package topo

import "fmt"

// A Hamiltonian ring through the nodes of a 2D torus (or any richer grid:
// a RailX HyperX links every pair of a row, so it contains the torus).
// RailX ("RailX: A Flexible, Scalable, and Low-Cost Network Architecture for Hyper-Scale LLM Training Systems") runs flat ring collectives over the whole grid;
// this ring visits every node once and steps only between torus
// neighbours, wrap-around links included. Construction:
//
//  1. pick lines of length a along one dimension, b lines along the
//     other; traverse line j completely, starting at position s_j and
//     moving in direction d_j (+1 or -1, with wrap-around), so it ends at
//     s_j - d_j;
//  2. step to line j+1 at the same position: s_{j+1} = s_j - d_j;
//  3. after b lines the walk is at s_0 - sum(d_j) on line b-1, and the
//     wrap-around step to line 0 closes the ring iff sum(d_j) = 0 mod a.
//     With b even, alternate +1 and -1; with b and a odd and a <= b, use
//     (a+b)/2 lines of +1 and (b-a)/2 of -1 (sum = a). One of the two
//     orientations (lines along X or along Y) always qualifies.
//
// A grid with one row or one column is its own ring, line order.

// GridHamiltonianCycle returns an order of the nodes of an x by y torus
// (node (i, j) has id j*x + i) in which consecutive nodes, the last and
// the first included, are torus neighbours: they differ by one, modulo the
// size, in exactly one coordinate.
func GridHamiltonianCycle(x, y int) ([]int, error) {
	if x < 1 || y < 1 {
		return nil, fmt.Errorf("grid ring: %dx%d grid: want positive sizes", x, y)
	}
	n, err := checkProduct("grid ring", x, y)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, n)
	if x == 1 || y == 1 {
		for i := 0; i < n; i++ {
			out = append(out, i)
		}
		return out, nil
	}
	closes := func(a, b int) bool { return b%2 == 0 || (a%2 == 1 && a <= b) }
	rows := closes(x, y) // lines are rows (along X)
	a, b := x, y
	if !rows {
		a, b = y, x
	}
	plus := b // lines with d = +1 when b is odd
	if b%2 == 1 {
		plus = (a + b) / 2
	}
	s := 0
	for j := 0; j < b; j++ {
		d := 1
		if (b%2 == 0 && j%2 == 1) || (b%2 == 1 && j >= plus) {
			d = -1
		}
		for t := 0; t < a; t++ {
			p := ((s+t*d)%a + a) % a
			if rows {
				out = append(out, j*x+p)
			} else {
				out = append(out, p*x+j)
			}
		}
		s = ((s-d)%a + a) % a
	}
	return out, nil
}
