// Algorithm selection
//
// Select maps (collective, message size, rank count) to a schedule family.
// The size thresholds below are starting points; they are variables so that
// benchmarks and configuration can retune them for a machine and fabric.

package algo

// Size thresholds used by Select. bytes is the size of one rank's buffer
// (for AllReduce, Broadcast and Reduce the whole vector).
var (
	// AllReduceRDMaxBytes is the largest AllReduce that uses recursive
	// doubling: below it latency (log2 p steps) dominates and exchanging
	// the whole vector is cheap.
	AllReduceRDMaxBytes = 16 << 10
	// AllReduceRHDMaxBytes is the largest AllReduce that uses recursive
	// halving-doubling; larger ones use the pipelined ring, whose 2(p-1)
	// steps are amortized and which keeps every link busy.
	AllReduceRHDMaxBytes = 512 << 10
	// ReduceTreeMaxBytes is the largest Reduce that uses the binomial tree;
	// larger ones use the ring reduce, which spreads the reduction work and
	// the root's inbound traffic.
	ReduceTreeMaxBytes = 256 << 10
)

// Supports reports whether a implements collective c in this package.
// AlgoAuto supports everything.
func Supports(c Collective, a Algorithm) bool {
	if a == AlgoAuto {
		return true
	}
	switch c {
	case OpAllReduce:
		return a == AlgoRing || a == AlgoRHD || a == AlgoRD || a == AlgoHierarchical || a == AlgoGateway || a == Algo2D
	case OpBroadcast:
		return a == AlgoTree
	case OpReduce:
		return a == AlgoTree || a == AlgoRing
	case OpAllGather, OpReduceScatter:
		return a == AlgoRing || a == AlgoHierarchical
	case OpAllToAll, OpAllToAllV:
		return a == AlgoPairwise || a == AlgoDelegated || a == AlgoRailForward || a == AlgoXY
	case OpGather, OpScatter:
		return a == AlgoLinear
	case OpBarrier:
		return a == AlgoDissemination
	}
	return false
}

// Select returns the algorithm to run collective c on a buffer of bytes
// bytes (per rank) over nranks ranks. A forced algorithm is used when it
// implements c; otherwise, and for AlgoAuto, the choice is automatic.
// Collectives that have no schedule here (SendRecv, Split) get AlgoAuto.
func Select(c Collective, bytes, nranks int, forced Algorithm) Algorithm {
	if forced != AlgoAuto && Supports(c, forced) {
		return forced
	}
	switch c {
	case OpAllReduce:
		switch {
		case bytes <= AllReduceRDMaxBytes:
			return AlgoRD
		case bytes <= AllReduceRHDMaxBytes:
			return AlgoRHD
		}
		return AlgoRing
	case OpBroadcast:
		return AlgoTree
	case OpReduce:
		if bytes <= ReduceTreeMaxBytes {
			return AlgoTree
		}
		return AlgoRing
	case OpAllGather, OpReduceScatter:
		return AlgoRing
	case OpAllToAll, OpAllToAllV:
		return AlgoPairwise
	case OpGather, OpScatter:
		return AlgoLinear
	case OpBarrier:
		return AlgoDissemination
	}
	return AlgoAuto
}
