// The solver behind Transition (predict.go): a column-stochastic transition
// matrix P fitted by weighted, regularised least squares (mFabric App. B,
// eq. 1, which the paper solves with SLSQP from scipy).
//
// Problem. Samples (x_i, y_i), i = 1..k, are expert-load distributions of
// two consecutive layers (non-negative, summing to 1), with weights w_i
// (summing to 1). Find P (m x n, m = len(y), n = len(x)) minimising
//
//	f(P) = 1/2 sum_i w_i |y_i - P x_i|^2 + lambda/2 |P - U|_F^2
//
// subject to P >= 0 and every column of P summing to 1 (a probability
// distribution over this layer's experts for a token that went to expert c
// of the previous layer); U is the matrix of 1/m. The ridge term, lambda =
// ridge * trace(A) / n with A = sum_i w_i x_i x_i^T (the mean eigenvalue of
// A times ridge), makes the problem strictly convex, so P is unique even
// with fewer samples than experts; on the simplex it equals a penalty on
// |P|_F^2 and pulls the columns of experts the window never loaded towards
// the uniform column.
//
// Method. With Q = P^T (row c of Q is column c of P) and Bt = sum_i w_i
// x_i y_i^T, the gradient is (A + lambda I) Q - Bt - lambda U^T.
//
//  1. Warm start: the unconstrained minimiser, Q0 = (A + lambda I)^-1
//     (Bt + lambda U^T) from the normal equations by Cholesky
//     factorisation, each row projected onto the probability simplex (or
//     U^T if the factorisation fails numerically).
//  2. FISTA (accelerated projected gradient, Beck and Teboulle 2009) with
//     step 1/L, L = max row sum of A + lambda, an upper bound of the
//     largest eigenvalue of A + lambda I because A is non-negative and
//     symmetric; momentum restarts whenever the step goes uphill
//     (O'Donoghue and Candes 2015). Projection onto the simplex is the
//     sort-based algorithm of Held, Wolfe and Crowder (1974) / Duchi et al.
//     (2008). It stops when no entry moves by more than tol, or after
//     maxIter steps.
//
// Each step costs O(n^2 m) with the Gram matrix A, or O(k n m) from the
// samples directly; the cheaper one is used. The objective is convex and
// the feasible set a product of simplices, so this converges to the
// constrained optimum SLSQP would find.

package plan

import (
	"math"
	"sort"
)

