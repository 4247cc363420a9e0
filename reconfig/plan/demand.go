// Server-level demand (mFabric Algorithm 1, line 5, "calculate_server_demand",
// and sec. 5.2 step 1).
//
// Steps: (1) sum an expert- or rank-level all-to-all matrix into a directed
// server-to-server matrix S through the maps from row and column index to
// server (AggregateDemand); (2) add TX and RX, S[i][j] + S[j][i], into the
// upper triangle, dropping the diagonal, which is traffic inside a server
// (Undirected) — the paper provisions the two directions of a circuit
// together. ServerDemand does both for a square matrix.

package plan

import (
	"errors"
	"fmt"
	"math"
)

// ErrDemand is wrapped by every error about a malformed demand matrix.
var ErrDemand = errors.New("plan: bad demand")

// checkValue rejects a demand entry that is negative, NaN or infinite.
func checkValue(v float64, i, j int) error {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%w: entry %d,%d is %v", ErrDemand, i, j, v)
	}
	return nil
}

// checkSquare checks that m is an n by n matrix of finite, non-negative
// entries and returns n.
func checkSquare(m [][]float64) (int, error) {
	n := len(m)
	for i, row := range m {
		if len(row) != n {
			return 0, fmt.Errorf("%w: row %d has %d entries, want %d", ErrDemand, i, len(row), n)
		}
		for j, v := range row {
			if err := checkValue(v, i, j); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// AggregateDemand sums an rows by cols demand matrix m (bytes from row
// index to column index: rank to rank, or source rank to expert) into a
// directed servers by servers matrix: S[a][b] is the sum of m[r][c] over
// rowServer[r] = a and colServer[c] = b. The diagonal of S is traffic that
// stays inside a server; planners and the completion-time model ignore it.
func AggregateDemand(m [][]float64, rowServer, colServer []int, servers int) ([][]float64, error) {
	if servers < 0 {
		return nil, fmt.Errorf("%w: %d servers", ErrDemand, servers)
	}
	if len(m) != len(rowServer) {
		return nil, fmt.Errorf("%w: %d rows, %d row servers", ErrDemand, len(m), len(rowServer))
	}
	for _, maps := range [][]int{rowServer, colServer} {
		for k, s := range maps {
			if s < 0 || s >= servers {
				return nil, fmt.Errorf("%w: index %d on server %d of %d", ErrDemand, k, s, servers)
			}
		}
	}
	out := newMatrix(servers)
	for r, row := range m {
		if len(row) != len(colServer) {
			return nil, fmt.Errorf("%w: row %d has %d entries, %d column servers", ErrDemand, r, len(row), len(colServer))
		}
		a := out[rowServer[r]]
		for c, v := range row {
			if err := checkValue(v, r, c); err != nil {
				return nil, err
			}
			a[colServer[c]] += v
		}
	}
	return out, nil
}

// Undirected returns the upper-triangular pair demand of a directed server
// matrix s: D[i][j] = s[i][j] + s[j][i] for i < j, zero on and below the
// diagonal (TX and RX of a pair added, as Algorithm 1 provisions both
// directions of a circuit together).
func Undirected(s [][]float64) ([][]float64, error) {
	n, err := checkSquare(s)
	if err != nil {
		return nil, err
	}
	out := newMatrix(n)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			out[i][j] = s[i][j] + s[j][i]
			if math.IsInf(out[i][j], 0) {
				return nil, fmt.Errorf("%w: pair %d,%d overflows", ErrDemand, i, j)
			}
		}
	}
	return out, nil
}

// checkPairs checks that m is square with finite, non-negative entries
// whose pair sums m[i][j] + m[j][i] are finite, and returns its size.
func checkPairs(m [][]float64) (int, error) {
	n, err := checkSquare(m)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if math.IsInf(m[i][j]+m[j][i], 0) {
				return 0, fmt.Errorf("%w: pair %d,%d overflows", ErrDemand, i, j)
			}
		}
	}
	return n, nil
}

// ServerDemand is Algorithm 1's calculate_server_demand: it sums a square
// expert- or rank-level matrix e into servers by servers through server
// (index to server) and returns the upper-triangular pair demand
// (Undirected of AggregateDemand).
func ServerDemand(e [][]float64, server []int, servers int) ([][]float64, error) {
	s, err := AggregateDemand(e, server, server, servers)
	if err != nil {
		return nil, err
	}
	return Undirected(s)
}

// UniformPorts returns n copies of alpha: every server with alpha optical
// ports, the paper's optical degree.
func UniformPorts(n, alpha int) []int {
	out := make([]int, max(n, 0))
	for i := range out {
		out[i] = alpha
	}
	return out
}

func newMatrix(n int) [][]float64 {
	flat := make([]float64, n*n)
	out := make([][]float64, n)
	for i := range out {
		out[i] = flat[i*n : (i+1)*n : (i+1)*n]
	}
	return out
}

func newCounts(n int) [][]int {
	flat := make([]int, n*n)
	out := make([][]int, n)
	for i := range out {
		out[i] = flat[i*n : (i+1)*n : (i+1)*n]
	}
	return out
}
