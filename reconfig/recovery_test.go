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
	"github.com/occl/occl/reconfig/plan"
	"github.com/occl/occl/topo"
)

// TestRecoveryTarget switches a fabric to the circuits RecoveryCircuits
// plans when host 1 of a ring of four hosts fails and spare host 4 takes
// its place: the switch is asked for the ring with the spare where host 1
// was, and the survivors with the spare run collectives on their part of
// the target. (In one process the failed host's ranks still run; here
// they only hold the fabric's ports.)
func TestRecoveryTarget(t *testing.T) {
	fabric := spec(t, "hosts=5x2,nics=host,ocs_ports=2,hbd=8GB/s,eps=1GB/s,ocs=1GB/s,circuits=0-1/1-2/2-3/3-0")
	target, err := plan.RecoveryCircuits(fabric, []int{1}, 4)
	if err != nil {
		t.Fatal(err)
	}
	comms := commtest.Local(t, 10, comm.WithTopology(fabric), comm.WithEmulation(true))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl := &fakeController{}
	if _, err := reconfig.Reconfigure(ctx, comms, target, reconfig.WithController(ctl)); err != nil {
		t.Fatal(err)
	}
	// Switch port p is on host p/2 (two OCS ports per host).
	var hops []string
	for _, c := range ctl.sets[0] {
		hops = append(hops, fmt.Sprintf("%d-%d", c.A/2, c.B/2))
	}
	if got, want := fmt.Sprint(hops), "[0-4 0-3 2-4 2-3]"; got != want {
		t.Fatalf("switched host pairs %s, want %s (circuits %v)", got, want, ctl.sets[0])
	}
	kept := []int{0, 1, 4, 5, 6, 7, 8, 9}
	part := target.Subset(kept)
	sub := commtest.Local(t, len(kept), comm.WithTopology(part), comm.WithEmulation(true))
	commtest.OnEach(t, sub, func(r int, c *comm.Communicator) error {
		x := make([]float64, 1000)
		for i := range x {
			x[i] = float64(r*1000 + i)
		}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		for i, v := range x {
			// sum over r of r*1000 + i
			if want := float64(1000*len(kept)*(len(kept)-1)/2 + len(kept)*i); v != want {
				return fmt.Errorf("element %d = %v, want %v", i, v, want)
			}
		}
		if n := len(c.Topology().Circuits); n != 4 {
			return fmt.Errorf("%d circuits in the survivors' part, want 4", n)
		}
		return nil
	})
}