// fitTransition solves the problem above; xs and ys are the samples (each
// normalised), w their weights (normalised). It returns P as m rows of n.
func fitTransition(xs, ys [][]float64, w []float64, ridge float64, maxIter int, tol float64) [][]float64 {
	n, m, k := len(xs[0]), len(ys[0]), len(xs)
	a := make([][]float64, n)
	for c := range a {
		a[c] = make([]float64, n)
	}
	bt := make([][]float64, n) // Bt + lambda U^T, later
	for c := range bt {
		bt[c] = make([]float64, m)
	}
	for i := range xs {
		x, y := xs[i], ys[i]
		for c, xc := range x {
			if xc == 0 {
				continue
			}
			wc := w[i] * xc
			for d, xd := range x {
				a[c][d] += wc * xd
			}
			for r, yr := range y {
				bt[c][r] += wc * yr
			}
		}
	}
	trace, rowMax := 0.0, 0.0
	for c := range a {
		trace += a[c][c]
		s := 0.0
		for _, v := range a[c] {
			s += v
		}
		rowMax = max(rowMax, s)
	}
	lambda := ridge * trace / float64(n)
	u := 1 / float64(m)
	for c := range bt {
		for r := range bt[c] {
			bt[c][r] += lambda * u
		}
	}
	L := rowMax + lambda

	// 1. Warm start from the normal equations.
	q := make([][]float64, n)
	for c := range q {
		q[c] = make([]float64, m)
	}
	if chol := cholesky(a, lambda); chol != nil {
		col := make([]float64, n)
		for r := 0; r < m; r++ {
			for c := range col {
				col[c] = bt[c][r]
			}
			cholSolve(chol, col)
			for c := range col {
				q[c][r] = col[c]
			}
		}
	} else {
		for c := range q {
			for r := range q[c] {
				q[c][r] = u
			}
		}
	}
	scratch := make([]float64, m)
	for c := range q {
		projectSimplex(q[c], scratch)
	}

	// 2. FISTA with adaptive restart.
	useGram := n <= 2*k
	z := cloneRows(q)
	prev := cloneRows(q)
	g := make([][]float64, n)
	for c := range g {
		g[c] = make([]float64, m)
	}
	res := make([]float64, m)
	tau := 1.0
	for it := 0; it < maxIter; it++ {
		// g = (A + lambda I) z - (Bt + lambda U^T)
		for c := range g {
			gc := g[c]
			for r := range gc {
				gc[r] = lambda*z[c][r] - bt[c][r]
			}
			if useGram {
				for d, acd := range a[c] {
					if acd == 0 {
						continue
					}
					zd := z[d]
					for r := range gc {
						gc[r] += acd * zd[r]
					}
				}
			}
		}
		if !useGram {
			for i, x := range xs {
				for r := range res {
					res[r] = 0
				}
				for c, xc := range x {
					if xc == 0 {
						continue
					}
					for r, v := range z[c] {
						res[r] += xc * v
					}
				}
				for c, xc := range x {
					if xc == 0 {
						continue
					}
					s := w[i] * xc
					for r, v := range res {
						g[c][r] += s * v
					}
				}
			}
		}
		// q_next = proj(z - g/L), kept in prev's storage.
		q, prev = prev, q
		moved, uphill := 0.0, 0.0
		for c := range q {
			for r := range q[c] {
				q[c][r] = z[c][r] - g[c][r]/L
			}
			projectSimplex(q[c], scratch)
			for r := range q[c] {
				step := q[c][r] - prev[c][r]
				moved = max(moved, math.Abs(step))
				uphill += g[c][r] * step
			}
		}
		if moved <= tol {
			break
		}
		if uphill > 0 {
			tau = 1 // restart the momentum
		}
		next := (1 + math.Sqrt(1+4*tau*tau)) / 2
		beta := (tau - 1) / next
		tau = next
		for c := range z {
			for r := range z[c] {
				z[c][r] = q[c][r] + beta*(q[c][r]-prev[c][r])
			}
		}
	}
	p := make([][]float64, m)
	for r := range p {
		p[r] = make([]float64, n)
		for c := range q {
			p[r][c] = q[c][r]
		}
	}
	return p
}

// cholesky returns the lower-triangular factor of a + shift*I, or nil if
// it is not numerically positive definite.
func cholesky(a [][]float64, shift float64) [][]float64 {
	n := len(a)
	l := make([][]float64, n)
	for i := range l {
		l[i] = make([]float64, i+1)
		for j := 0; j <= i; j++ {
			s := a[i][j]
			if i == j {
				s += shift
			}
			for k := 0; k < j; k++ {
				s -= l[i][k] * l[j][k]
			}
			if i == j {
				if !(s > 1e-300) {
					return nil
				}
				l[i][i] = math.Sqrt(s)
			} else {
				l[i][j] = s / l[j][j]
			}
		}
	}
	return l
}

// cholSolve solves L L^T v = b in place.
func cholSolve(l [][]float64, b []float64) {
	n := len(l)
	for i := 0; i < n; i++ {
		s := b[i]
		for k := 0; k < i; k++ {
			s -= l[i][k] * b[k]
		}
		b[i] = s / l[i][i]
	}
	for i := n - 1; i >= 0; i-- {
		s := b[i]
		for k := i + 1; k < n; k++ {
			s -= l[k][i] * b[k]
		}
		b[i] = s / l[i][i]
	}
}

// projectSimplex replaces v with its Euclidean projection onto the
// probability simplex {p >= 0, sum p = 1}; scratch has len(v) entries.
func projectSimplex(v, scratch []float64) {
	s := scratch[:len(v)]
	copy(s, v)
	sort.Sort(sort.Reverse(sort.Float64Slice(s)))
	cum, theta := 0.0, 0.0
	for j, x := range s {
		cum += x
		t := (cum - 1) / float64(j+1)
		if x-t > 0 {
			theta = t
		}
	}
	for i, x := range v {
		v[i] = max(x-theta, 0)
	}
}

func cloneRows(m [][]float64) [][]float64 {
	out := make([][]float64, len(m))
	for i, r := range m {
		out[i] = append([]float64(nil), r...)
	}
	return out
}
