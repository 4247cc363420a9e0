// Tests of demand prediction (predict.go, solve.go; mFabric App. B):
// recovery of a known column-stochastic P from noisy synthetic loads, the
// transition estimate against the previous-layer, uniform and moving-average
// baselines, fallbacks and edge cases.

package plan

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
)

// randomStochastic returns an m x n column-stochastic matrix whose columns
// are skewed (a few likely destinations), as token routing between layers.
func randomStochastic(r *rand.Rand, m, n int) [][]float64 {
	p := newRect(m, n)
	for c := 0; c < n; c++ {
		sum := 0.0
		for j := 0; j < m; j++ {
			v := math.Pow(r.Float64(), 4)
			p[j][c] = v
			sum += v
		}
		for j := 0; j < m; j++ {
			p[j][c] /= sum
		}
	}
	return p
}

// randomLoad returns expert loads (tokens) of n experts: Zipf popularity
// over a random order, varying from iteration to iteration.
func randomLoad(r *rand.Rand, n int, tokens float64) []float64 {
	x := make([]float64, n)
	order := r.Perm(n)
	sum := 0.0
	for i := range x {
		x[i] = math.Exp(0.5*r.NormFloat64()) / float64(order[i]+1)
		sum += x[i]
	}
	for i := range x {
		x[i] *= tokens / sum
	}
	return x
}

func apply(p [][]float64, x []float64) []float64 {
	y := make([]float64, len(p))
	for j, row := range p {
		for i, v := range row {
			y[j] += v * x[i]
		}
	}
	return y
}

// noisy returns y with each entry perturbed by relative Gaussian noise
// (clipped at 0), as sampling a finite batch of tokens does.
func noisy(r *rand.Rand, y []float64, rel float64) []float64 {
	out := make([]float64, len(y))
	for i, v := range y {
		out[i] = max(0, v*(1+rel*r.NormFloat64()))
	}
	return out
}

// relErr is the L1 error of a predicted load relative to the actual load.
func relErr(pred, actual []float64) float64 {
	num, den := 0.0, 0.0
	for i := range actual {
		num += math.Abs(pred[i] - actual[i])
		den += actual[i]
	}
	return num / den
}

func TestTransitionRecoversP(t *testing.T) {
	for _, shape := range [][2]int{{8, 8}, {6, 10}, {16, 16}} {
		m, n := shape[0], shape[1]
		r := rand.New(rand.NewPCG(uint64(m), uint64(n)))
		truth := randomStochastic(r, m, n)
		tr := &Transition{Window: 4 * n}
		const tokens = 65536
		for it := 0; it < 4*n; it++ {
			x := randomLoad(r, n, tokens)
			if err := tr.Observe(3, it, x, noisy(r, apply(truth, x), 0.01)); err != nil {
				t.Fatal(err)
			}
		}
		p, err := tr.Estimate(3)
		if err != nil {
			t.Fatal(err)
		}
		worst, mean := 0.0, 0.0
		for c := 0; c < n; c++ {
			sum := 0.0
			for j := 0; j < m; j++ {
				if p[j][c] < 0 {
					t.Fatalf("P[%d][%d] = %g < 0", j, c, p[j][c])
				}
				sum += p[j][c]
				e := math.Abs(p[j][c] - truth[j][c])
				worst = max(worst, e)
				mean += e / float64(m*n)
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Fatalf("column %d sums to %g", c, sum)
			}
		}
		t.Logf("%dx%d: |P - P_true| max %.4f, mean %.5f", m, n, worst, mean)
		if worst > 0.05 || mean > 0.01 {
			t.Errorf("%dx%d: recovery error max %.4f mean %.5f, want <= 0.05 and <= 0.01", m, n, worst, mean)
		}
	}
}

