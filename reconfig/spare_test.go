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

// spareHost is a host like those of hostOneFailed's fabric (two ranks,
// one packet NIC, two OCS ports each driven by one rank), named "spare",
// whose OCS ports are cabled to switch ports 8 and 9 (those a fifth host
// of the fabric would have).
func spareHost(t *testing.T) *topo.Topology {
	t.Helper()
	s := spec(t, strings.Replace(base, "hosts=4x2", "hosts=1x2", 1)+",switch_ports=8/9")
	s.Hosts[0].Name = "spare"
	return s
}

// TestRecoverSpare: host 1 of the ring of four hosts fails, and Recover
// with a spare host brings the survivors and the spare's two ranks onto
// one communicator of eight. The controller is asked once for the
// circuits plan.RecoveryCircuits gives when the spare takes host 1's place
// (compared by port names with those of a five-host fabric whose fifth
// host is the spare), every rank runs on them, collectives on the grown
// communicator add up, and the emulated fabric's counters show the
// spare's circuits carrying traffic and nothing on host 1. With a
// controller that fails, every rank, the spare's included, gets the same
// error wrapping comm.ErrRewire, and the grown communicator still works
// on the circuits it had (none to the spare).
func TestRecoverSpare(t *testing.T) {
	whole := spec(t, strings.Replace(base, "hosts=4x2", "hosts=5x2", 1)+",circuits=0-1/1-2/2-3/3-0")
	whole.Hosts[4].Name = "spare"
	moved, err := plan.RecoveryCircuits(whole, []int{1}, 4)
	if err != nil {
		t.Fatal(err)
	}
	wantMoved := circuitNames(moved)
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprintf("controller_fails=%v", failing), func(t *testing.T) {
			_, comms, surv := hostOneFailed(t)
			kept := surv.Ranks
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ctl := &fakeController{}
			if failing {
				ctl.err = errors.New("switch refused")
			}
			spare := reconfig.Spare{Host: spareHost(t)}
			grown := make([]*comm.Communicator, len(kept)+2)
			errs := make([]error, len(grown))
			var joined []reconfig.Joined
			commtest.OnEach(t, grown[:len(kept)], func(i int, _ *comm.Communicator) error {
				var res reconfig.Result
				grown[i], res, errs[i] = reconfig.Recover(ctx, comms[kept[i]], nil, reconfig.WithController(ctl), reconfig.WithSpare(spare))
				if grown[i] == nil {
					return fmt.Errorf("no communicator: %v", errs[i])
				}
				if res.Spare == nil || res.Spare.Replaced != 1 {
					return fmt.Errorf("Result.Spare %+v, want host 1 replaced", res.Spare)
				}
				if i == 0 {
					joined = res.Joined
				} else if len(res.Joined) > 0 {
					return fmt.Errorf("survivor %d got %d spare communicators", i, len(res.Joined))
				}
				return nil
			})
			if len(joined) != 2 {
				t.Fatalf("survivor 0 got %d spare communicators, want 2", len(joined))
			}
			for i, j := range joined {
				grown[len(kept)+i], errs[len(kept)+i] = j.Comm, j.Err
			}
			defer func() {
				for _, c := range grown {
					c.Close()
				}
			}()
			checkRecovered(t, errs, ctl, failing)
			top := grown[0].Topology()
			got := circuitNames(top)
			if failing {
				// The circuits between survivors, as they were.
				want := []string{"host2:ocs1-host3:ocs0", "host0:ocs1-host3:ocs1"}
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("circuits after the failed switch %v, want %v", got, want)
				}
			} else {
				if !slices.Equal(got, wantMoved) {
					t.Fatalf("circuits %v, want RecoveryCircuits' %v", got, wantMoved)
				}
				switched, err := top.SwitchCircuits()
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(ctl.sets[0]) != fmt.Sprint(switched) {
					t.Fatalf("switched %v, want %v", ctl.sets[0], switched)
				}
			}
			for r, c := range grown {
				if c.Size() != 8 || c.Rank() != r || fmt.Sprint(circuitNames(c.Topology())) != fmt.Sprint(got) {
					t.Fatalf("rank %d: rank %d of %d on circuits %v, want %d of 8 on %v", r, c.Rank(), c.Size(), circuitNames(c.Topology()), r, got)
				}
			}
			// Contributions: the survivors' old ranks, then 8 and 9 for
			// the spare's ranks.
			traffic := collectiveTraffic(t, ctx, grown, append(slices.Clone(kept), 8, 9))
			if err := avoidsHost(top, "host1", traffic); err != nil {
				t.Fatal(err)
			}
			onSpare := 0
			for _, c := range top.Circuits {
				if strings.Contains(circuitName(top, c), "spare:") {
					onSpare++ // avoidsHost saw it carry bytes
				}
			}
			if want := map[bool]int{false: 2, true: 0}[failing]; onSpare != want {
				t.Fatalf("%d circuits of the spare carried traffic, want %d: %v", onSpare, want, traffic.Links)
			}
			t.Logf("links that carried the collectives: %v", traffic.Links)
		})
	}
}

