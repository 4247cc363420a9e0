// Package reconfig rewires the fabric under live communicators between the
// phases of a job: Reconfigure pauses them at an operation boundary, has
// the OCS controller switch the circuits of a target topology, opens and
// verifies the new links, and resumes the communicators on the new
// topology, with schedules and delegation tables rebuilt for it.
//
// The controller is anything that implements Controller; the gRPC client of
// reconfig/ocs does, against occl-ocsd and its switch drivers. A topology
// names a circuit's ports by NIC index (topo.Circuit); the switch numbers
// its ports once for the whole fabric: in a fabric described whole, switch
// port i is the i-th NIC of class ocs in NIC order, and a topology derived
// from it (Subset, Without, a shrunk or split communicator's) keeps each
// port's number (topo.NIC.SwitchPort, topo.Topology.SwitchPort). The
// controller is given the target's circuits in switch ports
// (topo.Topology.SwitchCircuits).
//
// A typical MoE step overlaps the switch with expert computation:
//
//	h := reconfig.ReconfigureAsync(ctx, []*comm.Communicator{ep}, target, reconfig.WithController(ctl))
//	computeExperts()          // hides the switching time
//	res, err := h.Wait(ctx)   // usually already done
//	comm.AllToAllV(ctx, ep, ...) // on the new circuits
//
// Operations issued on a communicator after ReconfigureAsync wait for it;
// none is dropped. On any failure every rank gets the same error
// (comm.ErrRewire), the previous circuits are restored if they had been
// switched, and the communicators keep working on the previous topology.
//
// # After a host fails
//
// A recovery composes the pieces in three steps:
//
//  1. the survivors agree on the failed ranks and build a communicator of
//     their own (shrinking the old one);
//  2. s, err := t.Without(failed) (topo) says what the fabric t still
//     carries: s.Ranks keep working, s.Idle are healthy ranks it cannot
//     use any more (the other GPUs of a failed InfinitePOD node, the rest
//     of a disabled RailX row or column: exclude them with the failed
//     ones), and s.Topology, the survivors' topology, has a ring that
//     crosses only existing links. On an optical circuit switch,
//     plan.RecoveryCircuits(t, failedHosts, spare) plans the circuits
//     instead: the failed hosts bypassed, or a spare host switched into
//     the place of one (its ranks join the survivors' communicator);
//  3. Reconfigure switches the fabric to the new circuits and rewires the
//     communicators onto them, through a communicator that spans its
//     target (fabric ranks 0..n-1 of it). The controller gets the
//     switch's own port numbers, those of the whole fabric, whether the
//     target keeps every port (RecoveryCircuits') or only the survivors'
//     (Without's, Subset's): the ports they keep keep their numbers. A
//     spare host, described apart, names the switch ports it is cabled
//     to (Spare.Host).
package reconfig
