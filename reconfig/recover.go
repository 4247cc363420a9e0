package reconfig

import (
	"context"
	"fmt"
	"slices"

	"github.com/occl/occl/comm"
)

// Recover brings this rank of c, a communicator that lost ranks, onto a
// communicator of the survivors that runs on a fabric rewired around the
// lost ranks. Every surviving rank of c calls it, after an operation
// returned a *comm.PeerError or to drop the ranks in exclude on purpose
// (ranks of c; the excluded ranks call nothing). c must have a topology
// numbered as its ranks (one Init, NewLocal or an earlier Recover made);
// without one, comm.Communicator.Shrink is all there is to do. Three
// steps:
//
//  1. c.Shrink(ctx, exclude): the survivors agree on who is left and
//     bootstrap a communicator of their own (see Shrink for what is lost
//     and what the caller redoes); c is closed.
//  2. The survivors' fabric: c's topology without the lost ranks
//     (topo.Topology.Without), whose rings cross only links the fabric
//     still has. Healthy ranks it leaves idle (the rest of a failed node,
//     the rows and columns a RailX allocation gives up) are dropped by a
//     second Shrink; on those ranks Recover returns an error wrapping
//     comm.ErrExcluded.
//  3. Reconfigure onto that fabric through the controller of
//     WithController, if any: the circuits that went to the lost ranks
//     are re-planned (on an optical switch, the failed host's neighbours
//     are joined to each other on the ports that went to it), and the
//     communicator rewires onto the new ones.
//
// With WithSpare, a spare host takes the place of the lowest host that
// lost a rank (PlanSpare), and steps 2 and 3 become:
//
//  2. The healthy ranks of the replaced host are dropped by a second
//     Shrink (they get comm.ErrExcluded), and the survivors grow by the
//     spare's ranks (comm.Communicator.GrowLocal in process, Grow at
//     Spare.ID over TCP, where the spare's processes call JoinSpare):
//     the grown communicator has the survivors as ranks 0 to k-1 and the
//     spare's ranks after them, on SparePlan.Grown.
//  3. Reconfigure the grown communicator onto SparePlan.Target through
//     the controller: the replaced host's circuits move to the spare's
//     ports (plan.RecoveryCircuits), other failed hosts are bypassed.
//     The spare's ranks take part (in process, Recover on the survivors'
//     rank 0 runs their part and returns their communicators in
//     Result.Joined).
//
// Step 3 is all or nothing, with the same error on every survivor (and
// every rank of the spare), as Reconfigure is: when it fails, Recover
// still returns the survivors' communicator (the grown one with a spare)
// running on its part of the old fabric together with the error, which
// wraps comm.ErrRewire; the caller may retry the reconfiguration with
// Reconfigure. A grow that fails returns the survivors' communicator
// with Grow's error (one wrapping comm.ErrGrow if the spare did not come
// in time). A spare that is not one host without circuits, whose OCS
// ports do not name switch ports of their own (none of the fabric's), or
// whose number of ranks no host of c's topology has (a spare takes the
// place of a host of as many ranks as its own), fails at once, before the
// Shrink, with an error wrapping comm.ErrInvalidArgument: c is left as it
// was. On a fabric whose hosts differ in size, the host to replace is
// known only after the Shrink: if it has another number of ranks than the
// spare, or the spare cannot take its place otherwise (PlanSpare fails),
// Recover returns the survivors' communicator, on its part of the old
// fabric, with PlanSpare's error. When step 1 or 2 fails otherwise there
// is no communicator.
//
// When the Shrink finds that no rank was lost (none failed and exclude is
// empty), there is no host to replace: Recover goes on as without
// WithSpare (steps 2 and 3 of the plain recovery), returns a communicator
// of c's ranks, and leaves the spare waiting, as a standby host is left
// when no worker failed. Result.Joined is then empty, Result.Spare nil
// (where a spare joined, it is the plan carried out), and over TCP the
// spare's processes, in JoinSpare, are not joined (they fail once their
// context ends).
func Recover(ctx context.Context, c *comm.Communicator, exclude []int, opts ...Option) (*comm.Communicator, Result, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if c == nil {
		return nil, Result{}, fmt.Errorf("reconfig: recover: no communicator")
	}
	top := c.Topology()
	if top == nil {
		return nil, Result{}, fmt.Errorf("reconfig: recover: rank %d: the communicator has no topology; Shrink is all a recovery needs", c.Rank())
	}
	rank, fabricRanks := c.Rank(), c.FabricRanks()
	if o.spare != nil {
		// Before the Shrink, so that a wrong spare costs nothing.
		err := checkSpareOn(top, o.spare.Host)
		if err == nil {
			err = checkSpareSize(top, o.spare.Host)
		}
		if err != nil {
			return nil, Result{}, fmt.Errorf("reconfig: recover: rank %d: %w: %w", rank, comm.ErrInvalidArgument, err)
		}
	}
	nc, err := c.Shrink(ctx, exclude)
	if err != nil {
		return nil, Result{}, fmt.Errorf("reconfig: recover: rank %d: %w", rank, err)
	}
	// Rank r of c survived if its fabric rank is one of nc's.
	kept := nc.FabricRanks()
	var lost []int
	for r, f := range fabricRanks {
		if !slices.Contains(kept, f) {
			lost = append(lost, r)
		}
	}
	if o.spare != nil && len(lost) > 0 {
		// With nothing lost, no host is replaced: the plain recovery.
		return recoverSpare(ctx, top, rank, fabricRanks, nc, lost, &o, opts)
	}
	surv, err := top.Without(lost)
	if err != nil {
		nc.Abort()
		return nil, Result{}, fmt.Errorf("reconfig: recover: rank %d: the fabric without ranks %v: %w", rank, lost, err)
	}
	if len(surv.Idle) > 0 {
		if nc, err = dropRanks(ctx, nc, rank, fabricRanks, surv.Idle, "the survivors' fabric leaves it idle"); err != nil {
			return nil, Result{}, err
		}
	}
	res, err := Reconfigure(ctx, []*comm.Communicator{nc}, surv.Topology, opts...)
	if err != nil {
		return nc, res, fmt.Errorf("reconfig: recover: rank %d: %w", rank, err)
	}
	return nc, res, nil
}

// dropRanks shrinks nc, the survivors' communicator, by the ranks drop
// of c (this rank was rank of c, whose ranks had fabricRanks), for the
// reason given. A dropped rank aborts nc and gets an error wrapping
// comm.ErrExcluded.
func dropRanks(ctx context.Context, nc *comm.Communicator, rank int, fabricRanks, drop []int, reason string) (*comm.Communicator, error) {
	if slices.Contains(drop, rank) {
		nc.Abort()
		return nil, fmt.Errorf("reconfig: recover: rank %d: %w: %s", rank, comm.ErrExcluded, reason)
	}
	var out []int
	for _, r := range drop {
		if i := slices.Index(nc.FabricRanks(), fabricRanks[r]); i >= 0 {
			out = append(out, i)
		}
	}
	nc2, err := nc.Shrink(ctx, out)
	if err != nil {
		return nil, fmt.Errorf("reconfig: recover: rank %d: dropping ranks %v (%s): %w", rank, drop, reason, err)
	}
	return nc2, nil
}
