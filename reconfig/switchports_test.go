package reconfig_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/reconfig/plan"
	"github.com/occl/occl/topo"
)

// switchNumbers returns circuits, ports named by NIC index of whole (a
// fabric described whole, every host with its ports), as the switch
// numbers its ports: port p is the p-th OCS NIC of whole in NIC order.
// Normalized and sorted, as a switch reports them.
func switchNumbers(t *testing.T, whole *topo.Topology, circuits []topo.Circuit) []topo.Circuit {
	t.Helper()
	port := map[int]int{}
	for i, n := range whole.NICs {
		if n.Class == topo.OCS {
			port[i] = len(port)
		}
	}
	out := []topo.Circuit{}
	for _, c := range circuits {
		a, okA := port[c.A]
		b, okB := port[c.B]
		if !okA || !okB {
			t.Fatalf("circuit %v joins NICs that are not OCS ports of the fabric", c)
		}
		out = append(out, topo.Circuit{A: a, B: b}.Normalize())
	}
	return sortCircuits(out)
}

// sortCircuits normalizes circuits and sorts them by their lower port.
func sortCircuits(cs []topo.Circuit) []topo.Circuit {
	out := make([]topo.Circuit, 0, len(cs))
	for _, c := range cs {
		out = append(out, topo.Circuit{A: c.A, B: c.B}.Normalize())
	}
	slices.SortFunc(out, func(x, y topo.Circuit) int { return cmp.Compare(x.A, y.A) })
	return out
}

// switchTable is what the emulated switch holds, sorted.
func switchTable(t *testing.T, ctx context.Context, em *reconfig.Emulated) []topo.Circuit {
	t.Helper()
	cs, err := em.Switch.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return sortCircuits(cs)
}