// TestReconfigureShrunk: the survivors of a failed host shrink, and the
// communicator Shrink made switches the survivors' fabric
// (Topology.Without) like one made by Init: the controller is asked once
// for the target's circuits in the switch's ports, numbered over the
// whole fabric (host 1's ports 2 and 3 included, not the survivors' ports
// renumbered), every survivor runs on them, and collectives work; groups
// split from it run on their part of the target.
func TestReconfigureShrunk(t *testing.T) {
	fabric, comms, surv := hostOneFailed(t)
	kept := surv.Ranks
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	target := surv.Topology
	shrunk := make([]*comm.Communicator, len(kept))
	commtest.OnEach(t, shrunk, func(i int, _ *comm.Communicator) error {
		var err error
		shrunk[i], err = comms[kept[i]].Shrink(ctx, nil)
		return err
	})
	defer func() {
		for _, c := range shrunk {
			c.Close()
		}
	}()
	if before := shrunk[0].Topology(); len(before.Circuits) == len(target.Circuits) {
		t.Fatalf("the shrunk topology already has the target's %d circuits", len(target.Circuits))
	}
	// Groups split from the shrunk communicator: its even and odd ranks.
	split := make([]*comm.Communicator, len(kept))
	commtest.OnEach(t, shrunk, func(r int, c *comm.Communicator) error {
		var err error
		split[r], err = c.Split(ctx, r%2, r)
		return err
	})
	defer func() {
		for _, c := range split {
			c.Close()
		}
	}()
	ctl := &fakeController{}
	if _, err := reconfig.Reconfigure(ctx, append(append([]*comm.Communicator(nil), shrunk...), split...), target, reconfig.WithController(ctl)); err != nil {
		t.Fatal(err)
	}
	// The bypass of host 1 on the whole fabric's switch: host 0's first
	// port (switch port 0) joined to host 2's first (4), the ports that
	// went to host 1, the other circuits as they were.
	bypassed, err := fabric.Bypass([]int{1})
	if err != nil {
		t.Fatal(err)
	}
	want := switchNumbers(t, fabric, bypassed.Circuits)
	if fmt.Sprint(want) != "[0-4 1-7 5-6]" {
		t.Fatalf("the fabric's bypass of host 1 is %v, want [0-4 1-7 5-6]", want)
	}
	if len(ctl.sets) != 1 || fmt.Sprint(ctl.sets[0]) != fmt.Sprint(want) {
		t.Fatalf("switched %v, want once %v", ctl.sets, want)
	}
	commtest.OnEach(t, shrunk, func(r int, c *comm.Communicator) error {
		if got := fmt.Sprint(c.Topology().Circuits); got != fmt.Sprint(target.Circuits) {
			return fmt.Errorf("circuits %s, want %s", got, fmt.Sprint(target.Circuits))
		}
		return sumsSurvivors(ctx, c, kept[r], len(kept))
	})
	// Each group runs on its part of the target, in the shrunk
	// communicator's numbering: old ranks 0, 4, 6 and 1, 5, 7.
	commtest.OnEach(t, split, func(r int, c *comm.Communicator) error {
		part := target.Subset([]int{r % 2, r%2 + 2, r%2 + 4})
		if len(part.Circuits) == 0 {
			return fmt.Errorf("group %d: no circuit in its part of the target", r%2)
		}
		if got := fmt.Sprint(c.Topology().Circuits); got != fmt.Sprint(part.Circuits) {
			return fmt.Errorf("group %d: circuits %s, want %s", r%2, got, fmt.Sprint(part.Circuits))
		}
		x := []int64{int64(kept[r])}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		if want := []int64{10, 13}[r%2]; x[0] != want {
			return fmt.Errorf("group %d: AllReduce gave %d, want %d", r%2, x[0], want)
		}
		return nil
	})
}

// TestRecover: host 1 of a ring of four hosts fails (its ranks abort), and
// every survivor calls Recover: each gets a communicator of the six
// survivors running on the fabric without host 1, which the controller
// was asked once to switch to, and collectives on it add up. With a
// controller that fails, every survivor gets the same error, wrapping
// comm.ErrRewire, and a communicator that still works on its part of the
// old fabric.
func TestRecover(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprintf("controller_fails=%v", failing), func(t *testing.T) {
			fabric, comms, surv := hostOneFailed(t)
			kept := surv.Ranks
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			want := surv.Topology.Circuits
			if failing {
				want = fabric.Subset(kept).Circuits
			}
			ctl := &fakeController{}
			if failing {
				ctl.err = errors.New("switch refused")
			}
			recovered := make([]*comm.Communicator, len(kept))
			errs := make([]error, len(kept))
			commtest.OnEach(t, recovered, func(i int, _ *comm.Communicator) error {
				recovered[i], _, errs[i] = reconfig.Recover(ctx, comms[kept[i]], nil, reconfig.WithController(ctl))
				if recovered[i] == nil {
					return fmt.Errorf("no communicator: %v", errs[i])
				}
				return nil
			})
			defer func() {
				for _, c := range recovered {
					c.Close()
				}
			}()
			checkRecovered(t, errs, ctl, failing)
			commtest.OnEach(t, recovered, func(r int, c *comm.Communicator) error {
				if c.Size() != len(kept) || c.Rank() != r {
					return fmt.Errorf("rank %d of %d, want %d of %d", c.Rank(), c.Size(), r, len(kept))
				}
				if got := fmt.Sprint(c.Topology().Circuits); got != fmt.Sprint(want) {
					return fmt.Errorf("circuits %s, want %s", got, fmt.Sprint(want))
				}
				return sumsSurvivors(ctx, c, kept[r], len(kept))
			})
		})
	}
}

