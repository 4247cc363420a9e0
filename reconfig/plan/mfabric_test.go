// Tests of Algorithm 1 (mfabric.go) and its continue variant: hand-worked
// plans, and a literal O(N^2)-per-step transcription of the paper's loop
// (naiveGreedy) that the sorted-scan + heap planner must match on random
// demands with ties.

package plan

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// naiveGreedy is Algorithm 1 transcribed literally, with a full scan of
// the T matrix each step: the reference the heap planner must match.
func naiveGreedy(d [][]float64, ports []int, cont bool) [][]int {
	n := len(d)
	c := newCounts(n)
	avail := append([]int(nil), ports...)
	dead := map[[2]int]bool{}
	for {
		bi, bj := -1, -1
		var bt, bd float64
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				v := d[i][j] + d[j][i]
				if v <= 0 || dead[[2]int{i, j}] {
					continue
				}
				t := math.Inf(1)
				if c[i][j] > 0 {
					t = v / float64(c[i][j])
				}
				if bi < 0 || t > bt || (t == bt && v > bd) {
					bi, bj, bt, bd = i, j, t, v
				}
			}
		}
		if bi < 0 {
			return c
		}
		if avail[bi] == 0 || avail[bj] == 0 {
			if !cont {
				return c
			}
			dead[[2]int{bi, bj}] = true
			continue
		}
		c[bi][bj]++
		c[bj][bi]++
		avail[bi]--
		avail[bj]--
	}
}

func counts(n int, pairs ...[3]int) [][]int {
	c := newCounts(n)
	for _, p := range pairs {
		c[p[0]][p[1]] += p[2]
		c[p[1]][p[0]] += p[2]
	}
	return c
}

func TestMFabricStopsContinueGoesOn(t *testing.T) {
	d := newMatrix(4)
	d[0][1], d[0][2], d[2][3] = 10, 5, 1
	ports := UniformPorts(4, 1)
	c, err := MFabric(d, ports)
	if err != nil {
		t.Fatal(err)
	}
	// 0-1 first; the next bottleneck 0-2 finds server 0 full: stop.
	if want := counts(4, [3]int{0, 1, 1}); !reflect.DeepEqual(c, want) {
		t.Fatalf("MFabric = %v, want %v", c, want)
	}
	c, err = MFabricContinue(d, ports)
	if err != nil {
		t.Fatal(err)
	}
	if want := counts(4, [3]int{0, 1, 1}, [3]int{2, 3, 1}); !reflect.DeepEqual(c, want) {
		t.Fatalf("MFabricContinue = %v, want %v", c, want)
	}
}

func TestMFabricBottleneckOrder(t *testing.T) {
	// Every pair first gets one circuit (T = +Inf), then the largest D/C:
	// 0-1 (12) gets a second, then 0-1 at 6 vs 0-2 at 8: 0-2 gets one,
	// then 1-2 (5) vs 0-1 (6): 0-1 but server 0 is full (3 ports): stop.
	d := [][]float64{{0, 12, 8}, {0, 0, 5}, {0, 0, 0}}
	c, err := MFabric(d, []int{3, 4, 4})
	if err != nil {
		t.Fatal(err)
	}
	if want := counts(3, [3]int{0, 1, 2}, [3]int{0, 2, 1}, [3]int{1, 2, 1}); !reflect.DeepEqual(c, want) {
		t.Fatalf("MFabric = %v, want %v", c, want)
	}
	c, err = MFabricContinue(d, []int{3, 4, 4})
	if err != nil {
		t.Fatal(err)
	}
	// Then 1-2 takes the rest of servers 1 and 2: 5/1 -> 5/2 ... until
	// server 1 (4 ports: 2 to 0, so 2 to 2) is full.
	if want := counts(3, [3]int{0, 1, 2}, [3]int{0, 2, 1}, [3]int{1, 2, 2}); !reflect.DeepEqual(c, want) {
		t.Fatalf("MFabricContinue = %v, want %v", c, want)
	}
	// Two servers: all ports on the one pair; TX+RX summed from a
	// directed matrix.
	c, err = MFabric([][]float64{{0, 1}, {2, 0}}, []int{3, 5})
	if err != nil || c[0][1] != 3 || c[1][0] != 3 {
		t.Fatalf("two servers: %v %v", c, err)
	}
}

func TestGreedyMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := 2 + r.IntN(9)
		d := newMatrix(n)
		for i := range d {
			for j := range d[i] {
				if i != j && r.Float64() < 0.6 {
					d[i][j] = float64(r.IntN(5)) // ties on purpose
				}
			}
		}
		ports := make([]int, n)
		for i := range ports {
			ports[i] = r.IntN(5)
		}
		for _, cont := range []bool{false, true} {
			got, err := greedy(d, ports, cont)
			if err != nil {
				t.Fatal(err)
			}
			if want := naiveGreedy(d, ports, cont); !reflect.DeepEqual(got, want) {
				t.Fatalf("trial %d cont=%v: heap %v, naive %v (d=%v ports=%v)", trial, cont, got, want, d, ports)
			}
			if err := checkCircuits(got, n); err != nil {
				t.Fatal(err)
			}
			for v := range got {
				s := 0
				for _, k := range got[v] {
					s += k
				}
				if s > ports[v] {
					t.Fatalf("server %d: %d circuits, %d ports", v, s, ports[v])
				}
			}
		}
	}
}

func TestPlannersBadInput(t *testing.T) {
	good := [][]float64{{0, 1}, {1, 0}}
	cases := []struct {
		name  string
		d     [][]float64
		ports []int
	}{
		{"ragged", [][]float64{{0, 1}, {1}}, []int{1, 1}},
		{"negative", [][]float64{{0, -1}, {1, 0}}, []int{1, 1}},
		{"nan", [][]float64{{0, math.NaN()}, {1, 0}}, []int{1, 1}},
		{"inf", [][]float64{{0, math.Inf(1)}, {1, 0}}, []int{1, 1}},
		{"overflow", [][]float64{{0, math.MaxFloat64}, {math.MaxFloat64, 0}}, []int{1, 1}},
		{"ports length", good, []int{1}},
		{"negative ports", good, []int{1, -1}},
	}
	for _, tc := range cases {
		for _, p := range Candidates(DefaultBandwidths()) {
			if _, err := p.Plan(tc.d, tc.ports); !errors.Is(err, ErrDemand) {
				t.Errorf("%s %s: err %v", p.Name, tc.name, err)
			}
		}
	}
	if _, err := PlaceMatching(good, []int{1, 1}, Bandwidths{}); err == nil {
		t.Error("PlaceMatching with zero bandwidths")
	}
	// Empty and demand-free inputs plan nothing.
	for _, d := range [][][]float64{{}, {{0}}, newMatrix(3)} {
		for _, p := range Candidates(DefaultBandwidths()) {
			c, err := p.Plan(d, UniformPorts(len(d), 2))
			if err != nil {
				t.Fatalf("%s: %v", p.Name, err)
			}
			for _, row := range c {
				for _, k := range row {
					if k != 0 {
						t.Fatalf("%s: circuits %v without demand", p.Name, c)
					}
				}
			}
		}
	}
}

func TestBestPicksFastest(t *testing.T) {
	d := newMatrix(4)
	d[0][1], d[0][2], d[2][3] = 10, 5, 1
	bw := Bandwidths{OCS: 1, EPS: 1}
	rs, err := Compare(d, UniformPorts(4, 1), bw)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Planner != NameMFabricContinue || rs[2].Planner != NameMFabric {
		t.Fatalf("Compare = %+v", rs)
	}
	b, err := Best(d, UniformPorts(4, 1), bw)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Completion.Time < b.Completion.Time {
			t.Fatalf("Best %s at %g, %s at %g", b.Planner, b.Completion.Time, r.Planner, r.Completion.Time)
		}
	}
}
