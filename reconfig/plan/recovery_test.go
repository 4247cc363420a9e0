// Tests of the recovery circuits (recovery.go): on an OCS fabric with a
// spare, a RailX grid and an InfinitePOD K-hop line, the target touches no
// failed host, oversubscribes no port, keeps every circuit between healthy
// hosts, changes only ports that lost their circuit (or the spare's free
// ones), and keeps the survivors connected as they were.

package plan

import (
	"reflect"
	"strings"
	"testing"

	"github.com/occl/occl/topo"
)

// ocsRing is six hosts of two ranks with four OCS ports each: hosts 0..4
// in a ring of circuits with chords 0-2 and 1-3, host 5 a spare without
// circuits; the flat ring is rank order.
func ocsRing(t *testing.T) *topo.Topology {
	t.Helper()
	top := topo.Uniform(6, 2)
	top.AddPorts(4, false)
	for _, p := range [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 0}, {0, 2}, {1, 3}} {
		if err := top.Connect(p[0], p[1], 0); err != nil {
			t.Fatal(err)
		}
	}
	top.Ring = top.RingOrder()
	return top
}

func TestRecoveryCircuits(t *testing.T) {
	spareBusy := func(t *testing.T) *topo.Topology {
		top := ocsRing(t)
		for range 2 {
			if err := top.Connect(5, 4, 0); err != nil {
				t.Fatal(err)
			}
		}
		return top
	}
	spareLinked := func(t *testing.T) *topo.Topology {
		top := ocsRing(t)
		if err := top.Connect(5, 1, 0); err != nil {
			t.Fatal(err)
		}
		return top
	}
	railx := func(kind topo.RailXKind) func(t *testing.T) *topo.Topology {
		return func(t *testing.T) *topo.Topology {
			top, _, err := topo.BuildRailX(topo.RailXConfig{Kind: kind, X: 3, Y: 3})
			if err != nil {
				t.Fatal(err)
			}
			return top
		}
	}
	kring := func(t *testing.T) *topo.Topology {
		top, err := topo.BuildKRing(topo.KRingConfig{Nodes: 6, K: 2, GPUsPerNode: 2}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	plainRing := func(t *testing.T) *topo.Topology {
		top := topo.Uniform(5, 1)
		top.AddPorts(2, false)
		for h := range 4 {
			if err := top.Connect(h, (h+1)%4, 0); err != nil {
				t.Fatal(err)
			}
		}
		return top
	}
	// Host 0 a hub with circuits to hosts 3, 1 and 2 (in port order).
	hub := func(t *testing.T) *topo.Topology {
		top := topo.Uniform(4, 1)
		top.AddPorts(3, false)
		for _, p := range [][2]int{{0, 3}, {1, 0}, {2, 0}} {
			if err := top.Connect(p[0], p[1], 0); err != nil {
				t.Fatal(err)
			}
		}
		return top
	}
	for _, c := range []struct {
		name    string
		top     func(*testing.T) *topo.Topology
		failed  []int
		spare   int
		wantErr string
		// Host pairs a new circuit must join.
		joined [][2]int
	}{
		{"bypass one", ocsRing, []int{1}, -1, "", [][2]int{{0, 2}}},
		{"bypass on a plain ring", plainRing, []int{1}, -1, "", [][2]int{{0, 2}}},
		{"spare on a plain ring", plainRing, []int{1}, 4, "", [][2]int{{0, 4}, {2, 4}}},
		{"bypass two", ocsRing, []int{1, 3}, -1, "", nil},
		{"bypass neighbours", ocsRing, []int{0, 1}, -1, "", [][2]int{{2, 4}}},
		{"spare", ocsRing, []int{1}, 5, "", [][2]int{{0, 5}, {2, 5}, {3, 5}}},
		{"spare and bypass", ocsRing, []int{2, 4}, 5, "", nil},
		{"spare linked to failed host", spareLinked, []int{1}, 5, "", nil},
		{"spare without ports", spareBusy, []int{0}, 5, "spare host5 has 2 free OCS ports, failed host host0 had 3 circuits", nil},
		{"spare beside a failed hub", hub, []int{1, 0}, 3, "", [][2]int{{2, 3}}},
		{"spare failed", ocsRing, []int{1, 5}, 5, "among the failed hosts", nil},
		{"failed out of range", ocsRing, []int{6}, -1, "failed host 6", nil},
		{"spare out of range", ocsRing, []int{1}, 6, "spare host 6", nil},
		{"railx torus", railx(topo.RailXTorus), []int{4}, -1, "", [][2]int{{3, 5}, {1, 7}}},
		{"railx hyperx", railx(topo.RailXHyperX), []int{4, 5}, -1, "", nil},
		{"kring", kring, []int{2}, -1, "", [][2]int{{1, 3}}},
		{"kring two", kring, []int{1, 2}, -1, "", nil},
		{"kring spare", kring, []int{2}, 5, "K-hop line (K = 2)", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := c.top(t)
			before := string(in.JSON())
			out, err := RecoveryCircuits(in, c.failed, c.spare)
			if string(in.JSON()) != before {
				t.Fatal("RecoveryCircuits changed its input")
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkRecovery(t, in, out, c.failed, c.spare, true)
			for _, j := range c.joined {
				if !joins(out, j) {
					t.Fatalf("no circuit joins hosts %d and %d", j[0], j[1])
				}
			}
		})
	}
}

// checkRecovery checks a recovery target against its input (see the top
// of the file); with connected, that the survivors stay connected, which
// holds on rings of circuits, not on any fabric (the neighbours of a
// failed hub cannot all be paired).
func checkRecovery(t *testing.T, in, out *topo.Topology, failed []int, spare int, connected bool) {
	t.Helper()
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in.Ranks, out.Ranks) || !reflect.DeepEqual(in.NICs, out.NICs) || len(in.Hosts) != len(out.Hosts) {
		t.Fatal("hosts, ranks or NICs changed")
	}
	dead := map[int]bool{}
	for _, h := range failed {
		dead[h] = true
	}
	host := func(p int) int { return out.NICs[p].Host }
	// Ports that lost their circuit to a failed host, and the spare's
	// free ports (on a K-hop line every free port): the only ones a new
	// circuit may use.
	mayChange := map[int]bool{}
	had := map[topo.Circuit]bool{}
	for _, c := range in.Circuits {
		had[c.Normalize()] = true
		for _, e := range [][2]int{{c.A, c.B}, {c.B, c.A}} {
			if dead[host(e[1])] || spare >= 0 && host(e[0]) == spare && host(e[1]) == failed[0] {
				mayChange[e[0]] = true
			}
		}
	}
	if spare >= 0 {
		for _, p := range in.FreePorts(spare) {
			mayChange[p] = true
		}
	}
	if in.KHopReach() > 0 {
		// The backup fibres' ports.
		for h := range in.Hosts {
			for _, p := range in.FreePorts(h) {
				mayChange[p] = true
			}
		}
	}
	have := map[topo.Circuit]bool{}
	used := map[int]int{}
	for _, c := range out.Circuits {
		have[c.Normalize()] = true
		used[c.A]++
		used[c.B]++
		if dead[host(c.A)] || dead[host(c.B)] {
			t.Fatalf("circuit %v touches a failed host", c)
		}
		if !had[c.Normalize()] && (!mayChange[c.A] || !mayChange[c.B]) {
			t.Fatalf("new circuit %v (hosts %d-%d) uses a port that had a healthy circuit or was not free", c, host(c.A), host(c.B))
		}
		if k := out.KHopReach(); k > 0 && !had[c.Normalize()] {
			a, b := out.NICs[c.A], out.NICs[c.B]
			if a.Name[0] != '+' {
				a, b = b, a
			}
			if d := out.Hosts[b.Host].Coord[0] - out.Hosts[a.Host].Coord[0]; a.Name[1:] != b.Name[1:] || a.Name[1:] != string(rune('0'+d)) {
				t.Fatalf("new K-hop circuit %s-%s between nodes %d apart", a.Name, b.Name, d)
			}
		}
	}
	for p, n := range used {
		if n > 1 {
			t.Fatalf("port %d carries %d circuits", p, n)
		}
	}
	for _, c := range in.Circuits {
		if !dead[host(c.A)] && !dead[host(c.B)] && !have[c.Normalize()] {
			t.Fatalf("circuit %v between healthy hosts %d and %d is gone", c, host(c.A), host(c.B))
		}
	}
	// Connectivity: the healthy hosts of each connected component of the
	// input (with the spare where the replaced host was) stay connected;
	// on a K-hop line unless K or more failed nodes lie between them.
	before, after := components(in), components(out)
	for a := range in.Hosts {
		if !connected {
			break
		}
		for b := range in.Hosts {
			if dead[a] || dead[b] || before[a] != before[b] || a == b {
				continue
			}
			if want := kHopReachable(in, dead, a, b); (after[a] == after[b]) != want {
				t.Fatalf("hosts %d and %d connected: %v, want %v", a, b, after[a] == after[b], want)
			}
			if spare >= 0 && before[a] == before[failed[0]] && after[a] != after[spare] {
				t.Fatalf("host %d is not connected to the spare %d", a, spare)
			}
		}
	}
	if spare >= 0 {
		// The healthy hosts' ranks keep their ring order, the spare's
		// ranks in the replaced host's places.
		hr := in.HostRanks()
		var want, got []int
		for _, r := range in.Ring {
			switch h := in.Ranks[r].Host; {
			case h == failed[0]:
				want = append(want, hr[spare][in.Ranks[r].LocalRank])
			case h != spare && !dead[h]:
				want = append(want, r)
			}
		}
		for _, r := range out.Ring {
			if !dead[out.Ranks[r].Host] {
				got = append(got, r)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("survivors' ring %v, want %v", got, want)
		}
	}
}

// components labels every host of t with its connected component under
// the circuits, by repeated relaxation.
func components(t *topo.Topology) []int {
	label := make([]int, len(t.Hosts))
	for i := range label {
		label[i] = i
	}
	for changed := true; changed; {
		changed = false
		for _, c := range t.Circuits {
			a, b := t.NICs[c.A].Host, t.NICs[c.B].Host
			if l := min(label[a], label[b]); label[a] != l || label[b] != l {
				label[a], label[b] = l, l
				changed = true
			}
		}
	}
	return label
}

// kHopReachable reports whether hosts a and b of a K-hop line stay joined
// when the dead hosts fail: no K consecutive line positions between them
// are dead. Any two hosts of another fabric are.
func kHopReachable(t *topo.Topology, dead map[int]bool, a, b int) bool {
	k := t.KHopReach()
	if k == 0 {
		return true
	}
	pa, pb := t.Hosts[a].Coord[0], t.Hosts[b].Coord[0]
	deadAt := map[int]bool{}
	for h := range dead {
		deadAt[t.Hosts[h].Coord[0]] = true
	}
	run := 0
	for p := min(pa, pb) + 1; p < max(pa, pb); p++ {
		if run = run + 1; !deadAt[p] {
			run = 0
		}
		if run >= k {
			return false
		}
	}
	return true
}

// joins reports whether a circuit of t joins hosts j[0] and j[1].
func joins(t *topo.Topology, j [2]int) bool {
	for _, c := range t.Circuits {
		a, b := t.NICs[c.A].Host, t.NICs[c.B].Host
		if a == j[0] && b == j[1] || a == j[1] && b == j[0] {
			return true
		}
	}
	return false
}
