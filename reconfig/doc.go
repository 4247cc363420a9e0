// Package reconfig rewires the fabric under live communicators between the
// phases of a job: Reconfigure pauses them at an operation boundary, has
// the OCS controller switch the circuits of a target topology, opens and
// verifies the new links, and resumes the communicators on the new
// topology, with schedules and delegation tables rebuilt for it.
//
// The controller is anything that implements Controller; the gRPC client of
// reconfig/ocs does, against occl-ocsd and its switch drivers. A topology
// names a circuit's ports by NIC index (topo.Circuit); the switch numbers
// its ports over the OCS NICs of the topology in NIC order: switch port i
// is the i-th NIC of class ocs (topo.Topology.SwitchPorts), and the
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
package reconfig
