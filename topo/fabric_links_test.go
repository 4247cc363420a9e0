package topo

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// fabricLink says which physical link carries the hop from rank a to rank
// b of t: "host" inside one host, "ocs" over a circuit between the two
// hosts on ports the ranks may drive, "eps" between two packet-network
// NICs, "none" if nothing does. Unlike Path it does not trust an HB domain
// that spans hosts: on the optical fabrics here (InfinitePOD's K-hop
// rings) the domain is made of the circuits, so a hop between two of its
// hosts is real only if a circuit joins them.
func fabricLink(t *Topology, a, b int) string {
	ra, rb := t.Ranks[a], t.Ranks[b]
	if ra.Host == rb.Host {
		return "host"
	}
	for _, c := range t.Circuits {
		pa, pb := c.A, c.B
		if t.NICs[pa].Host != ra.Host {
			pa, pb = pb, pa
		}
		if t.NICs[pa].Host != ra.Host || t.NICs[pb].Host != rb.Host {
			continue
		}
		if o := t.PortOwner(pa); o >= 0 && o != a {
			continue
		}
		if o := t.PortOwner(pb); o >= 0 && o != b {
			continue
		}
		return "ocs"
	}
	if ra.NIC >= 0 && rb.NIC >= 0 && t.NICs[ra.NIC].Class == EPS && t.NICs[rb.NIC].Class == EPS {
		return "eps"
	}
	return "none"
}

// ringHops lists the hops of t's ring (the closing one included) between
// different hosts as "hostA>hostB:link", by host name.
func ringHops(t *Topology) []string {
	ring := t.RingOrder()
	var out []string
	for i, a := range ring {
		b := ring[(i+1)%len(ring)]
		if t.Ranks[a].Host == t.Ranks[b].Host {
			continue
		}
		out = append(out, fmt.Sprintf("%s>%s:%s", t.Hosts[t.Ranks[a].Host].Name, t.Hosts[t.Ranks[b].Host].Name, fabricLink(t, a, b)))
	}
	return out
}

// kHopPorts reports whether host h of a K-hop topology has an optical
// port reaching d line positions forward (d > 0) or back (d < 0).
func kHopPorts(t *Topology, h, d int) bool {
	name := "+" + strconv.Itoa(d)
	if d < 0 {
		name = strconv.Itoa(d)
	}
	for _, n := range t.NICs {
		if n.Host == h && n.Class == OCS && n.Name == name {
			return true
		}
	}
	return false
}

func withoutRanks(n int, failed ...int) []int {
	dead := map[int]bool{}
	for _, f := range failed {
		dead[f] = true
	}
	var out []int
	for r := 0; r < n; r++ {
		if !dead[r] {
			out = append(out, r)
		}
	}
	return out
}

func hostByName(t *Topology, name string) int {
	for h, x := range t.Hosts {
		if x.Name == name {
			return h
		}
	}
	return -1
}

// TestSubsetRingAroundFailedHost records what Subset gives the survivors
// of a failed host: the ring order simply drops the host, so its two
// neighbours become consecutive, but no circuit joins them. On a K-hop
// line the hop falls back to the DCN packet network: with K = 2 the
// backup optical link exists in the fabric (the neighbours' +2 and -2
// ports) but Subset does not switch to it; with K = 1 there is none. Path
// still reports an HBD hop in both cases, since the HB domain outlives its
// circuits. On a RailX torus the ring's hop across the hole has neither a
// circuit nor a NIC: no link at all.
func TestSubsetRingAroundFailedHost(t *testing.T) {
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("kring K=%d", k), func(t *testing.T) {
			top, err := BuildKRing(KRingConfig{Nodes: 5, K: k, GPUsPerNode: 2}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range ringHops(top) {
				if !strings.HasSuffix(h, ":ocs") {
					t.Fatalf("full line: hop %s is not a circuit", h)
				}
			}
			// node2 (ranks 4, 5) fails.
			sub := top.Subset(withoutRanks(len(top.Ranks), 4, 5))
			got := strings.Join(ringHops(sub), " ")
			want := "node0>node1:ocs node1>node3:eps node3>node4:ocs node4>node3:ocs node3>node1:eps node1>node0:ocs"
			if got != want {
				t.Fatalf("survivors' ring hops\n got %s\nwant %s", got, want)
			}
			n1, n3 := hostByName(sub, "node1"), hostByName(sub, "node3")
			if p := sub.Path(sub.HostRanks()[n1][0], sub.HostRanks()[n3][0]); p.Class != HBD {
				t.Fatalf("Path node1 -> node3 = %s, want the HB domain's hbd", p.Class)
			}
			// The fabric itself: K = 2 has the backup ports, K = 1 not.
			f1, f3 := hostByName(top, "node1"), hostByName(top, "node3")
			if got := kHopPorts(top, f1, 2) && kHopPorts(top, f3, -2); got != (k >= 2) {
				t.Fatalf("backup link node1 +2 / node3 -2 present = %v, want %v", got, k >= 2)
			}
		})
	}
	t.Run("railx torus 3x3", func(t *testing.T) {
		top, _, err := BuildRailX(RailXConfig{X: 3, Y: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range ringHops(top) {
			if !strings.HasSuffix(h, ":ocs") {
				t.Fatalf("full grid: hop %s is not a circuit", h)
			}
		}
		// node1.1 (the grid's centre, rank 4) fails.
		sub := top.Subset(withoutRanks(len(top.Ranks), 4))
		var broken []string
		for _, h := range ringHops(sub) {
			if !strings.HasSuffix(h, ":ocs") {
				broken = append(broken, h)
			}
		}
		// The full ring runs ... node2.1 node0.1 node1.1 node1.2 ...:
		// without the centre it steps from node0.1 to node1.2, diagonally,
		// over nothing.
		if got, want := strings.Join(broken, " "), "node0.1>node1.2:none"; got != want {
			t.Fatalf("hops without a circuit: %q, want %q (ring %v)", got, want, ringHops(sub))
		}
	})
}
