package plan

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// gateSim draws the expert loads of two consecutive MoE layers from a
// token-level gate, not from the linear model Transition fits: every token
// has a hidden state drawn from a mixture of topics whose weights drift
// from iteration to iteration (expert popularity changes as the data
// does); each layer routes a token to the top-k experts of a linear gate
// on its state, the second layer on the state after a residual update, and
// the gates' biases drift too (as load balancing moves them). The loads are
// counts of tokens; their relation is neither linear nor stationary.
type gateSim struct {
	r                *rand.Rand
	dim, experts, k  int
	centres          [][]float64 // topic centres
	logw             []float64   // log topic weights, a random walk
	w1, w2           [][]float64 // gates: experts x dim
	b1, b2           []float64   // gate biases, random walks
	tokens           int
	drift, biasDrift float64
}

func newGateSim(seed uint64, experts, tokens int, drift float64) *gateSim {
	r := rand.New(rand.NewPCG(seed, 7))
	g := &gateSim{r: r, dim: 16, experts: experts, k: 2, tokens: tokens, drift: drift, biasDrift: drift / 3}
	gauss := func(n int, s float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = s * r.NormFloat64()
		}
		return v
	}
	for range 6 {
		g.centres = append(g.centres, gauss(g.dim, 1))
	}
	g.logw = gauss(len(g.centres), 1)
	for range experts {
		g.w1 = append(g.w1, gauss(g.dim, 1))
		g.w2 = append(g.w2, gauss(g.dim, 1))
	}
	g.b1, g.b2 = gauss(experts, 0.3), gauss(experts, 0.3)
	return g
}

// step advances the drift and returns one iteration's loads of the two
// layers (tokens x top-k each).
func (g *gateSim) step() (x, y []float64) {
	for i := range g.logw {
		g.logw[i] += g.drift * g.r.NormFloat64()
	}
	for i := range g.b1 {
		g.b1[i] += g.biasDrift * g.r.NormFloat64()
		g.b2[i] += g.biasDrift * g.r.NormFloat64()
	}
	cum := make([]float64, len(g.logw))
	total := 0.0
	for i, lw := range g.logw {
		total += math.Exp(lw)
		cum[i] = total
	}
	x, y = make([]float64, g.experts), make([]float64, g.experts)
	h := make([]float64, g.dim)
	for range g.tokens {
		topic := sort.SearchFloat64s(cum, g.r.Float64()*total)
		topic = min(topic, len(cum)-1)
		for d := range h {
			h[d] = g.centres[topic][d] + 0.6*g.r.NormFloat64()
		}
		g.route(x, g.w1, g.b1, h)
		for d := range h {
			h[d] += 0.4 * g.r.NormFloat64() // the layer's residual update
		}
		g.route(y, g.w2, g.b2, h)
	}
	return x, y
}

// route adds one token to the loads of its top-k experts under gate w, b.
func (g *gateSim) route(load []float64, w [][]float64, b, h []float64) {
	var best [4]int
	var score [4]float64
	n := 0
	for e := range g.experts {
		s := b[e]
		for d, v := range h {
			s += w[e][d] * v
		}
		// Insert e into the k best so far, highest score first.
		i := min(n, g.k)
		for i > 0 && score[i-1] < s {
			if i < g.k {
				best[i], score[i] = best[i-1], score[i-1]
			}
			i--
		}
		if i < g.k {
			best[i], score[i] = e, s
			n = min(n+1, g.k)
		}
	}
	for _, e := range best[:g.k] {
		load[e]++
	}
}

// TestTransitionOnGateTraces scores the predictors on traces of the
// token-level gate with drifting popularity, which Transition's model did
// not generate. With the current iteration's previous-layer loads in hand,
// Transition must beat every predictor that has only history or the
// previous layer (its error below that of the previous layer, the uniform
// guess and both moving averages), on slow and on fast drift.
func TestTransitionOnGateTraces(t *testing.T) {
	const (
		experts = 8
		tokens  = 4096
		iters   = 120
		warm    = 16
		layer   = 3
	)
	// The traces run no goroutine for the race detector to check, and
	// under it even one per drift took 22 s of CI's race run.
	if raceEnabled {
		t.Skip("no goroutine for the race detector to check; runs without it")
	}
	const seeds = 3
	for _, drift := range []float64{0.05, 0.3} {
		for seed := uint64(1); seed <= seeds; seed++ {
			g := newGateSim(seed, experts, tokens, drift)
			tr := &Transition{Window: 16}
			ema := &MovingAverage{Beta: 0.3}
			win := &MovingAverage{Window: 8}
			sum := map[string]float64{}
			n := 0
			for it := range iters {
				x, y := g.step()
				total := float64(tokens * g.k)
				if it >= warm {
					n++
					p, err := tr.Predict(layer, x, total)
					if err != nil {
						t.Fatal(err)
					}
					sum["transition"] += relErr(p, y)
					sum["previous"] += relErr(x, y)
					uni := make([]float64, experts)
					for i := range uni {
						uni[i] = total / experts
					}
					sum["uniform"] += relErr(uni, y)
					for name, a := range map[string]*MovingAverage{"ema": ema, "window": win} {
						m, err := a.PredictMatrix(layer, nil)
						if err != nil {
							t.Fatal(err)
						}
						sum[name] += relErr(m[0], y)
					}
				}
				if err := tr.Observe(layer, it, x, y); err != nil {
					t.Fatal(err)
				}
				for _, a := range []*MovingAverage{ema, win} {
					if err := a.ObserveMatrix(layer, it, nil, [][]float64{y}); err != nil {
						t.Fatal(err)
					}
				}
			}
			mean := map[string]float64{}
			for k, v := range sum {
				mean[k] = v / float64(n)
			}
			t.Logf("drift %.2f seed %d: mean L1 error transition %.4f, previous %.4f, uniform %.4f, ema %.4f, window %.4f",
				drift, seed, mean["transition"], mean["previous"], mean["uniform"], mean["ema"], mean["window"])
			for _, base := range []string{"previous", "uniform", "ema", "window"} {
				if !(mean["transition"] < mean[base]) {
					t.Errorf("drift %.2f seed %d: transition error %.4f, %s %.4f", drift, seed, mean["transition"], base, mean[base])
				}
			}
		}
	}
}