func TestTransitionBeatsBaselines(t *testing.T) {
	const (
		experts = 8
		iters   = 120
		tokens  = 8192 * 2 // tokens x top-2
		layer   = 5
	)
	r := rand.New(rand.NewPCG(42, 1))
	truth := randomStochastic(r, experts, experts)
	tr := &Transition{Window: 16}
	ma := &MovingAverage{Beta: 0.3}
	win := &MovingAverage{Window: 8}
	errs := map[string][]float64{}
	hits := map[string]int{}
	trials := 0
	for it := 0; it < iters; it++ {
		x := randomLoad(r, experts, tokens)
		y := noisy(r, apply(truth, x), 0.05)
		if it >= 16 { // score once the window is full
			trials++
			pred := map[string][]float64{}
			var err error
			if pred["transition"], err = tr.Predict(layer, x, tokens); err != nil {
				t.Fatal(err)
			}
			prev, _ := PreviousLayer{}.PredictMatrix(layer, [][]float64{x})
			pred["previous"] = prev[0]
			uni := make([]float64, experts)
			for i := range uni {
				uni[i] = float64(tokens) / experts
			}
			pred["uniform"] = uni
			for name, a := range map[string]*MovingAverage{"ema": ma, "window": win} {
				m, err := a.PredictMatrix(layer, nil)
				if err != nil {
					t.Fatal(err)
				}
				pred[name] = m[0]
			}
			for name, p := range pred {
				errs[name] = append(errs[name], relErr(p, y))
				if top2(p) == top2(y) {
					hits[name]++
				}
			}
		}
		if err := tr.Observe(layer, it, x, y); err != nil {
			t.Fatal(err)
		}
		for _, a := range []*MovingAverage{ma, win} {
			if err := a.ObserveMatrix(layer, it, nil, [][]float64{y}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mean := map[string]float64{}
	for name, e := range errs {
		for _, v := range e {
			mean[name] += v / float64(len(e))
		}
		t.Logf("%-10s mean L1 error %.4f, top-2 experts right %.0f%%", name, mean[name], 100*float64(hits[name])/float64(trials))
	}
	for _, base := range []string{"previous", "uniform", "ema", "window"} {
		if !(mean["transition"] < 0.5*mean[base]) {
			t.Errorf("transition error %.4f, %s %.4f: want less than half", mean["transition"], base, mean[base])
		}
	}
}

// top2 returns the indices of the two largest entries, as a set.
func top2(v []float64) [2]int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] > v[idx[b]] })
	a, b := idx[0], idx[1]
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