// hostOneFailed makes 8 in-process ranks on a ring of four two-rank hosts
// with emulated links, and fails host 1 (ranks 2 and 3 abort). It returns
// the fabric, the communicators (closed when the test ends) and what
// survives: ranks 0, 1 and 4 to 7.
func hostOneFailed(t *testing.T) (*topo.Topology, []*comm.Communicator, topo.Survivors) {
	t.Helper()
	fabric := spec(t, base+",circuits=0-1/1-2/2-3/3-0")
	comms := commtest.Local(t, 8, comm.WithTopology(fabric), comm.WithEmulation(true))
	comms[2].Abort()
	comms[3].Abort()
	surv, err := fabric.Without([]int{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(surv.Ranks) != "[0 1 4 5 6 7]" {
		t.Fatalf("survivors %v, want [0 1 4 5 6 7]", surv.Ranks)
	}
	return fabric, comms, *surv
}

// sumsSurvivors runs an AllReduce of (old rank, 1) on c, a communicator
// of the survivors of hostOneFailed, and checks that it adds up the
// survivors' old ranks (0+1+4+5+6+7) and counts n ranks.
func sumsSurvivors(ctx context.Context, c *comm.Communicator, old, n int) error {
	x := []int64{int64(old), 1}
	if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
		return err
	}
	if x[0] != 23 || x[1] != int64(n) {
		return fmt.Errorf("AllReduce gave %v, want [23 %d]", x, n)
	}
	return nil
}

// checkRecovered checks what every rank's Recover returned (errs, by
// rank) and how often ctl was asked: with a controller that does not fail,
// no error and one switch; with one that fails (saying "switch refused"),
// the same failure wrapping ErrRewire on every rank, and a second call to
// restore the old circuits.
func checkRecovered(t *testing.T, errs []error, ctl *fakeController, failing bool) {
	t.Helper()
	for r, err := range errs {
		switch {
		case !failing && err != nil:
			t.Errorf("rank %d: %v", r, err)
		case failing && (!errors.Is(err, comm.ErrRewire) || !strings.Contains(err.Error(), "switch refused")):
			t.Errorf("rank %d: %v, want the controller's failure wrapping ErrRewire", r, err)
		case failing && cause(err) != cause(errs[0]):
			t.Errorf("rank %d: %v, rank 0: %v", r, err, errs[0])
		}
	}
	if n, want := len(ctl.calls), map[bool]int{false: 1, true: 2}[failing]; n != want {
		t.Fatalf("controller asked %d times (%v), want %d", n, ctl.calls, want)
	}
}

// cause is what a survivor's Recover error says after the part that names
// the rank.
func cause(err error) string {
	_, after, _ := strings.Cut(err.Error(), "Rewire (seq ")
	return after
}

// TestRecoverIdle fails rank 8 of a 3x3 grid of two-rank nodes: the
// survivors' fabric gives up a row or column, so five healthy ranks are
// left idle. Recover drops them: they get ErrExcluded, and the twelve
// others a communicator of twelve on which an AllReduce adds up.
func TestRecoverIdle(t *testing.T) {
	fabric := spec(t, "hosts=9x2,grid=3x3")
	comms := commtest.Local(t, 18, comm.WithTopology(fabric))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms[8].Abort()
	surv, err := fabric.Without([]int{8})
	if err != nil {
		t.Fatal(err)
	}
	alive := slices.Delete(slices.Clone(comms), 8, 9)
	recovered := make([]*comm.Communicator, len(alive))
	errs := commtest.Each(alive, func(i int, c *comm.Communicator) (err error) {
		recovered[i], _, err = reconfig.Recover(ctx, c, nil)
		return err
	})
	var kept []*comm.Communicator
	for i, c := range alive {
		old := c.Rank()
		switch idle := slices.Contains(surv.Idle, old); {
		case idle && !errors.Is(errs[i], comm.ErrExcluded):
			t.Errorf("idle rank %d: %v, want ErrExcluded", old, errs[i])
		case !idle && errs[i] != nil:
			t.Errorf("rank %d: %v", old, errs[i])
		case !idle:
			kept = append(kept, recovered[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	defer func() {
		for _, c := range kept {
			c.Close()
		}
	}()
	if len(kept) != len(surv.Ranks) {
		t.Fatalf("%d recovered, want %d", len(kept), len(surv.Ranks))
	}
	commtest.OnEach(t, kept, func(r int, c *comm.Communicator) error {
		if c.Size() != len(kept) {
			return fmt.Errorf("size %d, want %d", c.Size(), len(kept))
		}
		return sumIs(ctx, c, 1, int64(len(kept)))
	})
}
