package topo

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestKHopSegmentsExamples(t *testing.T) {
	// notes: N2 fails, N1-N3 take the backup link (K = 2).
	ring, err := KHopRing(5, 2, []int{2})
	if err != nil || !reflect.DeepEqual(ring, []int{0, 1, 3, 4}) {
		t.Fatalf("one failure, K=2: %v %v", ring, err)
	}
	// Two consecutive failures break a K=2 line but not a K=3 line.
	segs, _ := KHopSegments(8, 2, []int{3, 4})
	if !reflect.DeepEqual(segs, [][]int{{0, 1, 2}, {5, 6, 7}}) {
		t.Fatalf("K=2 break: %v", segs)
	}
	segs, _ = KHopSegments(8, 3, []int{3, 4})
	if !reflect.DeepEqual(segs, [][]int{{0, 1, 2, 5, 6, 7}}) {
		t.Fatalf("K=3 bypass: %v", segs)
	}
	// Failures at the ends break nothing.
	if ring, err := KHopRing(6, 1, []int{0, 1, 5}); err != nil || !reflect.DeepEqual(ring, []int{2, 3, 4}) {
		t.Fatalf("end failures: %v %v", ring, err)
	}
	_, err = KHopRing(8, 2, []int{3, 4})
	if err == nil || !strings.Contains(err.Error(), "nodes 3..4") || !strings.Contains(err.Error(), "K = 2") {
		t.Fatalf("broken line error: %v", err)
	}
	if _, err := KHopRing(3, 1, []int{0, 1, 2}); err == nil {
		t.Fatal("all failed accepted")
	}
	if segs, _ := KHopSegments(3, 1, []int{0, 1, 2}); len(segs) != 0 {
		t.Fatalf("all failed: %v", segs)
	}
	for _, c := range []struct {
		n, k   int
		faults []int
	}{{0, 1, nil}, {5, 0, nil}, {5, 1, []int{5}}, {5, 1, []int{-1}}} {
		if _, err := KHopSegments(c.n, c.k, c.faults); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// randomFaults returns a fault set on n nodes without k consecutive
// failures (if noBreak) or an arbitrary one.
func randomFaults(rng *rand.Rand, n, k int, rate float64, noBreak bool) []int {
	var faults []int
	run := 0
	for v := 0; v < n; v++ {
		if rng.Float64() < rate && (!noBreak || run < k-1) {
			faults = append(faults, v)
			run++
		} else {
			run = 0
		}
	}
	return faults
}

// Property: with no K consecutive failures, the ring covers every healthy
// node once, in line order, and consecutive nodes (the closing pair
// excepted: it closes by loopback) are at most K apart.
func TestKHopRingSurvivesFaults(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		n, k := 1+rng.IntN(200), 1+rng.IntN(4)
		faults := randomFaults(rng, n, k, rng.Float64()*0.6, true)
		failed := make([]bool, n)
		for _, f := range faults {
			failed[f] = true
		}
		ring, err := KHopRing(n, k, faults)
		if len(faults) == n {
			if err == nil {
				t.Fatal("all failed accepted")
			}
			continue
		}
		if err != nil {
			t.Fatalf("n=%d k=%d faults %v: %v", n, k, faults, err)
		}
		var healthy []int
		for v := 0; v < n; v++ {
			if !failed[v] {
				healthy = append(healthy, v)
			}
		}
		if !reflect.DeepEqual(ring, healthy) {
			t.Fatalf("ring %v, healthy %v", ring, healthy)
		}
		for i := 1; i < len(ring); i++ {
			if ring[i]-ring[i-1] > k {
				t.Fatalf("hop %d -> %d longer than K=%d", ring[i-1], ring[i], k)
			}
		}
	}
}

// Property: segments partition the healthy nodes; inside a segment hops
// are at most K; between segments there are at least K failures.
func TestKHopSegmentsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 500; trial++ {
		n, k := 1+rng.IntN(300), 1+rng.IntN(4)
		faults := randomFaults(rng, n, k, rng.Float64()*0.8, false)
		segs, err := KHopSegments(n, k, faults)
		if err != nil {
			t.Fatal(err)
		}
		failed := make([]bool, n)
		for _, f := range faults {
			failed[f] = true
		}
		var all []int
		for i, s := range segs {
			for j := 1; j < len(s); j++ {
				if s[j]-s[j-1] > k {
					t.Fatalf("segment %v has a hop longer than K=%d", s, k)
				}
			}
			if i > 0 && s[0]-segs[i-1][len(segs[i-1])-1] <= k {
				t.Fatalf("segments %v and %v could be joined (K=%d)", segs[i-1], s, k)
			}
			all = append(all, s...)
		}
		var healthy []int
		for v := 0; v < n; v++ {
			if !failed[v] {
				healthy = append(healthy, v)
			}
		}
		if len(all) != len(healthy) || (len(all) > 0 && !reflect.DeepEqual(all, healthy)) {
			t.Fatalf("segments %v do not partition the healthy nodes %v", segs, healthy)
		}
	}
}

func TestKHopLineSegments(t *testing.T) {
	line, _ := DeployLine(8, 2) // 0 2 4 6 1 3 5 7
	segs, err := KHopLineSegments(8, 1, line, []int{6})
	if err != nil || !reflect.DeepEqual(segs, [][]int{{0, 2, 4}, {1, 3, 5, 7}}) {
		t.Fatalf("%v %v", segs, err)
	}
	if _, err := KHopLineSegments(8, 1, []int{0, 0}, nil); err == nil {
		t.Fatal("repeated node accepted")
	}
}