// startFabricSwitch serves an emulated switch of ports ports holding the
// circuits of fabric, a fabric described whole.
func startFabricSwitch(t *testing.T, ctx context.Context, fabric *topo.Topology, ports int) *reconfig.Emulated {
	t.Helper()
	em, err := reconfig.StartEmulated(ctx, ports, time.Millisecond, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	if _, err := em.Apply(ctx, "fabric", switchNumbers(t, fabric, fabric.Circuits)); err != nil {
		t.Fatal(err)
	}
	return em
}

// TestRecoverSwitchPorts: host 1 of a ring of four hosts fails, and the
// survivors Recover through the emulated OCS controller (gRPC to an
// emulated switch of the fabric's eight ports, holding the fabric's
// circuits). Afterwards the switch's own circuit table joins exactly the
// ports plan.RecoveryCircuits bypasses host 1 on, by the switch's
// numbering of the whole fabric: host 0's first port to host 2's first
// (switch ports 0 and 4, which went to host 1), the other circuits
// untouched; the survivors' topology names the same circuits, and an
// AllReduce on it adds up.
func TestRecoverSwitchPorts(t *testing.T) {
	fabric, comms, surv := hostOneFailed(t)
	kept := surv.Ranks
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	em := startFabricSwitch(t, ctx, fabric, 8)
	if got := fmt.Sprint(switchTable(t, ctx, em)); got != "[0-2 1-7 3-4 5-6]" {
		t.Fatalf("the switch holds %s, want the fabric's ring [0-2 1-7 3-4 5-6]", got)
	}
	planned, err := plan.RecoveryCircuits(fabric, []int{1}, -1)
	if err != nil {
		t.Fatal(err)
	}
	want := switchNumbers(t, fabric, planned.Circuits)
	if fmt.Sprint(want) != "[0-4 1-7 5-6]" {
		t.Fatalf("planned cross-connects %v, want [0-4 1-7 5-6]", want)
	}
	recovered := make([]*comm.Communicator, len(kept))
	commtest.OnEach(t, recovered, func(i int, _ *comm.Communicator) error {
		var err error
		recovered[i], _, err = reconfig.Recover(ctx, comms[kept[i]], nil, reconfig.WithController(em))
		return err
	})
	defer func() {
		for _, c := range recovered {
			c.Close()
		}
	}()
	if got := switchTable(t, ctx, em); !slices.Equal(got, want) {
		t.Fatalf("after Recover the switch holds %v, want the plan's %v", got, want)
	}
	if n := em.Switch.Stats().Applies; n != 2 {
		t.Fatalf("the switch applied %d times, want twice (the fabric, the recovery)", n)
	}
	wantNames := fmt.Sprint(circuitNames(planned))
	commtest.OnEach(t, recovered, func(r int, c *comm.Communicator) error {
		if got := fmt.Sprint(circuitNames(c.Topology())); got != wantNames {
			return fmt.Errorf("circuits %s, want the plan's %s", got, wantNames)
		}
		return sumsSurvivors(ctx, c, kept[r], len(kept))
	})
}

// TestRecoverSpareSwitchPorts: the same failure, recovered with a spare
// host cabled to switch ports 8 and 9 of a ten-port emulated switch
// (described as its own one-host topology, switch_ports=8/9). The
// switch's circuit table afterwards joins exactly the ports
// plan.RecoveryCircuits moves host 1's circuits to, by the switch's
// numbering: the spare's ports 8 and 9 in place of host 1's 2 and 3, as
// on a five-host fabric whose fifth host is the spare. The eight ranks of
// the grown communicator run on those circuits and an AllReduce adds up.
func TestRecoverSpareSwitchPorts(t *testing.T) {
	fabric, comms, surv := hostOneFailed(t)
	kept := surv.Ranks
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	em := startFabricSwitch(t, ctx, fabric, 10)
	whole := spec(t, strings.Replace(base, "hosts=4x2", "hosts=5x2", 1)+",circuits=0-1/1-2/2-3/3-0")
	whole.Hosts[4].Name = "spare"
	planned, err := plan.RecoveryCircuits(whole, []int{1}, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := switchNumbers(t, whole, planned.Circuits)
	if fmt.Sprint(want) != "[0-8 1-7 4-9 5-6]" {
		t.Fatalf("planned cross-connects %v, want [0-8 1-7 4-9 5-6]", want)
	}
	spare := reconfig.Spare{Host: spareHost(t)}
	grown := make([]*comm.Communicator, len(kept)+2)
	var joined []reconfig.Joined
	commtest.OnEach(t, grown[:len(kept)], func(i int, _ *comm.Communicator) error {
		var res reconfig.Result
		var err error
		grown[i], res, err = reconfig.Recover(ctx, comms[kept[i]], nil, reconfig.WithController(em), reconfig.WithSpare(spare))
		if i == 0 {
			joined = res.Joined
		}
		return err
	})
	if len(joined) != 2 {
		t.Fatalf("survivor 0 got %d spare communicators, want 2", len(joined))
	}
	for i, j := range joined {
		if j.Err != nil {
			t.Fatalf("spare rank %d: %v", i, j.Err)
		}
		grown[len(kept)+i] = j.Comm
	}
	defer func() {
		for _, c := range grown {
			c.Close()
		}
	}()
	if got := switchTable(t, ctx, em); !slices.Equal(got, want) {
		t.Fatalf("after Recover with the spare the switch holds %v, want the plan's %v", got, want)
	}
	wantNames := fmt.Sprint(circuitNames(planned))
	commtest.OnEach(t, grown, func(r int, c *comm.Communicator) error {
		if got := fmt.Sprint(circuitNames(c.Topology())); got != wantNames {
			return fmt.Errorf("circuits %s, want the plan's %s", got, wantNames)
		}
		x := []int64{int64(r), 1}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		if fmt.Sprint(x) != "[28 8]" {
			return fmt.Errorf("AllReduce gave %v, want [28 8]", x)
		}
		return nil
	})
}
