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
)

// TestRecoverSpareOtherSize: host 1 (two ranks) of the ring of four hosts
// fails, and the survivors call Recover with a spare of three ranks. No
// host of the fabric has three, so every survivor gets an error wrapping
// comm.ErrInvalidArgument that says so, before the Shrink: nothing has
// changed, the controller was not asked, and a Recover without the spare
// on the same communicators then succeeds.
func TestRecoverSpareOtherSize(t *testing.T) {
	_, comms, surv := hostOneFailed(t)
	kept := surv.Ranks
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	three := spec(t, strings.Replace(base, "hosts=4x2", "hosts=1x3", 1)+",switch_ports=8/9")
	ctl := &fakeController{}
	commtest.OnEach(t, comms, func(r int, c *comm.Communicator) error {
		if !slices.Contains(kept, r) {
			return nil
		}
		nc, _, err := reconfig.Recover(ctx, c, nil, reconfig.WithController(ctl), reconfig.WithSpare(reconfig.Spare{Host: three}))
		if nc != nil || !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "3 ranks") {
			return fmt.Errorf("Recover with a spare of three ranks: communicator %v, %v; want none and an invalid argument naming its 3 ranks", nc != nil, err)
		}
		return nil
	})
	if len(ctl.calls) != 0 {
		t.Fatalf("controller asked for %v", ctl.calls)
	}
	recovered := make([]*comm.Communicator, len(kept))
	commtest.OnEach(t, recovered, func(i int, _ *comm.Communicator) error {
		var err error
		recovered[i], _, err = reconfig.Recover(ctx, comms[kept[i]], nil, reconfig.WithController(ctl))
		return err
	})
	defer func() {
		for _, c := range recovered {
			c.Close()
		}
	}()
	commtest.OnEach(t, recovered, func(r int, c *comm.Communicator) error {
		return sumsSurvivors(ctx, c, kept[r], len(kept))
	})
}

// TestRecoverSpareOtherSizeAfterShrink: on a fabric whose host 1 has one
// rank and the others two, a spare of two ranks may replace some hosts,
// so only the Shrink tells that it would replace host 1, which it cannot.
// Every survivor then gets an error wrapping comm.ErrInvalidArgument and
// the survivors' communicator, which still works: an AllReduce adds up.
func TestRecoverSpareOtherSizeAfterShrink(t *testing.T) {
	fabric := spec(t, base+",circuits=0-1/1-2/2-3/3-0").Subset([]int{0, 1, 2, 4, 5, 6, 7})
	if err := fabric.Validate(); err != nil {
		t.Fatal(err)
	}
	comms := commtest.Local(t, 7, comm.WithTopology(fabric), comm.WithEmulation(true))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms[2].Abort() // host 1's only rank
	kept := []int{0, 1, 3, 4, 5, 6}
	ctl := &fakeController{}
	recovered := make([]*comm.Communicator, len(kept))
	defer func() {
		for _, c := range recovered {
			if c != nil {
				c.Close()
			}
		}
	}()
	commtest.OnEach(t, recovered, func(i int, _ *comm.Communicator) error {
		var err error
		recovered[i], _, err = reconfig.Recover(ctx, comms[kept[i]], nil, reconfig.WithController(ctl), reconfig.WithSpare(reconfig.Spare{Host: spareHost(t)}))
		if recovered[i] == nil || !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "2 ranks") {
			return fmt.Errorf("Recover with a spare of two ranks for a host of one: communicator %v, %v; want the survivors' one and an invalid argument", recovered[i] != nil, err)
		}
		return nil
	})
	if len(ctl.calls) != 0 {
		t.Fatalf("controller asked for %v", ctl.calls)
	}
	commtest.OnEach(t, recovered, func(r int, c *comm.Communicator) error {
		if c.Size() != len(kept) || c.Rank() != r {
			return fmt.Errorf("rank %d of %d, want %d of %d", c.Rank(), c.Size(), r, len(kept))
		}
		return sumIs(ctx, c, int64(kept[r]), 19)
	})
}

// TestRecoverSpareNothingLost: Recover with a spare on a communicator
// that lost no rank replaces no host: it succeeds as a recovery without
// the spare, which stays out (Result.Joined is empty, Result.Spare nil).
// Every rank gets a communicator of the eight ranks on the fabric's
// circuits, the controller is asked once, and an AllReduce adds up.
func TestRecoverSpareNothingLost(t *testing.T) {
	fabric := spec(t, base+",circuits=0-1/1-2/2-3/3-0")
	comms := commtest.Local(t, 8, comm.WithTopology(fabric), comm.WithEmulation(true))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl := &fakeController{}
	recovered := make([]*comm.Communicator, len(comms))
	defer func() {
		for _, c := range recovered {
			if c != nil {
				c.Close()
			}
		}
	}()
	want := fmt.Sprint(circuitNames(fabric))
	commtest.OnEach(t, comms, func(r int, c *comm.Communicator) error {
		nc, res, err := reconfig.Recover(ctx, c, nil, reconfig.WithController(ctl), reconfig.WithSpare(reconfig.Spare{Host: spareHost(t)}))
		recovered[r] = nc
		switch {
		case err != nil || nc == nil:
			return fmt.Errorf("Recover with a spare and nothing lost: communicator %v, %v", nc != nil, err)
		case len(res.Joined) > 0 || res.Spare != nil:
			return fmt.Errorf("the spare joined: %d communicators, plan %+v", len(res.Joined), res.Spare)
		case nc.Size() != 8 || nc.Rank() != r:
			return fmt.Errorf("rank %d of %d, want %d of 8", nc.Rank(), nc.Size(), r)
		case fmt.Sprint(circuitNames(nc.Topology())) != want:
			return fmt.Errorf("circuits %v, want %s", circuitNames(nc.Topology()), want)
		}
		return sumIs(ctx, nc, int64(r), 28)
	})
	if len(ctl.calls) != 1 {
		t.Fatalf("controller asked for %v, want one switch", ctl.calls)
	}
}
