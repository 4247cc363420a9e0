// Package plan chooses optical circuits for a reconfigurable fabric and
// predicts the demand they are chosen for. Everything in it is a pure,
// deterministic function of its arguments (the predictors keep only the
// history they are given): no I/O, no clocks, no randomness.
//
// The pieces, in the order a reconfiguration uses them (the mFabric paper,
// on training Mixture-of-Experts models over a reconfigurable optical
// fabric, sec. 5.1-5.2 and App. B):
//
//   - Demand: AggregateDemand and ServerDemand sum an expert- or rank-level
//     all-to-all matrix into a server-level one, TX and RX added into the
//     upper triangle as Algorithm 1 line 5 does (Undirected).
//   - Planning: MFabric is Algorithm 1 (ReconfigureOCS) as published:
//     bottleneck-first greedy that stops at the first bottleneck it cannot
//     serve. MFabricContinue skips such pairs and keeps allocating, so it
//     never ends with a longer completion time. PlaceMatching adapts
//     topo.PlaceCircuits (matching rounds that count the packet network).
//     Best runs all three and keeps the fastest under the completion-time
//     model.
//   - Model: Evaluate / CompletionTime give the completion time of a demand
//     under a circuit assignment with a packet network for the rest; MaxT
//     is the paper's own measure, max D/C.
//   - Ports: PortMapping turns circuit counts into port-level cross
//     connects, several circuits between two servers spread over different
//     NUMA nodes (Algorithm 1 line 16, permuteLinks); TopologyCircuits does
//     the same for a topo.Topology whose OCS NICs are the ports.
//   - Recovery: RecoveryCircuits plans the circuits after hosts failed,
//     bypassing them (each failed host's neighbours on a rail joined to
//     each other, on the ports that went to it; K-hop lines switch to
//     their backup links) or switching a spare into the place of one,
//     with only the ports that lost a circuit changed.
//   - Prediction of the first forward all-to-all of a layer (App. B):
//     PreviousLayer, MovingAverage, and Transition, the weighted
//     least-squares estimate of a column-stochastic transition matrix
//     between consecutive layers' expert loads ("mFabric-Copilot").
//
// Bad input (mismatched dimensions, negative, NaN or infinite demand,
// negative port counts) is an error, never a panic.
package plan
