// Demand prediction for the first forward all-to-all of an MoE layer
// (mFabric sec. 5.1 and App. B, "mFabric-Copilot").
//
// The last three all-to-alls of a layer reuse the matrix the gate just
// produced; the first must be planned before the gate runs, from what is
// known then: the previous layer's matrix of this iteration and the
// history. Three predictors, each a MatrixPredictor:
//
//   - PreviousLayer: the previous layer's matrix, unchanged (the paper's
//     "unchanged topology" baseline and its default for layers after the
//     first).
//   - MovingAverage: this layer's own matrices of recent iterations,
//     averaged: the mean of the last Window, or an exponential moving
//     average with weight Beta on the newest (Window = 0).
//   - Transition (mFabric-Copilot): per layer l, a column-stochastic P_l
//     with P_l[j][i] the probability that a token gated to expert i of
//     layer l-1 is gated to expert j of layer l, fitted by weighted least
//     squares over a window of recent iterations (solve.go):
//     1. Observe(l, it, x, y) normalises the expert loads x (layer l-1)
//     and y (layer l) to distributions and keeps the last Window pairs;
//     2. the fit weights them Decay^age (newest 1, then Decay, Decay^2...,
//     normalised), minimises sum_i w_i |y_i - P x_i|^2 + ridge term over
//     column-stochastic P (warm start from the normal equations, then
//     projected FISTA onto the column simplices);
//     3. Predict(l, x, total) = P_l (x / sum x) * total, total defaulting
//     to sum x (every token passes every layer with the same top-k).
//     PredictMatrix predicts each source's row of the matrix on its own,
//     row r = P_l prev[r]: the tokens of a source rank keep their rank from
//     one layer to the next, so their destinations in layer l follow from
//     their experts in layer l-1 through P_l; row sums are preserved.
//     With no history for a layer, Transition falls back to PreviousLayer
//     (P = identity), the paper's default topology for that case.
//
// Matrices are sources (rows) by experts (columns) of a layer, in tokens or
// bytes; the experts of layer l and l-1 may differ in number. Load vectors
// are the column sums (LoadOf). The types are safe for concurrent use.

package plan

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// ErrNoHistory is returned by Transition.Estimate for a layer with no
// observation.
var ErrNoHistory = errors.New("plan: no history for the layer")

// MatrixPredictor predicts the matrix of a layer's first forward
// all-to-all.
type MatrixPredictor interface {
	// ObserveMatrix records layer's actual matrix cur at iteration, with
	// prev the previous layer's matrix of the same iteration. Iterations
	// of a layer must increase.
	ObserveMatrix(layer, iteration int, prev, cur [][]float64) error
	// PredictMatrix predicts layer's matrix in the current iteration from
	// prev, the previous layer's matrix of this iteration.
	PredictMatrix(layer int, prev [][]float64) ([][]float64, error)
}

var (
	_ MatrixPredictor = PreviousLayer{}
	_ MatrixPredictor = (*MovingAverage)(nil)
	_ MatrixPredictor = (*Transition)(nil)
)

// checkMatrix checks that m is rectangular with finite, non-negative
// entries and returns its column count.
func checkMatrix(m [][]float64) (int, error) {
	if len(m) == 0 {
		return 0, fmt.Errorf("%w: empty matrix", ErrDemand)
	}
	cols := len(m[0])
	for i, row := range m {
		if len(row) != cols {
			return 0, fmt.Errorf("%w: row %d has %d entries, row 0 %d", ErrDemand, i, len(row), cols)
		}
		for j, v := range row {
			if err := checkValue(v, i, j); err != nil {
				return 0, err
			}
		}
	}
	return cols, nil
}

// checkVector checks a load vector and returns its sum.
func checkVector(v []float64) (float64, error) {
	if len(v) == 0 {
		return 0, fmt.Errorf("%w: empty load vector", ErrDemand)
	}
	s := 0.0
	for i, x := range v {
		if err := checkValue(x, 0, i); err != nil {
			return 0, err
		}
		s += x
	}
	if math.IsInf(s, 0) {
		return 0, fmt.Errorf("%w: load overflows", ErrDemand)
	}
	return s, nil
}

