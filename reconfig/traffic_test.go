package reconfig_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport/emu"
)

// TestRecoverTraffic checks where the survivors' traffic goes after
// Recover around host 1 of the ring of four hosts (hostOneFailed): on the
// emulated fabric's counters, collectives on the recovered communicator
// cross no link with an end on host 1, every circuit of the rewired fabric
// carries bytes, among them the bypass that joins the two ports that went
// to host 1 (on hosts 0 and 2). On a communicator that only shrank, whose
// fabric was not rewired, those two ports have no circuit and the same
// check fails: the pair they join talks over the packet network.
func TestRecoverTraffic(t *testing.T) {
	for _, recover := range []bool{true, false} {
		t.Run(fmt.Sprintf("recover=%v", recover), func(t *testing.T) {
			fabric, comms, surv := hostOneFailed(t)
			kept := surv.Ranks
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ctl := &fakeController{}
			next := make([]*comm.Communicator, len(kept))
			commtest.OnEach(t, next, func(i int, _ *comm.Communicator) error {
				var err error
				if recover {
					next[i], _, err = reconfig.Recover(ctx, comms[kept[i]], nil, reconfig.WithController(ctl))
				} else {
					next[i], err = comms[kept[i]].Shrink(ctx, nil)
				}
				return err
			})
			defer func() {
				for _, c := range next {
					c.Close()
				}
			}()
			moved := collectiveTraffic(t, ctx, next, kept)
			top := next[0].Topology()
			err := errors.Join(avoidsHost(top, fabric.Hosts[1].Name, moved), bypassed(fabric, 1, top, moved))
			switch {
			case recover && err != nil:
				t.Fatalf("after Recover: %v", err)
			case !recover && err == nil:
				t.Fatalf("the check passes on the fabric Shrink left, which has no bypass: %v", moved.Links)
			}
			t.Logf("links that carried the collectives: %v (check: %v)", moved.Links, err)
		})
	}
}

// collectiveTraffic runs an AllReduce and an AllToAll on every rank of
// comms (communicators of the survivors' ranks kept of hostOneFailed's
// fabric, all on one emulated fabric), checks their results, and returns
// what the emulated fabric carried for them.
func collectiveTraffic(t *testing.T, ctx context.Context, comms []*comm.Communicator, kept []int) emu.Stats {
	t.Helper()
	before, ok := comms[0].FabricStats()
	if !ok {
		t.Fatal("the communicator has no emulated fabric")
	}
	n := len(comms)
	commtest.OnEach(t, comms, func(r int, c *comm.Communicator) error {
		x := make([]int64, 1<<14)
		for i := range x {
			x[i] = int64(kept[r] + i)
		}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		sum := 0
		for _, k := range kept {
			sum += k
		}
		for i, v := range x {
			if want := int64(sum + n*i); v != want {
				return fmt.Errorf("AllReduce: element %d = %d, want %d", i, v, want)
			}
		}
		const block = 1 << 10
		send, recv := make([]int64, n*block), make([]int64, n*block)
		for i := range send {
			send[i] = int64(1000*r + i/block) // to rank i/block
		}
		if err := comm.AllToAll(ctx, c, send, recv); err != nil {
			return err
		}
		for i, v := range recv {
			if want := int64(1000*(i/block) + r); v != want {
				return fmt.Errorf("AllToAll: element %d = %d, want %d", i, v, want)
			}
		}
		return nil
	})
	after, _ := comms[0].FabricStats()
	return after.Since(before)
}

// end names a NIC of t ("host0:ocs1"), or a host for an HBD link end: the
// names a Subset of the fabric keeps, unlike the indices.
func end(t *topo.Topology, l emu.Link, i int) string {
	if l.Class == topo.HBD {
		return t.Hosts[i].Name
	}
	if i < 0 {
		return "none"
	}
	return t.Hosts[t.NICs[i].Host].Name + ":" + t.NICs[i].Name
}

// avoidsHost checks the traffic moved on top (the topology of the
// communicator that moved it) after host lost failed: no link with
// traffic has an end on the failed host (by name), and every circuit of
// top carried bytes.
func avoidsHost(top *topo.Topology, lost string, moved emu.Stats) error {
	var errs []error
	for l, b := range moved.Links {
		a, z := end(top, l, l.A), end(top, l, l.B)
		for _, e := range []string{a, z} {
			if e == lost || strings.HasPrefix(e, lost+":") {
				errs = append(errs, fmt.Errorf("%s link %s-%s, on failed %s, carried %d bytes", l.Class, a, z, lost, b))
			}
		}
	}
	for _, c := range top.Circuits {
		c = c.Normalize()
		if moved.Links[emu.Link{Class: topo.OCS, A: c.A, B: c.B}] == 0 {
			errs = append(errs, fmt.Errorf("circuit %s carried nothing", circuitName(top, c)))
		}
	}
	return errors.Join(errs...)
}

// circuitName names circuit c of t by its ports' names, in order.
func circuitName(t *topo.Topology, c topo.Circuit) string {
	pair := []string{end(t, emu.Link{}, c.A), end(t, emu.Link{}, c.B)}
	slices.Sort(pair)
	return pair[0] + "-" + pair[1]
}

// circuitNames names the circuits of t, sorted.
func circuitNames(t *topo.Topology) []string {
	var out []string
	for _, c := range t.Circuits {
		out = append(out, circuitName(t, c))
	}
	slices.Sort(out)
	return out
}

// bypassed checks the traffic moved on top after host failed of fabric
// was lost: a circuit joining the ports at the far ends of the failed
// host's circuits in fabric (its bypass) carried bytes.
func bypassed(fabric *topo.Topology, failed int, top *topo.Topology, moved emu.Stats) error {
	var ends []string
	for _, c := range fabric.Circuits {
		switch failed {
		case fabric.NICs[c.A].Host:
			ends = append(ends, end(fabric, emu.Link{}, c.B))
		case fabric.NICs[c.B].Host:
			ends = append(ends, end(fabric, emu.Link{}, c.A))
		}
	}
	slices.Sort(ends)
	want := strings.Join(ends, "-")
	for l, b := range moved.Links {
		if l.Class == topo.OCS && b > 0 && circuitName(top, topo.Circuit{A: l.A, B: l.B}) == want {
			return nil
		}
	}
	return fmt.Errorf("no circuit %s (joining the ports that went to %s) carried bytes", want, fabric.Hosts[failed].Name)
}