// TestPlanSpare: the plan of a spare for a failed rank of a host keeps
// the other ranks, drops the failed host's healthy rank and puts the
// spare's ranks last; it is an error without a lost rank, with a spare of
// another size or of several hosts.
func TestPlanSpare(t *testing.T) {
	fabric := spec(t, base+",circuits=0-1/1-2/2-3/3-0")
	p, err := reconfig.PlanSpare(fabric, []int{3}, spareHost(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.Replaced != 1 || fmt.Sprint(p.Kept) != "[0 1 4 5 6 7]" || fmt.Sprint(p.Drop) != "[2]" {
		t.Fatalf("replaced %d, kept %v, drop %v", p.Replaced, p.Kept, p.Drop)
	}
	for _, top := range []*topo.Topology{p.Grown, p.Target} {
		if len(top.Ranks) != 8 || top.Hosts[top.Ranks[6].Host].Name != "spare" || top.Hosts[top.Ranks[7].Host].Name != "spare" {
			t.Fatalf("ranks 6 and 7 are not the spare's: %+v", top.Ranks)
		}
	}
	if got := fmt.Sprint(circuitNames(p.Grown)); got != "[host0:ocs1-host3:ocs1 host2:ocs1-host3:ocs0]" {
		t.Errorf("grown circuits %s", got)
	}
	if got := fmt.Sprint(circuitNames(p.Target)); got != "[host0:ocs0-spare:ocs0 host0:ocs1-host3:ocs1 host2:ocs0-spare:ocs1 host2:ocs1-host3:ocs0]" {
		t.Errorf("target circuits %s", got)
	}
	if _, err := reconfig.PlanSpare(fabric, nil, spareHost(t)); err == nil {
		t.Error("a plan without a lost rank")
	}
	if _, err := reconfig.PlanSpare(fabric, []int{2}, spec(t, strings.Replace(base, "hosts=4x2", "hosts=1x3", 1)+",switch_ports=8/9")); err == nil || !strings.Contains(err.Error(), "3 ranks") {
		t.Errorf("a spare of three ranks replaced a host of two: %v", err)
	}
	if _, err := reconfig.PlanSpare(fabric, []int{2}, spec(t, strings.Replace(base, "hosts=4x2", "hosts=2x2", 1)+",switch_ports=8-11")); err == nil || !strings.Contains(err.Error(), "2 hosts") {
		t.Errorf("a spare of two hosts: %v", err)
	}
	// The spare must say which switch ports it is cabled to, and they must
	// be free on the fabric's switch.
	if _, err := reconfig.PlanSpare(fabric, []int{2}, spec(t, strings.Replace(base, "hosts=4x2", "hosts=1x2", 1))); err == nil || !strings.Contains(err.Error(), "switch port") {
		t.Errorf("a spare without switch ports: %v", err)
	}
	if _, err := reconfig.PlanSpare(fabric, []int{2}, spec(t, strings.Replace(base, "hosts=4x2", "hosts=1x2", 1)+",switch_ports=7/8")); err == nil || !strings.Contains(err.Error(), "switch port 7") {
		t.Errorf("a spare on host 3's switch port 7: %v", err)
	}
}

// TestRecoverSpareTCP: the same recovery between communicators made over
// TCP (one per goroutine, as processes would be): the survivors Recover
// with the spare's grow rendezvous, the spare's two ranks call JoinSpare
// with the plan of the lost ranks, and all eight end up on the circuits
// RecoveryCircuits moves to the spare, where an AllReduce adds up.
func TestRecoverSpareTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("bootstraps three communicators of eight ranks over TCP")
	}
	fabric := spec(t, base+",circuits=0-1/1-2/2-3/3-0")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := []comm.Option{comm.WithTransport(comm.TransportTCP), comm.WithEmulation(true)}
	id, err := comm.NewUniqueIDAt("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*comm.Communicator, 8)
	commtest.OnEach(t, comms, func(r int, _ *comm.Communicator) error {
		var err error
		comms[r], err = comm.Init(ctx, id, r, 8, append(slices.Clone(opts), comm.WithTopology(fabric))...)
		return err
	})
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	comms[2].Abort()
	comms[3].Abort()
	growID, err := comm.NewUniqueIDAt("127.0.0.1:0") // rank 0 survives
	if err != nil {
		t.Fatal(err)
	}
	spare := reconfig.Spare{Host: spareHost(t), ID: growID}
	p, err := reconfig.PlanSpare(fabric, []int{2, 3}, spare.Host)
	if err != nil {
		t.Fatal(err)
	}
	ctl := &fakeController{}
	kept := []int{0, 1, 4, 5, 6, 7}
	grown := make([]*comm.Communicator, 8)
	defer func() {
		for _, c := range grown {
			if c != nil {
				c.Close()
			}
		}
	}()
	commtest.OnEach(t, grown, func(r int, _ *comm.Communicator) error {
		var err error
		if r < len(kept) {
			var res reconfig.Result
			grown[r], res, err = reconfig.Recover(ctx, comms[kept[r]], nil, reconfig.WithController(ctl), reconfig.WithSpare(spare))
			// Over TCP the Result is how a survivor learns that the
			// spare came in, and in whose place.
			if err == nil && (res.Spare == nil || res.Spare.Replaced != 1 || !slices.Equal(res.Spare.Kept, kept)) {
				err = fmt.Errorf("Result.Spare %+v, want host 1 replaced, ranks %v kept", res.Spare, kept)
			}
		} else {
			grown[r], _, err = reconfig.JoinSpare(ctx, growID, p, opts, reconfig.WithController(ctl))
		}
		return err
	})
	if len(ctl.calls) != 1 {
		t.Fatalf("controller asked %d times, want once", len(ctl.calls))
	}
	want := fmt.Sprint(circuitNames(p.Target))
	x := make([][]int64, 8)
	commtest.OnEach(t, grown, func(r int, c *comm.Communicator) error {
		if got := fmt.Sprint(circuitNames(c.Topology())); c.Size() != 8 || got != want {
			return fmt.Errorf("size %d on circuits %s, want 8 on %s", c.Size(), got, want)
		}
		x[c.Rank()] = []int64{int64(c.Rank()), 1}
		if err := comm.AllReduce(ctx, c, x[c.Rank()], x[c.Rank()], comm.Sum); err != nil {
			return err
		}
		if fmt.Sprint(x[c.Rank()]) != "[28 8]" {
			return fmt.Errorf("AllReduce gave %v, want [28 8]", x[c.Rank()])
		}
		return nil
	})
}

// TestRecoverSpareDrop: only rank 3 of host 1 fails. The spare takes the
// whole host's place, so its healthy rank 2 gets ErrExcluded, and the six
// ranks of the other hosts grow with the spare's two into a communicator
// of eight on which an AllReduce adds up.
func TestRecoverSpareDrop(t *testing.T) {
	fabric := spec(t, base+",circuits=0-1/1-2/2-3/3-0")
	comms := commtest.Local(t, 8, comm.WithTopology(fabric), comm.WithEmulation(true))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms[3].Abort()
	alive := []int{0, 1, 2, 4, 5, 6, 7}
	out := make([]*comm.Communicator, len(alive))
	errs := make([]error, len(alive))
	var joined []reconfig.Joined
	commtest.OnEach(t, out, func(i int, _ *comm.Communicator) error {
		var res reconfig.Result
		out[i], res, errs[i] = reconfig.Recover(ctx, comms[alive[i]], nil, reconfig.WithController(&fakeController{}), reconfig.WithSpare(reconfig.Spare{Host: spareHost(t)}))
		if len(res.Joined) > 0 {
			joined = res.Joined
		}
		return nil
	})
	var grown []*comm.Communicator
	for i, r := range alive {
		switch {
		case r == 2 && (!errors.Is(errs[i], comm.ErrExcluded) || out[i] != nil):
			t.Errorf("rank 2 of the replaced host: %v, want ErrExcluded and no communicator", errs[i])
		case r != 2 && errs[i] != nil:
			t.Errorf("rank %d: %v", r, errs[i])
		case r != 2:
			grown = append(grown, out[i])
		}
	}
	for _, j := range joined {
		if j.Err != nil {
			t.Errorf("spare rank %d: %v", j.Comm.Rank(), j.Err)
		}
		grown = append(grown, j.Comm)
	}
	defer func() {
		for _, c := range grown {
			c.Close()
		}
	}()
	if t.Failed() {
		t.FailNow()
	}
	if len(grown) != 8 {
		t.Fatalf("%d ranks after the recovery, want 8", len(grown))
	}
	commtest.OnEach(t, grown, func(r int, c *comm.Communicator) error {
		if c.Rank() != r || c.Size() != 8 {
			return fmt.Errorf("rank %d of %d, want %d of 8", c.Rank(), c.Size(), r)
		}
		return sumIs(ctx, c, int64(r), 28)
	})
}

// TestRecoverWrongSpare: a spare described by two hosts, one whose OCS
// ports do not say which switch ports they are cabled to, and one on a
// switch port of host 3 fail Recover at once, before the Shrink, so the
// communicator is not touched: an AllReduce on it still adds up.
func TestRecoverWrongSpare(t *testing.T) {
	fabric := spec(t, base+",circuits=0-1/1-2/2-3/3-0")
	comms := commtest.Local(t, 8, comm.WithTopology(fabric))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, wrong := range []struct{ spec, says string }{
		{strings.Replace(base, "hosts=4x2", "hosts=2x2", 1) + ",switch_ports=8-11", "2 hosts"},
		{strings.Replace(base, "hosts=4x2", "hosts=1x2", 1), "does not say which switch port"},
		{strings.Replace(base, "hosts=4x2", "hosts=1x2", 1) + ",switch_ports=8/7", "both switch port 7"},
	} {
		spare := spec(t, wrong.spec)
		commtest.OnEach(t, comms, func(r int, c *comm.Communicator) error {
			nc, _, err := reconfig.Recover(ctx, c, nil, reconfig.WithSpare(reconfig.Spare{Host: spare}))
			if nc != nil || err == nil || !strings.Contains(err.Error(), wrong.says) {
				return fmt.Errorf("Recover with the spare %s: %v, %v; want an error saying %q", wrong.spec, nc, err, wrong.says)
			}
			return sumIs(ctx, c, int64(r), 28)
		})
	}
}
