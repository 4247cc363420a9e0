package algo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/occl/occl/topo"
)

func mustSpec(t *testing.T, spec string) *topo.Topology {
	t.Helper()
	top, err := topo.FromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// gridTopology is an X by Y RailX-like grid of hosts of per ranks.
func gridTopology(X, Y, per int) *topo.Topology {
	t := topo.Uniform(X*Y, per)
	for h := range t.Hosts {
		t.Hosts[h].Coord = []int{h % X, h / X}
	}
	return t
}

// randomSizes returns block sizes up to max bytes, about a third of them
// zero.
func randomSizes(rng *rand.Rand, p, max int) [][]int {
	size := make([][]int, p)
	for a := range size {
		size[a] = make([]int, p)
		for b := range size[a] {
			if rng.IntN(3) > 0 {
				size[a][b] = rng.IntN(max + 1)
			}
		}
	}
	return size
}

// TestRoutedAllToAll runs every planner's route on several layouts with
// uneven block sizes, zeros included, and checks every output block.
func TestRoutedAllToAll(t *testing.T) {
	cases := []struct {
		name string
		top  *topo.Topology
	}{
		{"delegated/4x2", mustSpec(t, "hosts=4x2,nics=host,ocs_ports=3,circuits=0-1/0-1/2-3/0-2/1-3")},
		{"delegated/3x3", mustSpec(t, "hosts=3x3,ocs_ports=3,circuits=0-1/1-2/0-2/0-1")},
		{"delegated/2x4-shared", mustSpec(t, "hosts=2x4,ocs_ports=2,ocs_shared=1,circuits=0-1")},
		{"delegated/5x1", mustSpec(t, "hosts=5x1,ocs_ports=1,circuits=0-1/2-3")},
		{"railfwd/4x2", mustSpec(t, "hosts=4x2,rail_only=1")},
		{"railfwd/3x3", mustSpec(t, "hosts=3x3,rail_only=1")},
		{"xy/3x2x1", gridTopology(3, 2, 1)},
		{"xy/2x2x2", gridTopology(2, 2, 2)},
	}
	i := 0
	for _, tc := range cases {
		for _, max := range []int{0, 7, 1031} {
			net, opts := netConfig(i)
			i++
			t.Run(fmt.Sprintf("%s/max%d/%s", tc.name, max, net), func(t *testing.T) {
				t.Parallel()
				p := len(tc.top.Ranks)
				size := randomSizes(rand.New(rand.NewPCG(uint64(p), uint64(max))), p, max)
				m := NewModel(tc.top)
				family, _, _ := strings.Cut(tc.name, "/")
				a, err := ParseAlgorithm(family)
				if err != nil {
					t.Fatal(err)
				}
				route := m.AllToAllRoute(a, size)
				if route == nil {
					t.Fatalf("no %s route", a)
				}
				if err := route.Validate(); err != nil {
					t.Fatal(err)
				}
				if pred, ok := m.PredictAllToAll(a, size); !ok || math.IsInf(pred, 1) {
					t.Fatalf("prediction %v %v: a flow has no path", pred, ok)
				}
				ws := make([]Workspace, p)
				checkAllToAll(t, size, opts, func(ctx context.Context, rank int, peers Peers, b *a2aBufs) error {
					return AllToAllRouted(ctx, peers, &ws[rank], route, size, b.send, b.sOffs, b.recv, b.rOffs)
				})
			})
		}
	}
}

// TestRoutesUseLinks checks that every hop of every route is a direct
// link of its topology, and the shape of each plan.
func TestRoutesUseLinks(t *testing.T) {
	top := mustSpec(t, "hosts=4x2,nics=host,ocs_ports=2,circuits=0-1/0-1/2-3")
	size := UniformBytes(8, 100)
	r := RouteDelegated(top, size)
	// Ranks 0 and 1 each drive one of the two circuits to host 1 (ranks 2
	// and 3): traffic from host 0 to host 1 is split between them.
	load := map[[2]int]int{}
	for s := 0; s < 2; s++ {
		for d := 2; d < 4; d++ {
			load[[2]int{r.Hop(s, d, 1), r.Hop(s, d, 2)}] += size[s][d]
		}
	}
	if load[[2]int{0, 2}] != 200 || load[[2]int{1, 3}] != 200 {
		t.Fatalf("host 0 to host 1 circuit loads %v, want 200 on each", load)
	}
	// No circuit between hosts 0 and 2: direct over the packet network in
	// the inter-host phase.
	if r.Hop(0, 4, 1) != 0 || r.Hop(0, 4, 2) != 4 {
		t.Fatalf("block 0->4 hops %d %d", r.Hop(0, 4, 1), r.Hop(0, 4, 2))
	}
	for k := 0; k < r.Phases; k++ {
		for pair := range r.Flows(k, size) {
			p := top.Path(pair[0], pair[1])
			if p.Class == topo.None {
				t.Fatalf("phase %d: %v has no path", k, pair)
			}
			if k != 1 && p.Class != topo.HBD {
				t.Fatalf("phase %d: %v crosses %s, want the host fabric", k, pair, p.Class)
			}
			if k == 1 && top.Ranks[pair[0]].Host != top.Ranks[pair[1]].Host {
				hs, hd := top.Ranks[pair[0]].Host, top.Ranks[pair[1]].Host
				circuit := (hs/2 == hd/2) // 0-1 and 2-3 have circuits
				if (p.Class == topo.OCS) != circuit {
					t.Fatalf("inter-host flow %v on %s", pair, p.Class)
				}
			}
		}
	}

	ro := mustSpec(t, "hosts=4x2,rail_only=1")
	fr := RouteRailForward(ro)
	for k := 0; k < fr.Phases; k++ {
		for pair := range fr.Flows(k, size) {
			want := topo.HBD
			if k == 1 {
				want = topo.EPS
			}
			if c := ro.Path(pair[0], pair[1]).Class; c != want {
				t.Fatalf("rail forwarding phase %d: %v on %s, want %s", k, pair, c, want)
			}
		}
	}
	m := NewModel(ro)
	if _, ok := m.PredictAllToAll(AlgoPairwise, size); !ok {
		t.Fatal("no pairwise prediction")
	}
	if tp, _ := m.PredictAllToAll(AlgoPairwise, size); !math.IsInf(tp, 1) {
		t.Fatalf("pairwise on a rail-only fabric predicted %v, want +Inf (no path across rails)", tp)
	}
	if a, _, _ := m.ChooseAllToAll(size); a != AlgoRailForward {
		t.Fatalf("rail-only fabric: chose %s", a)
	}

	g := gridTopology(3, 3, 1)
	xy := RouteXY(g)
	for s := range 9 {
		for d := range 9 {
			cs, cm, cd := g.Hosts[s].Coord, g.Hosts[xy.Hop(s, d, 1)].Coord, g.Hosts[d].Coord
			if cm[1] != cs[1] || cm[0] != cd[0] {
				t.Fatalf("block %v->%v via %v: not X then Y", cs, cd, cm)
			}
		}
	}
	if RouteXY(topo.Uniform(2, 2)) != nil {
		t.Fatal("X-then-Y route on a topology without coordinates")
	}
}

// TestRailForwardCostMatchesPaper checks the model against the rail-only
// paper's formulas: direct exchange on a full-bisection fabric costs
// x(y-1)D/C_S, forwarding on a rail-only one y(x-1)D/C_F + x(y-1)D/C_S.
func TestRailForwardCostMatchesPaper(t *testing.T) {
	const (
		x, y = 2, 4
		D    = 1 << 20
		CF   = 4e9
		CS   = 1e9
	)
	spec := fmt.Sprintf("hosts=%dx%d,hbd=%g,eps=%g,hbd_lat=0s,eps_lat=0s", y, x, CF, CS)
	full := NewModel(mustSpec(t, spec))
	full.StepOverhead = 0
	ro := NewModel(mustSpec(t, spec+",rail_only=1"))
	ro.StepOverhead = 0
	size := UniformBytes(x*y, D)
	direct := full.PredictRoute(NewRoute(AlgoPairwise, x*y, 1), size)
	fwd, _ := ro.PredictAllToAll(AlgoRailForward, size)
	wantDirect := float64(x*(y-1)*D) / CS
	wantFwd := float64(y*(x-1)*D)/CF + float64(x*(y-1)*D)/CS
	if math.Abs(direct-wantDirect) > 1e-9*wantDirect || math.Abs(fwd-wantFwd) > 1e-9*wantFwd {
		t.Fatalf("direct %g s (want %g), forwarded %g s (want %g)", direct, wantDirect, fwd, wantFwd)
	}
}

// TestDelegatedBeatsPacketNetwork checks that the model prefers the
// delegated exchange when circuits carry the heavy host pairs.
func TestDelegatedBeatsPacketNetwork(t *testing.T) {
	top := mustSpec(t, "hosts=4x2,nics=host,ocs_ports=2,hbd=8GB/s,eps=1GB/s,ocs=1GB/s,circuits=0-1/0-1/2-3/2-3")
	size := make([][]int, 8)
	for s := range size {
		size[s] = make([]int, 8)
		for d := range size[s] {
			size[s][d] = 1 << 16
			if top.Ranks[s].Host/2 == top.Ranks[d].Host/2 {
				size[s][d] = 1 << 20 // heavy inside host pairs 0-1 and 2-3
			}
		}
	}
	m := NewModel(top)
	a, r, tBest := m.ChooseAllToAll(size)
	tPair, _ := m.PredictAllToAll(AlgoPairwise, size)
	if a != AlgoDelegated || r == nil || tBest*2 > tPair {
		t.Fatalf("chose %s at %g s, pairwise %g s", a, tBest, tPair)
	}
}