func TestTransitionMatrixAndEdges(t *testing.T) {
	tr := &Transition{}
	prev := [][]float64{{4, 0, 0}, {0, 2, 2}}
	// No history: the previous layer, unchanged.
	if _, err := tr.Estimate(0); !errors.Is(err, ErrNoHistory) {
		t.Fatalf("Estimate without history: %v", err)
	}
	got, err := tr.PredictMatrix(0, prev)
	if err != nil || got[0][0] != 4 || got[1][2] != 2 {
		t.Fatalf("PredictMatrix without history = %v, %v", got, err)
	}
	y, err := tr.Predict(0, []float64{1, 3}, 8)
	if err != nil || y[0] != 2 || y[1] != 6 {
		t.Fatalf("Predict without history = %v, %v", y, err)
	}
	// A permutation between layers is learnt from a single observation
	// per expert and applied source by source.
	perm := func(x []float64) []float64 { return []float64{x[2], x[0], x[1]} }
	r := rand.New(rand.NewPCG(3, 3))
	for it := 0; it < 8; it++ {
		x := randomLoad(r, 3, 100)
		if err := tr.ObserveMatrix(0, it, [][]float64{x}, [][]float64{perm(x)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err = tr.PredictMatrix(0, prev)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float64{perm(prev[0]), perm(prev[1])}
	for i := range want {
		for j := range want[i] {
			if math.Abs(got[i][j]-want[i][j]) > 0.05 {
				t.Fatalf("PredictMatrix = %v, want %v", got, want)
			}
		}
	}
	// Zero loads: an all-zero x predicts the total spread evenly; zero
	// totals default to sum x; zero entries are fine.
	if y, err := tr.Predict(0, []float64{0, 0, 0}, 9); err != nil || y[0] != 3 || y[2] != 3 {
		t.Fatalf("Predict of zero load = %v, %v", y, err)
	}
	if y, err := tr.Predict(0, []float64{0, 0, 0}, 0); err != nil || y[0] != 0 {
		t.Fatalf("Predict of zero load and total = %v, %v", y, err)
	}
	if y, err := tr.Predict(0, []float64{0, 5, 0}, 0); err != nil || math.Abs(y[2]-5) > 0.1 {
		t.Fatalf("Predict(0,5,0) = %v, %v", y, err)
	}
	if err := tr.Observe(1, 0, []float64{0, 0}, []float64{1, 1}); !errors.Is(err, ErrDemand) {
		t.Fatalf("Observe of zero load: %v", err)
	}
	if err := tr.ObserveMatrix(1, 0, [][]float64{{0, 0}, {0, 0}}, [][]float64{{1, 0}, {0, 1}}); !errors.Is(err, ErrDemand) {
		t.Fatalf("ObserveMatrix with zero rows only: %v", err)
	}
	// A matrix with zero rows (a source that sent nothing) is fine.
	if err := tr.ObserveMatrix(1, 0, [][]float64{{0, 0}, {1, 1}}, [][]float64{{0, 0}, {2, 0}}); err != nil {
		t.Fatal(err)
	}
	bad := []func() error{
		func() error { return tr.Observe(0, 3, []float64{1, 1, 1}, []float64{1, 1, 1}) }, // stale
		func() error { return tr.Observe(0, 9, []float64{1, 1}, []float64{1, 1, 1}) },    // length
		func() error { return tr.Observe(0, 9, []float64{1, math.NaN(), 1}, []float64{1, 1, 1}) },
		func() error { return tr.Observe(0, 9, []float64{1, -1, 1}, []float64{1, 1, 1}) },
		func() error { return tr.Observe(0, 9, nil, []float64{1}) },
		func() error { _, err := tr.Predict(0, []float64{1, 1}, 0); return err },
		func() error { _, err := tr.Predict(0, []float64{1, 1, 1}, -1); return err },
		func() error { _, err := tr.Predict(0, []float64{1, 1, 1}, math.Inf(1)); return err },
		func() error { _, err := tr.PredictMatrix(0, [][]float64{{1, 1}}); return err },
		func() error { _, err := tr.PredictMatrix(0, [][]float64{{1, 1, 1}, {1}}); return err },
		func() error { _, err := tr.PredictMatrix(0, nil); return err },
		func() error { return tr.ObserveMatrix(2, 0, [][]float64{{1}}, nil) },
	}
	for i, f := range bad {
		if err := f(); err == nil {
			t.Errorf("bad input %d accepted", i)
		}
	}
}

func TestMovingAverage(t *testing.T) {
	ema := &MovingAverage{Beta: 0.5}
	win := &MovingAverage{Window: 2}
	prev := [][]float64{{7}}
	for _, a := range []*MovingAverage{ema, win} {
		if m, err := a.PredictMatrix(0, prev); err != nil || m[0][0] != 7 {
			t.Fatalf("no history: %v %v", m, err)
		}
		for it, v := range []float64{4, 8, 2} {
			if err := a.ObserveMatrix(0, it, nil, [][]float64{{v}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// EMA: 4 -> 6 -> 4; window of 2: (8 + 2) / 2 = 5.
	if m, _ := ema.PredictMatrix(0, prev); m[0][0] != 4 {
		t.Fatalf("EMA = %v, want 4", m)
	}
	if m, _ := win.PredictMatrix(0, prev); m[0][0] != 5 {
		t.Fatalf("window = %v, want 5", m)
	}
	if err := ema.ObserveMatrix(0, 2, nil, [][]float64{{1}}); err == nil {
		t.Error("stale iteration accepted")
	}
	if err := ema.ObserveMatrix(0, 5, nil, [][]float64{{1, 2}}); !errors.Is(err, ErrDemand) {
		t.Errorf("shape change: %v", err)
	}
	if err := ema.ObserveMatrix(0, 5, nil, [][]float64{{-1}}); !errors.Is(err, ErrDemand) {
		t.Errorf("negative: %v", err)
	}
	if _, err := (PreviousLayer{}).PredictMatrix(0, [][]float64{{math.NaN()}}); !errors.Is(err, ErrDemand) {
		t.Errorf("PreviousLayer NaN: %v", err)
	}
	if err := (PreviousLayer{}).ObserveMatrix(0, 0, nil, [][]float64{{1}}); err != nil {
		t.Error(err)
	}
}

func TestPredictorsConcurrent(t *testing.T) {
	tr := &Transition{Window: 4}
	ma := &MovingAverage{}
	var wg sync.WaitGroup
	for layer := 0; layer < 4; layer++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(layer), 9))
			for it := 0; it < 20; it++ {
				x := randomLoad(r, 4, 100)
				y := randomLoad(r, 4, 100)
				if err := tr.Observe(layer, it, x, y); err != nil {
					t.Error(err)
				}
				if _, err := tr.Predict(layer, x, 0); err != nil {
					t.Error(err)
				}
				if err := ma.ObserveMatrix(layer, it, nil, [][]float64{y}); err != nil {
					t.Error(err)
				}
				if _, err := ma.PredictMatrix(layer, nil); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

func TestProjectSimplex(t *testing.T) {
	cases := []struct{ in, want []float64 }{
		{[]float64{0.2, 0.3, 0.5}, []float64{0.2, 0.3, 0.5}},
		{[]float64{2, 0, 0}, []float64{1, 0, 0}},
		{[]float64{0.5, 0.5, 0.5, 0.5}, []float64{0.25, 0.25, 0.25, 0.25}},
		{[]float64{1, 1, -5}, []float64{0.5, 0.5, 0}},
	}
	for _, c := range cases {
		v := append([]float64(nil), c.in...)
		projectSimplex(v, make([]float64, len(v)))
		for i := range v {
			if math.Abs(v[i]-c.want[i]) > 1e-12 {
				t.Fatalf("projectSimplex(%v) = %v, want %v", c.in, v, c.want)
			}
		}
	}
}