// LoadOf returns the column sums of m: the load of every expert.
func LoadOf(m [][]float64) ([]float64, error) {
	cols, err := checkMatrix(m)
	if err != nil {
		return nil, err
	}
	out := make([]float64, cols)
	for _, row := range m {
		for j, v := range row {
			out[j] += v
		}
	}
	return out, nil
}

func cloneMatrix(m [][]float64) [][]float64 {
	out := make([][]float64, len(m))
	for i, r := range m {
		out[i] = append([]float64(nil), r...)
	}
	return out
}

// PreviousLayer predicts a layer's matrix as the previous layer's matrix of
// the same iteration, unchanged. It keeps no state.
type PreviousLayer struct{}

// ObserveMatrix checks cur and records nothing.
func (PreviousLayer) ObserveMatrix(layer, iteration int, prev, cur [][]float64) error {
	_, err := checkMatrix(cur)
	return err
}

// PredictMatrix returns a copy of prev.
func (PreviousLayer) PredictMatrix(layer int, prev [][]float64) ([][]float64, error) {
	if _, err := checkMatrix(prev); err != nil {
		return nil, err
	}
	return cloneMatrix(prev), nil
}

// MovingAverage predicts a layer's matrix from its own recent iterations:
// the mean of the last Window observed matrices if Window > 0, else an
// exponential moving average m = Beta*cur + (1-Beta)*m, started at the
// first observation. With no observation of a layer it returns the previous
// layer's matrix (as PreviousLayer). The zero value is an EMA with Beta =
// 0.5.
type MovingAverage struct {
	// Window > 0 selects the windowed mean over that many iterations.
	Window int
	// Beta in (0, 1] is the weight of the newest matrix in the EMA; values
	// outside mean 0.5.
	Beta float64

	mu     sync.Mutex
	layers map[int]*avgState
}

type avgState struct {
	seen bool
	last int
	ema  [][]float64
	hist [][][]float64 // windowed mean: the last Window matrices
}

// ObserveMatrix records cur, layer's matrix at iteration; prev is not used
// and may be nil. cur must have the shape of the layer's earlier matrices.
func (a *MovingAverage) ObserveMatrix(layer, iteration int, prev, cur [][]float64) error {
	cols, err := checkMatrix(cur)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.layers == nil {
		a.layers = map[int]*avgState{}
	}
	st := a.layers[layer]
	if st == nil {
		st = &avgState{}
		a.layers[layer] = st
	}
	if st.seen && iteration <= st.last {
		return fmt.Errorf("plan: layer %d: iteration %d after %d", layer, iteration, st.last)
	}
	if ref := st.ema; ref != nil && (len(ref) != len(cur) || len(ref[0]) != cols) {
		return fmt.Errorf("%w: layer %d: %dx%d matrix after %dx%d", ErrDemand, layer, len(cur), cols, len(ref), len(ref[0]))
	}
	st.seen, st.last = true, iteration
	if a.Window > 0 {
		st.hist = append(st.hist, cloneMatrix(cur))
		if len(st.hist) > a.Window {
			st.hist = st.hist[len(st.hist)-a.Window:]
		}
		st.ema = newRect(len(cur), cols)
		for _, h := range st.hist {
			for i, row := range h {
				for j, v := range row {
					st.ema[i][j] += v / float64(len(st.hist))
				}
			}
		}
		return nil
	}
	if st.ema == nil {
		st.ema = cloneMatrix(cur)
		return nil
	}
	beta := a.Beta
	if !(beta > 0 && beta <= 1) {
		beta = 0.5
	}
	for i, row := range cur {
		for j, v := range row {
			st.ema[i][j] = beta*v + (1-beta)*st.ema[i][j]
		}
	}
	return nil
}

