package algo

import (
	"math"
	"testing"

	"github.com/occl/occl/topo"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// Hand-computed times on 4 hosts of 2 ranks, intra-host 8 GB/s, network
// 1 GB/s, no latency or overhead.
func TestModelFormulas(t *testing.T) {
	top, err := topo.FromSpec("hosts=4x2,hbd=8GB/s,eps=1GB/s,hbd_lat=0s,eps_lat=0s")
	if err != nil {
		t.Fatal(err)
	}
	m := NewModel(top)
	m.StepOverhead = 0
	m.ReduceBandwidth = 0
	S := 64e6
	cases := []struct {
		a    Algorithm
		want float64
	}{
		// Flat ring: 14 steps of S/8 limited by the 1 GB/s hops.
		{AlgoRing, 14 * (S / 8) / 1e9},
		// Hierarchical: 2 intra steps of S/2 at 8 GB/s + 6 rail steps of
		// S/8 at 1 GB/s (one NIC per rank).
		{AlgoHierarchical, 2*(S/2)/8e9 + 6*(S/8)/1e9},
		// 2D: phases max(X: S/4 at 8 GB/s, Y: 3 x S/8 at 1 GB/s) twice,
		// and max(Y: 6 x S/16, X: 2 x S/16 at 8 GB/s) once.
		{Algo2D, 2*3*(S/8)/1e9 + 6*(S/16)/1e9},
	}
	for _, c := range cases {
		got, ok := m.AllReduce(c.a, int(S))
		if !ok || !near(got, c.want) {
			t.Errorf("%s: %v s (ok %v), want %v", c.a, got, ok, c.want)
		}
	}
	// Recursive halving-doubling over host-major ranks is as local as the
	// hierarchical schedule (its first step stays inside the host), but it
	// reduces without overlapping transfers: with a finite reduction rate
	// the pipelined hierarchical schedule wins.
	if got, _ := m.AllReduce(AlgoRHD, int(S)); !near(got, 2*((S/2)/8e9+(S/4)/1e9+(S/8)/1e9)) {
		t.Errorf("rhd %v", got)
	}
	m.ReduceBandwidth = DefaultReduceBandwidth
	if a, _ := m.Choose(OpAllReduce, int(S)); a != AlgoHierarchical {
		t.Errorf("chose %s for 64 MB on a 8:1 fabric, want hier", a)
	}
	// AllGather: ring 7 steps of S/8 at 1 GB/s; hierarchical 3 rail steps
	// of S/8 at 1 GB/s plus 1 host step of S/2 at 8 GB/s.
	if got, _ := m.AllGather(AlgoRing, int(S)); !near(got, 7*(S/8)/1e9) {
		t.Errorf("allgather ring %v", got)
	}
	if got, _ := m.AllGather(AlgoHierarchical, int(S)); !near(got, 3*(S/8)/1e9+(S/2)/8e9) {
		t.Errorf("allgather hier %v", got)
	}
}

// With one NIC per host, the two rails of a host share it: the rail phase
// takes twice as long.
func TestModelSharedNIC(t *testing.T) {
	top, _ := topo.FromSpec("hosts=4x2,hbd=8GB/s,eps=1GB/s,hbd_lat=0s,eps_lat=0s,nics=host")
	m := NewModel(top)
	m.StepOverhead = 0
	m.ReduceBandwidth = 0
	S := 64e6
	got, _ := m.AllReduce(AlgoHierarchical, int(S))
	if want := 2*(S/2)/8e9 + 6*2*(S/8)/1e9; !near(got, want) {
		t.Fatalf("hierarchical with a shared NIC: %v, want %v", got, want)
	}
}

// Small messages are latency-bound: recursive doubling wins; a single host
// never picks a two-level schedule over a flat one when both cost the same.
func TestModelLatency(t *testing.T) {
	top, _ := topo.FromSpec("hosts=2x2,hbd=10GB/s,eps=1GB/s,eps_lat=50us,hbd_lat=1us")
	m := NewModel(top)
	if a, _ := m.Choose(OpAllReduce, 8); a != AlgoRD {
		t.Errorf("chose %s for 8 bytes, want rd", a)
	}
	if a, _ := m.Choose(OpAllReduce, 256<<20); a == AlgoRD {
		t.Errorf("chose rd for 256 MiB")
	}
	// Rail-only fabric: a flat ring crosses rails between hosts (no path).
	ro, _ := topo.FromSpec("hosts=3x2,rail_only=1")
	mr := NewModel(ro)
	if t1, _ := mr.AllReduce(AlgoRing, 1<<20); !math.IsInf(t1, 1) {
		t.Errorf("flat ring on a rail-only fabric predicted %v, want +Inf", t1)
	}
	if a, _ := mr.Choose(OpAllReduce, 1<<20); a != AlgoHierarchical && a != Algo2D {
		t.Errorf("rail-only fabric chose %s", a)
	}
}
