package algo

import "github.com/occl/occl/topo"

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
	// ReduceTreeMaxBytes is the largest Reduce over more than
	// ReduceChainMaxRanks ranks that uses the binomial tree; larger ones
	// use the ring reduce, which spreads the reduction work and the root's
	// inbound traffic.
	ReduceTreeMaxBytes = 256 << 10
	// ReduceChainMinBytes and ReduceChainMaxRanks bound the Reduces that
	// take the pipelined chain: above ReduceChainMinBytes, up to
	// ReduceChainMaxRanks ranks (see reduceByChain).
	ReduceChainMinBytes = 64 << 10
	ReduceChainMaxRanks = 8
)

// Supports reports whether a implements collective c in this package.
// AlgoAuto supports everything.
func Supports(c Collective, a Algorithm) bool {
	return a == AlgoAuto || implOf(c, a) != nil
}

// Select returns the algorithm to run collective c on a buffer of bytes
// bytes (per rank) over nranks ranks without a cost model. A forced
// algorithm is used when it implements c; otherwise, and for AlgoAuto, the
// size rules choose: the first schedule of the table whose Impl.BySize
// accepts the size. Collectives that have no schedule here (SendRecv,
// Split) get AlgoAuto.
func Select(c Collective, bytes, nranks int, forced Algorithm) Algorithm {
	if forced != AlgoAuto && Supports(c, forced) {
		return forced
	}
	for _, s := range schedules {
		if im := s.Impl(c); im != nil && im.BySize != nil && im.BySize(bytes, nranks) {
			return s.Algorithm
		}
	}
	return AlgoAuto
}

// Choose returns the schedule to run collective c on bytes bytes over
// nranks ranks of the fabric t (nil: one host, or no description) with
// its cost model m (nil without a topology): the forced schedule if it
// implements c and applies to t, else the model's choice if it applies,
// else Select's. All-to-alls are chosen by their byte matrix
// (Model.ChooseAllToAll); this chooses for an even split.
func Choose(c Collective, bytes, nranks int, t *topo.Topology, m *Model, forced Algorithm) Algorithm {
	if forced != AlgoAuto && Applicable(c, forced, t) {
		return forced
	}
	if m != nil {
		if a, _ := m.Choose(c, bytes); a != AlgoAuto && Applicable(c, a, t) {
			return a
		}
	}
	return Select(c, bytes, nranks, AlgoAuto)
}

// RoutesAllToAll reports whether all-to-alls on the fabric t take a route
// chosen by the cost model: a routed schedule applies to t, and the forced
// schedule (AlgoAuto: none) is not an unrouted all-to-all.
func RoutesAllToAll(t *topo.Topology, forced Algorithm) bool {
	if im := implOf(OpAllToAllV, forced); im != nil && im.Route == nil {
		return false
	}
	for _, s := range schedules {
		if im := s.Impl(OpAllToAllV); im != nil && im.Route != nil && (s.Applies == nil || s.Applies(t)) {
			return true
		}
	}
	return false
}