// PredictMatrix returns the layer's average, or a copy of prev if the layer
// has no observation.
func (a *MovingAverage) PredictMatrix(layer int, prev [][]float64) ([][]float64, error) {
	a.mu.Lock()
	st := a.layers[layer]
	var out [][]float64
	if st != nil {
		out = cloneMatrix(st.ema)
	}
	a.mu.Unlock()
	if out != nil {
		return out, nil
	}
	return PreviousLayer{}.PredictMatrix(layer, prev)
}

func newRect(rows, cols int) [][]float64 {
	out := make([][]float64, rows)
	for i := range out {
		out[i] = make([]float64, cols)
	}
	return out
}

// Transition is mFabric-Copilot: per layer, a column-stochastic transition
// matrix from the previous layer's expert loads to this layer's, fitted by
// weighted least squares over the last Window iterations (see predict.go
// and solve.go). Zero fields take their defaults; the zero value is ready
// to use.
type Transition struct {
	// Window is the number of recent iterations fitted (default 8).
	Window int
	// Decay in (0, 1] is the weight of an iteration relative to the next
	// newer one (default 0.8; 1 weighs the window evenly).
	Decay float64
	// Ridge is the regularisation towards uniform columns, relative to
	// the mean eigenvalue of the data's Gram matrix (default 1e-3; values
	// <= 0 mean the default, the fit needs some).
	Ridge float64
	// MaxIter bounds the projected-gradient steps (default 2000); Tol is
	// the largest change of an entry of P at which they stop (default
	// 1e-10).
	MaxIter int
	Tol     float64

	mu     sync.Mutex
	layers map[int]*transState
}

type transState struct {
	seen   bool
	last   int
	xs, ys [][]float64 // normalised loads, oldest first
	p      [][]float64 // fitted P, nil until needed
}

func (t *Transition) params() (window int, decay, ridge float64, maxIter int, tol float64) {
	window, decay, ridge, maxIter, tol = t.Window, t.Decay, t.Ridge, t.MaxIter, t.Tol
	if window <= 0 {
		window = 8
	}
	if !(decay > 0 && decay <= 1) {
		decay = 0.8
	}
	if !(ridge > 0) || math.IsInf(ridge, 0) {
		ridge = 1e-3
	}
	if maxIter <= 0 {
		maxIter = 2000
	}
	if !(tol > 0) {
		tol = 1e-10
	}
	return
}

// Observe records one iteration of a layer: x the expert loads of the
// previous layer, y those of this layer (tokens or bytes per expert; only
// their distributions matter). Iterations of a layer must increase, and x
// and y keep their lengths from one observation to the next. A load that
// sums to zero carries no distribution and is an error.
func (t *Transition) Observe(layer, iteration int, x, y []float64) error {
	sx, err := checkVector(x)
	if err != nil {
		return err
	}
	sy, err := checkVector(y)
	if err != nil {
		return err
	}
	if sx == 0 || sy == 0 {
		return fmt.Errorf("%w: layer %d iteration %d: zero load", ErrDemand, layer, iteration)
	}
	window, _, _, _, _ := t.params()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.layers == nil {
		t.layers = map[int]*transState{}
	}
	st := t.layers[layer]
	if st == nil {
		st = &transState{}
		t.layers[layer] = st
	}
	if st.seen && iteration <= st.last {
		return fmt.Errorf("plan: layer %d: iteration %d after %d", layer, iteration, st.last)
	}
	if len(st.xs) > 0 && (len(st.xs[0]) != len(x) || len(st.ys[0]) != len(y)) {
		return fmt.Errorf("%w: layer %d: loads of %d and %d experts after %d and %d", ErrDemand, layer, len(x), len(y), len(st.xs[0]), len(st.ys[0]))
	}
	st.seen, st.last = true, iteration
	st.xs = append(st.xs, scaled(x, 1/sx))
	st.ys = append(st.ys, scaled(y, 1/sy))
	if len(st.xs) > window {
		st.xs = st.xs[len(st.xs)-window:]
		st.ys = st.ys[len(st.ys)-window:]
	}
	st.p = nil
	return nil
}

