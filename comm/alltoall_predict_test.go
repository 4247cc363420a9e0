package comm_test

import (
	"testing"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

// recovered runs f and returns what it panicked with, nil if it returned.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// TestAllToAllMatrixChecks: PredictAllToAllV and AllToAllAlgorithm take a
// byte matrix of Size() rows of Size() non-negative entries; for any other
// (too few or too many rows, a row too short or too long, a negative
// entry) they answer (0, false) and the pairwise exchange, as they do for
// what the model does not cover, instead of panicking on an index out of
// range. A well-formed matrix is still predicted.
func TestAllToAllMatrixChecks(t *testing.T) {
	bad := []struct {
		name  string
		bytes func(n int) [][]int
	}{
		{"nil", func(int) [][]int { return nil }},
		{"every row short", func(n int) [][]int {
			m := algo.UniformBytes(n, 8)
			for i := range m {
				m[i] = m[i][:n-1]
			}
			return m
		}},
		{"rows of one", func(n int) [][]int {
			m := make([][]int, n)
			for i := range m {
				m[i] = []int{0}
			}
			return m
		}},
		{"a row too few", func(n int) [][]int { return algo.UniformBytes(n, 8)[:n-1] }},
		{"a row too many", func(n int) [][]int { return append(algo.UniformBytes(n, 8), make([]int, n)) }},
		{"last row short", func(n int) [][]int {
			m := algo.UniformBytes(n, 8)
			m[n-1] = m[n-1][:n-1]
			return m
		}},
		{"first row long", func(n int) [][]int {
			m := algo.UniformBytes(n, 8)
			m[0] = append(m[0], 8)
			return m
		}},
		{"negative entry", func(n int) [][]int {
			m := algo.UniformBytes(n, 1<<20)
			m[0][n-1] = -1
			return m
		}},
	}
	// One topology whose model predicts the pairwise exchange, one that
	// routes all-to-alls (AllToAllAlgorithm consults the model there).
	for _, spec := range []string{"hosts=2x1,eps=1GB/s", "hosts=4x2,hbd=8GB/s,eps=1GB/s,rail_only=1"} {
		t.Run(spec, func(t *testing.T) {
			tp, err := topo.FromSpec(spec)
			if err != nil {
				t.Fatal(err)
			}
			comms, err := comm.NewLocal(len(tp.Ranks), comm.WithTopology(tp))
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll(comms)
			c := comms[0]
			n := c.Size()
			if s, ok := c.PredictAllToAllV(algo.AlgoPairwise, algo.UniformBytes(n, 1<<20)); !ok || s <= 0 {
				t.Fatalf("PredictAllToAllV of a uniform matrix: %v, %v; want a positive time", s, ok)
			}
			for _, tc := range bad {
				m := tc.bytes(n)
				for _, a := range []algo.Algorithm{algo.AlgoPairwise, algo.AlgoAuto} {
					var s float64
					var ok bool
					if v := recovered(func() { s, ok = c.PredictAllToAllV(a, m) }); v != nil {
						t.Errorf("%s: PredictAllToAllV(%s) panicked: %v", tc.name, a, v)
					} else if s != 0 || ok {
						t.Errorf("%s: PredictAllToAllV(%s) = %v, %v; want 0, false", tc.name, a, s, ok)
					}
				}
				var got algo.Algorithm
				if v := recovered(func() { got = c.AllToAllAlgorithm(m) }); v != nil {
					t.Errorf("%s: AllToAllAlgorithm panicked: %v", tc.name, v)
				} else if got != algo.AlgoPairwise {
					t.Errorf("%s: AllToAllAlgorithm = %s, want %s", tc.name, got, algo.AlgoPairwise)
				}
			}
		})
	}
}
