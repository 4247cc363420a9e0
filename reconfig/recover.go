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
//     are re-planned, and the communicator rewires onto the new ones.
//
// Step 3 is all or nothing, with the same error on every survivor, as
// Reconfigure is: when it fails, Recover still returns the survivors'
// communicator (running on its part of the old fabric) together with the
// error, which wraps comm.ErrRewire; the caller may retry the
// reconfiguration with Reconfigure. When step 1 or 2 fails there is no
// communicator.
func Recover(ctx context.Context, c *comm.Communicator, exclude []int, opts ...Option) (*comm.Communicator, Result, error) {
	top := c.Topology()
	if top == nil {
		return nil, Result{}, fmt.Errorf("reconfig: recover: rank %d: the communicator has no topology; Shrink is all a recovery needs", c.Rank())
	}
	rank, fabricRanks := c.Rank(), c.FabricRanks()
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
	surv, err := top.Without(lost)
	if err != nil {
		nc.Abort()
		return nil, Result{}, fmt.Errorf("reconfig: recover: rank %d: the fabric without ranks %v: %w", rank, lost, err)
	}
	if len(surv.Idle) > 0 {
		if nc, err = dropIdle(ctx, nc, rank, fabricRanks, surv.Idle); err != nil {
			return nil, Result{}, err
		}
	}
	res, err := Reconfigure(ctx, []*comm.Communicator{nc}, surv.Topology, opts...)
	if err != nil {
		return nc, res, fmt.Errorf("reconfig: recover: rank %d: %w", rank, err)
	}
	return nc, res, nil
}

// dropIdle shrinks nc, the survivors' communicator, by the ranks of c
// (this rank was rank of c, whose ranks had fabricRanks) that the
// survivors' fabric leaves idle. An idle rank aborts nc and gets an error
// wrapping comm.ErrExcluded.
func dropIdle(ctx context.Context, nc *comm.Communicator, rank int, fabricRanks, idle []int) (*comm.Communicator, error) {
	if slices.Contains(idle, rank) {
		nc.Abort()
		return nil, fmt.Errorf("reconfig: recover: rank %d: %w: the survivors' fabric leaves it idle", rank, comm.ErrExcluded)
	}
	var drop []int
	for _, r := range idle {
		if i := slices.Index(nc.FabricRanks(), fabricRanks[r]); i >= 0 {
			drop = append(drop, i)
		}
	}
	nc2, err := nc.Shrink(ctx, drop)
	if err != nil {
		return nil, fmt.Errorf("reconfig: recover: rank %d: dropping the idle ranks %v: %w", rank, idle, err)
	}
	return nc2, nil
}