func scaled(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}
	return out
}

// ObserveMatrix is Observe with the column sums of prev and cur.
func (t *Transition) ObserveMatrix(layer, iteration int, prev, cur [][]float64) error {
	x, err := LoadOf(prev)
	if err != nil {
		return err
	}
	y, err := LoadOf(cur)
	if err != nil {
		return err
	}
	return t.Observe(layer, iteration, x, y)
}

// estimate returns the layer's fitted P (shared, not to be modified) or
// nil with no history.
func (t *Transition) estimate(layer int) [][]float64 {
	_, decay, ridge, maxIter, tol := t.params()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.layers[layer]
	if st == nil || len(st.xs) == 0 {
		return nil
	}
	if st.p == nil {
		k := len(st.xs)
		w := make([]float64, k)
		sum := 0.0
		for i := range w {
			w[i] = math.Pow(decay, float64(k-1-i))
			sum += w[i]
		}
		for i := range w {
			w[i] /= sum
		}
		st.p = fitTransition(st.xs, st.ys, w, ridge, maxIter, tol)
	}
	return st.p
}

// Estimate returns a copy of layer's transition matrix P: P[j][i] is the
// estimated probability that a token of expert i of the previous layer
// goes to expert j of this one; columns sum to 1. It returns ErrNoHistory
// if the layer has no observation.
func (t *Transition) Estimate(layer int) ([][]float64, error) {
	p := t.estimate(layer)
	if p == nil {
		return nil, fmt.Errorf("%w %d", ErrNoHistory, layer)
	}
	return cloneMatrix(p), nil
}

// Predict returns the predicted expert loads of layer from x, the previous
// layer's loads of this iteration: P (x / sum x) * total, with total = sum
// x if total is 0. With no history it returns x scaled to total (P =
// identity, the previous layer unchanged); if x is all zero, the total
// spread evenly over the experts.
func (t *Transition) Predict(layer int, x []float64, total float64) ([]float64, error) {
	sx, err := checkVector(x)
	if err != nil {
		return nil, err
	}
	if total < 0 || math.IsNaN(total) || math.IsInf(total, 0) {
		return nil, fmt.Errorf("%w: total %v", ErrDemand, total)
	}
	if total == 0 {
		total = sx
	}
	p := t.estimate(layer)
	if p != nil && len(p[0]) != len(x) {
		return nil, fmt.Errorf("%w: layer %d: loads of %d experts, %d observed", ErrDemand, layer, len(x), len(p[0]))
	}
	m := len(x)
	if p != nil {
		m = len(p)
	}
	out := make([]float64, m)
	if sx == 0 {
		for j := range out {
			out[j] = total / float64(m)
		}
		return out, nil
	}
	if p == nil {
		return scaled(x, total/sx), nil
	}
	f := total / sx
	for j, row := range p {
		s := 0.0
		for i, v := range row {
			s += v * x[i]
		}
		out[j] = s * f
	}
	return out, nil
}

// PredictMatrix predicts layer's matrix row by row from the previous
// layer's matrix of this iteration: row r is P prev[r] (the same tokens of
// source r, moved through P), so each source's total is kept. With no
// history it returns a copy of prev.
func (t *Transition) PredictMatrix(layer int, prev [][]float64) ([][]float64, error) {
	cols, err := checkMatrix(prev)
	if err != nil {
		return nil, err
	}
	p := t.estimate(layer)
	if p == nil {
		return cloneMatrix(prev), nil
	}
	if len(p[0]) != cols {
		return nil, fmt.Errorf("%w: layer %d: matrix of %d experts, %d observed", ErrDemand, layer, cols, len(p[0]))
	}
	out := newRect(len(prev), len(p))
	for r, row := range prev {
		for j, pj := range p {
			s := 0.0
			for i, v := range pj {
				s += v * row[i]
			}
			out[r][j] = s
		}
	}
	return out, nil
}
