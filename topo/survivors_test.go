package topo

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// checkSurvivors checks what holds for every fabric: the survivors, the
// idle and the failed ranks partition t's ranks, the survivors' topology
// is valid and renumbers the survivors in order, no failed node's host is
// left, and every hop of the ring between hosts uses a link
// (fabricLink); optical says which hops must be circuits. With nodes set a
// failed rank takes its whole host out.
func checkSurvivors(t *testing.T, top *Topology, failed []int, s *Survivors, nodes bool, optical func(a, b Host) bool) {
	t.Helper()
	seen := map[int]string{}
	for what, rs := range map[string][]int{"survivor": s.Ranks, "idle": s.Idle, "failed": failed} {
		for _, r := range rs {
			if w, ok := seen[r]; ok && !(w == what && what == "failed") {
				t.Fatalf("rank %d is %s and %s", r, w, what)
			}
			seen[r] = what
		}
	}
	if len(seen) != len(top.Ranks) {
		t.Fatalf("survivors %v, idle %v, failed %v do not cover the %d ranks", s.Ranks, s.Idle, failed, len(top.Ranks))
	}
	if !slices.IsSorted(s.Ranks) || !slices.IsSorted(s.Idle) {
		t.Fatalf("survivors %v or idle %v not ascending", s.Ranks, s.Idle)
	}
	st := s.Topology
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(st.Ranks) != len(s.Ranks) {
		t.Fatalf("topology of %d ranks for %d survivors", len(st.Ranks), len(s.Ranks))
	}
	deadHosts := map[string]bool{}
	for _, r := range failed {
		deadHosts[top.Hosts[top.Ranks[r].Host].Name] = true
	}
	for i, r := range s.Ranks {
		if got, want := st.Hosts[st.Ranks[i].Host].Name, top.Hosts[top.Ranks[r].Host].Name; got != want {
			t.Fatalf("survivor %d (rank %d) on %s, want %s", i, r, got, want)
		}
		if deadHosts[st.Hosts[st.Ranks[i].Host].Name] && nodes {
			t.Fatalf("survivor %d is on failed node %s", i, st.Hosts[st.Ranks[i].Host].Name)
		}
	}
	ring := st.RingOrder()
	for i, a := range ring {
		b := ring[(i+1)%len(ring)]
		l := fabricLink(st, a, b)
		ha, hb := st.Hosts[st.Ranks[a].Host], st.Hosts[st.Ranks[b].Host]
		if l == "none" || l == "eps" && optical(ha, hb) {
			t.Fatalf("ring %v: hop %d -> %d (%s -> %s) over %s", ring, a, b, ha.Name, hb.Name, l)
		}
	}
}

// kHopComponents is the reference for a K-hop line: the connected
// components of the graph whose vertices are the healthy nodes and whose
// edges join every two of them at most k positions apart, by breadth-first
// search over all pairs.
func kHopComponents(n, k int, dead []bool) [][]int {
	comp := make([]int, n)
	for i := range comp {
		comp[i] = -1
	}
	var out [][]int
	for s := 0; s < n; s++ {
		if dead[s] || comp[s] >= 0 {
			continue
		}
		c := len(out)
		out = append(out, nil)
		queue := []int{s}
		comp[s] = c
		for len(queue) > 0 {
			v := queue[0]
			queue = queue[1:]
			out[c] = append(out[c], v)
			for w := 0; w < n; w++ {
				if !dead[w] && comp[w] < 0 && v != w && max(v-w, w-v) <= k {
					comp[w] = c
					queue = append(queue, w)
				}
			}
		}
		sort.Ints(out[c])
	}
	return out
}

