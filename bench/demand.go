package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// Demand is the shape of a skewed all-to-all: Weights[s][d] is the share
// of the exchange that rank s sends to rank d, relative to the others.
type Demand struct {
	Name    string
	Weights [][]float64
}

// ParseDemand parses occl-bench's -skew value for n ranks:
//
//	uniform     every pair the same (the plain all-to-all)
//	zipf:S      every rank sends rank d a share proportional to
//	            1/(d+1)^S: the experts of the first ranks are the most
//	            popular, as an MoE gate favours a few experts
//	FILE        a JSON file holding an n by n matrix of non-negative
//	            weights ([[...], ...])
func ParseDemand(spec string, n int) (*Demand, error) {
	if n < 1 {
		return nil, fmt.Errorf("demand for %d ranks", n)
	}
	d := &Demand{Name: spec, Weights: make([][]float64, n)}
	for i := range d.Weights {
		d.Weights[i] = make([]float64, n)
	}
	switch {
	case spec == "" || spec == "uniform":
		for i := range d.Weights {
			for j := range d.Weights[i] {
				d.Weights[i][j] = 1
			}
		}
		d.Name = "uniform"
	case strings.HasPrefix(spec, "zipf:"):
		s, err := strconv.ParseFloat(strings.TrimPrefix(spec, "zipf:"), 64)
		if err != nil || s < 0 || math.IsInf(s, 0) {
			return nil, fmt.Errorf("skew %q: want zipf:S with S >= 0", spec)
		}
		for i := range d.Weights {
			for j := 0; j < n; j++ {
				d.Weights[i][j] = 1 / math.Pow(float64(j+1), s)
			}
		}
	default:
		b, err := os.ReadFile(spec)
		if err != nil {
			return nil, fmt.Errorf("skew %q: not uniform, zipf:S or a readable matrix file: %w", spec, err)
		}
		var m [][]float64
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("skew matrix %s: %w", spec, err)
		}
		if len(m) != n {
			return nil, fmt.Errorf("skew matrix %s has %d rows for %d ranks", spec, len(m), n)
		}
		for i, row := range m {
			if len(row) != n {
				return nil, fmt.Errorf("skew matrix %s: row %d has %d entries for %d ranks", spec, i, len(row), n)
			}
			for j, w := range row {
				if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
					return nil, fmt.Errorf("skew matrix %s: entry %d,%d is %v", spec, i, j, w)
				}
			}
			copy(d.Weights[i], row)
		}
	}
	total := 0.0
	for _, row := range d.Weights {
		for _, w := range row {
			total += w
		}
	}
	if total <= 0 {
		return nil, fmt.Errorf("skew %q: all weights are zero", spec)
	}
	return d, nil
}

// Counts spreads n*n*per elements (what a uniform all-to-all of per
// elements per pair moves) over the pairs in proportion to the weights,
// rounding down.
func (d *Demand) Counts(per int) [][]int {
	n := len(d.Weights)
	total := 0.0
	for _, row := range d.Weights {
		for _, w := range row {
			total += w
		}
	}
	out := make([][]int, n)
	for i, row := range d.Weights {
		out[i] = make([]int, n)
		for j, w := range row {
			out[i][j] = int(w / total * float64(n*n*per))
		}
	}
	return out
}

// Bytes returns Counts in bytes for elements of es bytes.
func (d *Demand) Bytes(per, es int) [][]int {
	out := d.Counts(per)
	for _, row := range out {
		for j := range row {
			row[j] *= es
		}
	}
	return out
}
