package algo

import (
	"fmt"
	"strings"
)

// Collective identifies a communication operation. The numeric values are
// part of the wire format: they are carried in frame headers and operation
// fingerprints, so that ranks running different collectives detect it.
type Collective uint8

// Collective operations.
const (
	OpAllReduce     Collective = 1
	OpBroadcast     Collective = 2
	OpReduce        Collective = 3
	OpAllGather     Collective = 4
	OpReduceScatter Collective = 5
	OpAllToAll      Collective = 6
	OpAllToAllV     Collective = 7
	OpGather        Collective = 8
	OpScatter       Collective = 9
	OpBarrier       Collective = 10
	OpSendRecv      Collective = 11
	OpSplit         Collective = 12
	OpRewire        Collective = 13
	OpGrow          Collective = 14
)

var collectiveNames = [...]string{
	OpAllReduce:     "AllReduce",
	OpBroadcast:     "Broadcast",
	OpReduce:        "Reduce",
	OpAllGather:     "AllGather",
	OpReduceScatter: "ReduceScatter",
	OpAllToAll:      "AllToAll",
	OpAllToAllV:     "AllToAllV",
	OpGather:        "Gather",
	OpScatter:       "Scatter",
	OpBarrier:       "Barrier",
	OpSendRecv:      "SendRecv",
	OpSplit:         "Split",
	OpRewire:        "Rewire",
	OpGrow:          "Grow",
}

// Valid reports whether c is a known collective.
func (c Collective) Valid() bool {
	return int(c) < len(collectiveNames) && collectiveNames[c] != ""
}

// String returns the name of the collective, e.g. "AllReduce".
func (c Collective) String() string {
	if !c.Valid() {
		return fmt.Sprintf("collective(%d)", uint8(c))
	}
	return collectiveNames[c]
}

// Algorithm names a schedule family. AlgoAuto lets Select choose by
// collective, size and rank count.
type Algorithm uint8

// Algorithms.
const (
	// AlgoAuto lets Select choose.
	AlgoAuto Algorithm = iota
	// AlgoRing passes chunks around a ring: bandwidth-optimal for large
	// buffers (AllReduce, ReduceScatter, AllGather, Reduce).
	AlgoRing
	// AlgoRHD is recursive halving-doubling (Rabenseifner) AllReduce:
	// bandwidth-optimal with log2(p) steps, for medium buffers.
	AlgoRHD
	// AlgoRD is recursive doubling AllReduce: log2(p) steps exchanging the
	// whole vector, for small, latency-bound buffers.
	AlgoRD
	// AlgoTree is a binomial tree (Broadcast, Reduce).
	AlgoTree
	// AlgoPairwise is the pairwise-exchange all-to-all.
	AlgoPairwise
	// AlgoLinear has the root talk to every rank directly (Gather,
	// Scatter).
	AlgoLinear
	// AlgoDissemination is the dissemination barrier.
	AlgoDissemination
	// AlgoHierarchical runs intra-host and inter-host phases (AllReduce:
	// reduce-scatter, rail allreduce, allgather; AllGather and
	// ReduceScatter: a rail phase and a host phase).
	AlgoHierarchical
	// AlgoGateway reduces onto one gateway per host, runs a ring among
	// gateways and broadcasts back (AllReduce).
	AlgoGateway
	// Algo2D is RailX's 2D allreduce over hosts and rails, two halves in
	// opposite dimension order at once (AllReduce).
	Algo2D
	// AlgoDelegated is mFabric's delegated all-to-all: traffic to a host
	// goes through the ranks that drive optical circuits to it
	// (AllToAll, AllToAllV).
	AlgoDelegated
	// AlgoRailForward forwards all-to-all blocks inside the HB domain to
	// the rank on the destination's rail (rail-only fabrics).
	AlgoRailForward
	// AlgoXY routes all-to-all blocks along the X rail, then the Y rail
	// (RailX grids).
	AlgoXY
	// AlgoChain is the pipelined chain reduce (Reduce).
	AlgoChain

	numAlgorithms
)

// Valid reports whether a is a known algorithm.
func (a Algorithm) Valid() bool { return a < numAlgorithms }

// String returns the lower-case name of the algorithm as ParseAlgorithm
// accepts it.
func (a Algorithm) String() string {
	switch {
	case a == AlgoAuto:
		return "auto"
	case !a.Valid() || byAlgo[a] == nil:
		return fmt.Sprintf("algorithm(%d)", uint8(a))
	}
	return byAlgo[a].Name
}

// ParseAlgorithm parses an algorithm name as String returns it, ignoring
// case and surrounding space; the empty string means AlgoAuto. The names
// are those of the table of schedules (Schedules):
//
//	auto           AlgoAuto: the cost model or the size rules choose
//	ring           AlgoRing
//	rhd            AlgoRHD
//	rd             AlgoRD
//	tree           AlgoTree
//	pairwise       AlgoPairwise
//	linear         AlgoLinear
//	dissemination  AlgoDissemination
//	hier           AlgoHierarchical
//	gateway        AlgoGateway
//	2d             Algo2D
//	delegated      AlgoDelegated
//	railfwd        AlgoRailForward
//	xy             AlgoXY
//	chain          AlgoChain
func ParseAlgorithm(s string) (Algorithm, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return AlgoAuto, nil
	}
	names := make([]string, 0, numAlgorithms)
	for a := AlgoAuto; a < numAlgorithms; a++ {
		if a.String() == s {
			return a, nil
		}
		names = append(names, a.String())
	}
	return AlgoAuto, fmt.Errorf("unknown algorithm %q (want one of %s)", s, strings.Join(names, ", "))
}
