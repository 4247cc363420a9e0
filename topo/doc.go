// Package topo models the fabric under a communicator: which hosts, racks,
// NICs, rails and optical circuits connect the ranks, and how fast each
// kind of link is. occl's cost model, its schedules and the reconfiguration
// planner read it; nothing in it sends a byte.
//
// # The model
//
// A Topology is plain data, stored as JSON (Load, Parse, Topology.JSON):
//
//   - Hosts: machines (or emulated machines), each in a multi-host HB
//     domain or alone, under a top-of-rack switch (ToR, its rack), and,
//     on a RailX grid, at a coordinate;
//   - Ranks: processes, each on a host, sending through a NIC on a rail,
//     and driving the optical ports it lists;
//   - NICs: network ports of a host, on the electrical packet network
//     (EPS) or on an optical circuit switch (OCS ports);
//   - Circuits: optical circuits between OCS ports of two hosts;
//   - Classes: alpha-beta parameters (LinkParams) per LinkClass: HBD inside
//     a host or HB domain, EPS, OCS, and None where there is no direct
//     path and traffic must be forwarded (rail-only and grid fabrics).
//
// Topology.Path says how one rank reaches another directly (class, NICs,
// parameters); Subset narrows a topology to some of its ranks (a
// sub-communicator's part of the fabric); Validate checks it; Ring and
// RingOrder give the order flat ring schedules follow.
//
// # Making one
//
//   - FromSpec and FromEnv (OCCL_TOPO): a short spec such as
//     "hosts=4x2,eps=1GB/s,ocs_ports=2" or a JSON file; Uniform and
//     FromHosts for plain hosts;
//   - BuildRailOptimized: rail-optimized fabrics;
//   - BuildRailOnly: rail-only networks ("How to Build Low-cost Networks
//     for Large Language Models (without Sacrificing Performance)?"), with
//     RailRouter and RailOnlyForwarder for the forwarding they need;
//   - BuildKRing: InfinitePOD's K-hop rings of optical transceivers
//     ("InfinitePOD: Building Datacenter-Scale High-Bandwidth Domain for
//     LLM with Optical Circuit Switching Transceivers"), with KHopRing and
//     KHopSegments for rings that bypass faulty nodes, PlaceTPGroups and
//     PlaceTPGroupsToR for tensor-parallel placement, and
//     EstimateKRingWaste for the GPUs that faults leave idle;
//   - BuildRailX: RailX's 2D torus and HyperX grids ("RailX: A Flexible,
//     Scalable, and Low-Cost Network Architecture for Hyper-Scale LLM
//     Training Systems"), with NewRailXFabric for their port maps,
//     WaleckiCycles and DirectedHamiltonianCycles for their rings, and
//     LargestAllocation for faulty grids.
//
// # Optical ports and circuits
//
// AddPorts gives hosts OCS ports; FreePorts, Connect and ConnectFor place
// circuits on them (PlaceCircuits for a demand matrix alone); SwitchPort
// gives a port's number on the optical switch, which numbers its ports
// once for the whole fabric (NIC.SwitchPort, kept by Subset and Without),
// and SwitchCircuits gives the cross-connects it holds; PortOwner names
// the rank that drives a port.
//
// # Rings
//
// HamiltonianRingOrder and FoldedRingOrder turn a ring of hosts into a
// Topology.Ring; GridHamiltonianCycle finds one through a 2D grid.
//
// # After failures
//
// Without gives the survivors of failed ranks a topology whose ring and
// circuits use only links the fabric has: on an InfinitePOD K-hop line
// (KHopReach) a failed node's neighbours switch to the backup link past
// it and HB domains split where none reaches; on a RailX grid the largest
// fault-free allocation stays (LargestAllocation) and every rail's rings
// close over its remaining nodes; elsewhere a host's circuits are spliced
// around it. It also names the healthy ranks left idle (the other GPUs of
// a failed node, the disabled rows or columns). Bypass does the rewiring
// alone, keeping every rank. Subset, by contrast, only drops ranks: the
// survivors' ring would step from a failed host's neighbour to the other
// over a circuit that went to the failed host.
//
// # The local machine
//
// LocalHostID identifies the machine a process runs on (OCCL_HOSTID
// overrides it); Discover describes it (NUMA nodes, NICs, RDMA devices);
// AllowedCPUs, CPUShare and BindProcess pin ranks to their share of it.
package topo