// domains returns the host names of every HB domain of t, as node ids.
func domains(t *Topology) [][]int {
	by := map[int][]int{}
	for _, h := range t.Hosts {
		v, _ := strconv.Atoi(strings.TrimPrefix(h.Name, "node"))
		by[h.HBDomain] = append(by[h.HBDomain], v)
	}
	var out [][]int
	for _, vs := range by {
		sort.Ints(vs)
		out = append(out, vs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

func TestWithoutKHopLine(t *testing.T) {
	for n := 1; n <= 7; n++ {
		for k := 1; k <= 3; k++ {
			r := max(2, k)
			top, err := BuildKRing(KRingConfig{Nodes: n, K: k, GPUsPerNode: r}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for mask := 0; mask < 1<<n; mask++ {
				dead := make([]bool, n)
				var failed []int
				for v := 0; v < n; v++ {
					if mask>>v&1 == 1 {
						dead[v] = true
						// One GPU of the node fails; the node goes.
						failed = append(failed, v*r+(v%r))
					}
				}
				name := fmt.Sprintf("n=%d K=%d failed=%v", n, k, failed)
				s, err := top.Without(failed)
				if bits.OnesCount(uint(mask)) == n {
					if err == nil || !strings.Contains(err.Error(), "no rank survives") {
						t.Fatalf("%s: err %v, want no rank survives", name, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				checkSurvivors(t, top, failed, s, true, func(a, b Host) bool { return a.HBDomain == b.HBDomain })
				if want := (n - bits.OnesCount(uint(mask))) * r; len(s.Ranks) != want {
					t.Fatalf("%s: %d survivors, want %d", name, len(s.Ranks), want)
				}
				if got, want := domains(s.Topology), kHopComponents(n, k, dead); !slices.EqualFunc(got, want, slices.Equal) {
					t.Fatalf("%s: HB domains %v, want the K-hop components %v", name, got, want)
				}
				checkKHopCircuits(t, name, s.Topology, k)
			}
		}
	}
}

// checkKHopCircuits checks that every circuit of a K-hop topology joins
// port +d of a node to port -d of the node d <= k positions ahead, both
// in one HB domain.
func checkKHopCircuits(t *testing.T, name string, top *Topology, k int) {
	t.Helper()
	for _, c := range top.Circuits {
		a, b := top.NICs[c.A], top.NICs[c.B]
		if a.Name[0] != '+' {
			a, b = b, a
		}
		ha, hb := top.Hosts[a.Host], top.Hosts[b.Host]
		d := hb.Coord[0] - ha.Coord[0]
		if a.Name != "+"+strconv.Itoa(d) || b.Name != "-"+strconv.Itoa(d) || d < 1 || d > k || ha.HBDomain != hb.HBDomain {
			t.Fatalf("%s: circuit %s port %s -> %s port %s (%d apart, domains %d, %d)", name, ha.Name, a.Name, hb.Name, b.Name, d, ha.HBDomain, hb.HBDomain)
		}
	}
}

// TestWithoutKHopSegments starts from a line that faults already split
// and keeps the unaffected segment's circuits as they were.
func TestWithoutKHopSegments(t *testing.T) {
	top, err := BuildKRing(KRingConfig{Nodes: 10, K: 2, GPUsPerNode: 2, Faults: []int{3, 4}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// node7 fails: 5 6 8 9 stay one domain over 6 -> 8.
	n7 := hostByName(top, "node7")
	s, err := top.Without([]int{top.HostRanks()[n7][1]})
	if err != nil {
		t.Fatal(err)
	}
	checkSurvivors(t, top, []int{top.HostRanks()[n7][1]}, s, true, func(a, b Host) bool { return a.HBDomain == b.HBDomain })
	if got, want := fmt.Sprint(domains(s.Topology)), "[[0 1 2] [5 6 8 9]]"; got != want {
		t.Fatalf("domains %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(s.Idle), fmt.Sprint(top.HostRanks()[n7][:1]); got != want {
		t.Fatalf("idle %s, want node7's other rank %s", got, want)
	}
	checkKHopCircuits(t, "node7 failed", s.Topology, 2)
	var names []string
	for _, c := range s.Topology.Circuits {
		names = append(names, s.Topology.Hosts[s.Topology.NICs[c.A].Host].Name+">"+s.Topology.Hosts[s.Topology.NICs[c.B].Host].Name)
	}
	if got, want := strings.Join(names, " "), "node0>node1 node1>node2 node5>node6 node8>node9 node6>node8"; got != want {
		t.Fatalf("circuits %s, want %s (kept ones first, then the backup link)", got, want)
	}
}

// gridFaultFree is the reference for a RailX allocation: the largest
// number of nodes in a set of rows times a set of columns of an x by y
// grid that holds no failed node, by trying every set of rows and columns.
func gridFaultFree(x, y int, dead map[[2]int]bool) int {
	best := 0
	for rows := 0; rows < 1<<y; rows++ {
		for cols := 0; cols < 1<<x; cols++ {
			ok := true
			for f := range dead {
				if rows>>f[1]&1 == 1 && cols>>f[0]&1 == 1 {
					ok = false
				}
			}
			if ok {
				best = max(best, bits.OnesCount(uint(rows))*bits.OnesCount(uint(cols)))
			}
		}
	}
	return best
}

func TestWithoutRailX(t *testing.T) {
	for _, cfg := range []RailXConfig{
		{X: 3, Y: 3},
		{X: 4, Y: 3, Mesh: 2, Rails: 4},
		{X: 4, Y: 4},
		{X: 5, Y: 1},
		{Kind: RailXHyperX, X: 3, Y: 3},
		{Kind: RailXHyperX, X: 5, Y: 3},
		{Kind: RailXHyperX, X: 3, Y: 3, Mesh: 2, Rails: 2},
		{X: 5, Y: 5},
	} {
		top, f, err := BuildRailX(cfg)
		if err != nil {
			t.Fatal(err)
		}
		chips := len(top.Ranks) / f.Nodes()
		nodes := f.Nodes()
		// Every set of up to two failed nodes, and some of three.
		var sets [][]int
		for a := 0; a < nodes; a++ {
			sets = append(sets, []int{a})
			for b := a + 1; b < nodes; b++ {
				sets = append(sets, []int{a, b})
				if c := (a + 2*b + 1) % nodes; c != a && c != b {
					sets = append(sets, []int{a, b, c})
				}
			}
		}
		for _, set := range sets {
			dead := map[[2]int]bool{}
			var failed []int
			for _, v := range set {
				x, y := f.Coord(v)
				dead[[2]int{x, y}] = true
				failed = append(failed, v*chips+v%chips)
			}
			name := fmt.Sprintf("%s %dx%d failed nodes %v", cfg.Kind, cfg.X, max(cfg.Y, 1), set)
			want := gridFaultFree(f.X, f.Y, dead)
			s, err := top.Without(failed)
			if want == 0 {
				if err == nil || !strings.Contains(err.Error(), "no fault-free sub-grid") {
					t.Fatalf("%s: err %v, want no fault-free sub-grid", name, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkSurvivors(t, top, failed, s, true, func(a, b Host) bool { return true })
			st := s.Topology
			if len(st.Hosts) != want || len(s.Ranks) != want*chips {
				t.Fatalf("%s: %d nodes, %d ranks kept; the largest fault-free sub-grid has %d nodes", name, len(st.Hosts), len(s.Ranks), want)
			}
			checkGridCircuits(t, name, st)
		}
	}
}

// checkGridCircuits checks that the kept nodes fill a grid of rows and
// columns and that the rails of each dimension of two or more nodes are
// rings again: every port of such a dimension carries a circuit, to a
// port of the same rail on a node of the same row (X) or column (Y).
func checkGridCircuits(t *testing.T, name string, st *Topology) {
	t.Helper()
	xs, ys, ok := st.grid()
	if !ok {
		t.Fatalf("%s: kept nodes do not fill a grid", name)
	}
	used := map[int]int{}
	for _, c := range st.Circuits {
		used[c.A], used[c.B] = c.B, c.A
	}
	for p, n := range st.NICs {
		if n.Class != OCS {
			continue
		}
		dim := int(n.Name[0] - 'x')
		q, ok := used[p]
		if want := dim == DimX && len(xs) > 1 || dim == DimY && len(ys) > 1; ok != want {
			t.Fatalf("%s: port %s of %s has a circuit: %v, want %v", name, n.Name, st.Hosts[n.Host].Name, ok, want)
		}
		if !ok {
			continue
		}
		m := st.NICs[q]
		a, b := st.Hosts[n.Host].Coord, st.Hosts[m.Host].Coord
		if m.Rail != n.Rail || m.Name[:len(m.Name)-1] != n.Name[:len(n.Name)-1] || m.Name == n.Name || a[1-dim] != b[1-dim] {
			t.Fatalf("%s: circuit %s %s - %s %s leaves its rail or line", name, st.Hosts[n.Host].Name, n.Name, st.Hosts[m.Host].Name, m.Name)
		}
	}
}

// TestWithoutSplicesCircuits fails a host of a plain fabric whose hosts
// are joined in a ring of circuits: its two circuits become one between
// its neighbours, the other circuits stay, and a host that keeps a rank
// keeps its place.
func TestWithoutSplicesCircuits(t *testing.T) {
	top := Uniform(4, 2)
	top.AddPorts(2, false)
	for h := 0; h < 4; h++ {
		if err := top.Connect(h, (h+1)%4, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := fmt.Sprint(top.Circuits)
	// Host 1 fails whole, host 3 loses rank 7.
	failed := []int{2, 3, 7}
	s, err := top.Without(failed)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(top.Circuits) != before {
		t.Fatal("Without changed its input")
	}
	checkSurvivors(t, top, failed, s, false, func(a, b Host) bool { return false })
	if got, want := fmt.Sprint(s.Ranks), "[0 1 4 5 6]"; got != want {
		t.Fatalf("survivors %s, want %s", got, want)
	}
	var pairs []string
	for _, c := range s.Topology.Circuits {
		pairs = append(pairs, s.Topology.Hosts[s.Topology.NICs[c.A].Host].Name+"-"+s.Topology.Hosts[s.Topology.NICs[c.B].Host].Name)
	}
	// host3's circuits were on ports of rank 7 (port 1) and rank 6 (port
	// 0): the one rank 7 drove is gone with it.
	if got, want := strings.Join(pairs, " "), "host2-host3 host0-host2"; got != want {
		t.Fatalf("circuits %s, want %s", got, want)
	}
}

// TestWithoutPacketGrid fails the centre of a 3x3 grid of packet links
// (grid=, GridOnly): a row or column goes, and the ring steps only along
// rows and columns.
func TestWithoutPacketGrid(t *testing.T) {
	top, err := FromSpec("hosts=9x2,grid=3x3")
	if err != nil {
		t.Fatal(err)
	}
	s, err := top.Without([]int{8})
	if err != nil {
		t.Fatal(err)
	}
	checkSurvivors(t, top, []int{8}, s, true, func(a, b Host) bool { return false })
	if len(s.Ranks) != 12 || len(s.Idle) != 5 {
		t.Fatalf("%d survivors, %d idle: want 6 nodes of 2 ranks kept", len(s.Ranks), len(s.Idle))
	}
	ring := s.Topology.RingOrder()
	for i, a := range ring {
		b := ring[(i+1)%len(ring)]
		if p := s.Topology.Path(a, b); p.Class == None {
			t.Fatalf("ring %v: hop %d -> %d has no path", ring, a, b)
		}
	}
}

func TestKHopReach(t *testing.T) {
	kr, err := BuildKRing(KRingConfig{Nodes: 4, K: 3, GPUsPerNode: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rx, _, err := BuildRailX(RailXConfig{X: 3, Y: 2})
	if err != nil {
		t.Fatal(err)
	}
	plain := Uniform(3, 2)
	plain.AddPorts(2, false)
	for _, c := range []struct {
		name string
		t    *Topology
		want int
	}{{"kring", kr, 3}, {"railx", rx, 0}, {"ports", plain, 0}, {"eps", Uniform(2, 2), 0}} {
		if got := c.t.KHopReach(); got != c.want {
			t.Errorf("%s: KHopReach %d, want %d", c.name, got, c.want)
		}
	}
}

// TestWithoutNothing: with no failure every fabric comes back as it was,
// and a K-hop line deployed across ToRs bypasses by line position.
func TestWithoutNothing(t *testing.T) {
	kr, err := BuildKRing(KRingConfig{Nodes: 9, K: 2, GPUsPerNode: 2, Faults: []int{4, 5}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rx, _, err := BuildRailX(RailXConfig{X: 3, Y: 4, Mesh: 2, Rails: 2})
	if err != nil {
		t.Fatal(err)
	}
	plain := Uniform(3, 2)
	plain.AddPorts(2, false)
	if err := plain.Connect(0, 2, 0); err != nil {
		t.Fatal(err)
	}
	for name, top := range map[string]*Topology{"kring": kr, "railx": rx, "ports": plain} {
		s, err := top.Without(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(s.Topology.JSON()), string(top.JSON()); got != want {
			t.Errorf("%s: Without(nil) changed the topology:\n%s\nwant\n%s", name, got, want)
		}
	}
	deployed, err := BuildKRing(KRingConfig{Nodes: 8, K: 2, GPUsPerNode: 2, NodesPerToR: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The host at line position 3 fails: positions 2 and 4 meet over +2.
	var h3 int
	for h, x := range deployed.Hosts {
		if x.Coord[0] == 3 {
			h3 = h
		}
	}
	failed := deployed.HostRanks()[h3]
	s, err := deployed.Without(failed)
	if err != nil {
		t.Fatal(err)
	}
	checkSurvivors(t, deployed, failed, s, true, func(a, b Host) bool { return a.HBDomain == b.HBDomain })
	checkKHopCircuits(t, "deployed", s.Topology, 2)
	if len(s.Topology.Circuits) != 6 {
		t.Fatalf("%d circuits, want 6 joining the 7 remaining nodes", len(s.Topology.Circuits))
	}
}

func TestWithoutErrors(t *testing.T) {
	plain := Uniform(2, 2)
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"empty", func() error { _, err := (&Topology{}).Without(nil); return err }, "no ranks"},
		{"rank out of range", func() error { _, err := plain.Without([]int{4}); return err }, "failed rank 4: outside the 4 ranks"},
		{"negative rank", func() error { _, err := plain.Without([]int{-1}); return err }, "failed rank -1"},
		{"all failed", func() error { _, err := plain.Without([]int{0, 1, 2, 3, 3}); return err }, "no rank survives (4 failed, 0 healthy"},
		{"bypass out of range", func() error { _, err := plain.Bypass([]int{2}); return err }, "bypass host 2: outside the 2 hosts"},
		{"bypass invalid", func() error { _, err := (&Topology{}).Bypass(nil); return err }, "no ranks"},
	} {
		if err := c.err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}
