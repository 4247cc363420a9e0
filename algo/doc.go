// Package algo holds occl's collective schedules, reduction kernels and the
// rules that choose between them.
//
// A schedule is written once against Peers, an abstract set of ranks that can
// exchange byte messages. It never knows which transport carries the bytes, so
// the same code runs over TCP, shared memory, RDMA, the in-process transport
// and the emulated fabric. Schedules do no I/O of their own beyond Peers and
// allocate nothing per message: staging memory comes from a Workspace that the
// communicator keeps between operations. A message that a schedule only
// reduces into its own data is reduced where the connection holds it
// when the Peers can show it there (ViewPeers, over transport.Viewer: the
// shared-memory rings), one read of every byte instead of a copy out and
// a read: the ring and recursive halving-doubling reduce-scatters, the
// tree and chain reduces and the fold of a non-power-of-two all-reduce do
// so.
//
// # Schedules as data
//
// Every schedule family is one Schedule in one table (table.go, listed by
// Schedules): its Algorithm and name (OCCL_ALGO), the fabrics it applies
// to (Applies, a predicate over the topology), and for each collective it
// implements an Impl: how to run it (Run, over Args), its predicted time
// (Cost, from the cost model; Route for routed all-to-alls) and whether
// the size rules pick it without a cost model (BySize). Everything that
// chooses or runs a schedule reads the table:
//
//   - Select: the size rules, for communicators without a topology;
//   - Model.Choose and Model.ChooseAllToAll: the cheapest schedule the cost
//     model predicts, in table order on ties;
//   - Choose: the forced schedule where it implements the collective and
//     applies, else the model's choice, else the size rules; the
//     communicator calls it for every operation;
//   - Run: runs a schedule's Impl. Every Impl takes its input from
//     Args.Src and leaves its output in Args.Dst, whether the two are the
//     same memory (in place) or not, so the communicator has no in-place
//     special cases.
//
// The default size thresholds (AllReduceRDMaxBytes, AllReduceRHDMaxBytes,
// ReduceTreeMaxBytes, ReduceChainMinBytes, ReduceChainMaxRanks) are variables so that benchmarks and configuration
// can retune them for a machine and fabric.
//
// # Index of schedules
//
// p is the number of ranks, n the bytes of the buffer (AllReduce's vector,
// AllGather's output, ReduceScatter's and AllToAll's input), p' the
// largest power of two not above p, H hosts of L ranks each. Steps are
// communication steps (a step may be cut into pipelined chunks); bytes are
// per rank and each way unless stated. The doc of each schedule's
// function, named in the last column, describes its steps, message labels
// and operand order in full.
//
//	rd (AlgoRD)                 AllReduce                 AllReduceRD
//	    recursive doubling; small vectors (size rule: n <= AllReduceRDMaxBytes)
//	    steps log2 p' (+2 when p is not a power of two)
//	    bytes n log2 p' (folded pairs +n)
//	rhd (AlgoRHD)               AllReduce                 AllReduceRHD
//	    recursive halving-doubling (Rabenseifner); medium vectors
//	    (size rule: n <= AllReduceRHDMaxBytes)
//	    steps 2 log2 p' (+2 when p is not a power of two)
//	    bytes 2(p'-1)/p' n (folded pairs +n)
//	chain (AlgoChain)           Reduce                    ReduceChain
//	    pipelined chain p-1 -> ... -> 0 towards the root, in chunks; by size
//	    rule when n > ReduceChainMinBytes and p <= ReduceChainMaxRanks
//	    steps p-1, pipelined over the chunks
//	    bytes every non-root rank sends n, every rank but the last receives n
//	tree (AlgoTree)             Broadcast, Reduce         BroadcastTree, ReduceTree
//	    binomial tree; Reduce by size rule when n <= ReduceTreeMaxBytes
//	    (and the chain's does not apply)
//	    steps ceil(log2 p) levels (Broadcast pipelined in chunks)
//	    bytes every non-root rank receives (Broadcast) or sends (Reduce) n;
//	          the root sends or receives ceil(log2 p) n
//	ring (AlgoRing)             AllReduce, Reduce,        AllReduceRing, ReduceRing,
//	                            AllGather, ReduceScatter  AllGatherRing, ReduceScatterRing
//	    pipelined ring along the topology's ring; large buffers
//	    steps AllReduce 2(p-1); AllGather, ReduceScatter p-1; Reduce p-1 + 1
//	    bytes AllReduce 2(p-1)/p n; AllGather, ReduceScatter (p-1)/p n;
//	          Reduce (p-1)/p n, then n/p to the root
//	hier (AlgoHierarchical)     AllReduce, AllGather,     AllReduceHierarchical, AllGatherHierarchical
//	                            ReduceScatter
//	    intra-host and rail phases; hosts of equal size
//	    steps AllReduce 2(L-1) in hosts + 2(H-1) between;
//	          AllGather, ReduceScatter L-1 + H-1
//	    bytes AllReduce 2(L-1)/L n in hosts, 2(H-1)/(HL) n on the network;
//	          AllGather, ReduceScatter (L-1)/L n in hosts, (H-1)/(HL) n on rails
//	gateway (AlgoGateway)       AllReduce                 AllReduceGateway
//	    tree onto one gateway per host, ring among gateways, tree back;
//	    any described fabric, hosts of any size
//	    steps 2 ceil(log2 L) in hosts + 2(H-1) between
//	    bytes 2(H-1)/H n per gateway on the network, n per tree level in hosts
//	2d (Algo2D)                 AllReduce                 AllReduce2D
//	    RailX's 2D allreduce, two halves in opposite dimension order at
//	    once; hosts of equal size (X = L, Y = H)
//	    steps 2(X-1) + 2(Y-1) per half, the halves concurrent
//	    bytes (X-1)/X n (Y+1)/Y on X links and (Y-1)/Y n (X+1)/X on Y links
//	pairwise (AlgoPairwise)     AllToAll, AllToAllV       AllToAllPairwise
//	    pairwise exchange, rank r sending to r+s in step s
//	    steps p-1
//	    bytes (p-1)/p n
//	delegated (AlgoDelegated)   AllToAll, AllToAllV       RouteDelegated, AllToAllRouted
//	    mFabric's delegated all-to-all over optical circuits; fabrics with
//	    circuits
//	    steps 3 phases (gather to the delegation rank, circuit, scatter)
//	    bytes inter-host bytes cross the network once, plus an HB link at
//	          each end that is not a delegation rank
//	railfwd (AlgoRailForward)   AllToAll, AllToAllV       RouteRailForward, AllToAllRouted
//	    forward inside the HB domain to the destination's rail, then along
//	    it; rail-only fabrics (x ranks per domain, y domains, D per block)
//	    steps 2 phases
//	    bytes (x-1) y D on the HB fabric, x (y-1) D on the rail
//	xy (AlgoXY)                 AllToAll, AllToAllV       RouteXY, AllToAllRouted
//	    along the X rail, then the Y rail; hosts on a grid (RailX)
//	    steps 2 phases
//	    bytes Y D in the X phase, (Y-1) X D in the Y phase
//	linear (AlgoLinear)         Gather, Scatter           GatherLinear, ScatterLinear
//	    the root exchanges with every rank directly
//	    steps 1, the root's p-1 messages one after the other
//	    bytes every non-root rank sends (Gather) or receives (Scatter) its
//	          block; the root n minus its own block
//	dissemination (AlgoDissemination)  Barrier            BarrierDissemination
//	    dissemination barrier (Hensgen, Finkel and Manber, 1988)
//	    steps ceil(log2 p) rounds
//	    bytes ceil(log2 p) empty messages
//
// # Cost model
//
// Model is an alpha-beta model of the schedules on a topology, used to
// choose the fastest and to explain the choice. A schedule is a sequence
// of communication steps; in one step a set of flows (source rank,
// destination rank, bytes) runs at once. A flow's time is its path's
// latency plus a per-step software overhead plus the larger of its bytes
// over the path bandwidth and the load its NICs carry in that step over
// their bandwidth (ranks of a host that share a NIC share its bandwidth).
// A step lasts as long as its slowest flow, and a schedule as long as the
// sum of its steps. Phases that run at once on disjoint links (the two
// halves of the 2D allreduce) cost the longer of the two. The formulas:
// a ring reduce-scatter or allgather over p ranks is p-1 steps of n/p
// bytes; the hierarchical allreduce adds an intra-host reduce-scatter and
// allgather (L-1 steps of n/L each) around an inter-host ring of the n/L
// segment (2(H-1) steps of n/(LH)); the 2D allreduce is RailX's
// 2[T_R(X, n/2) + T_R(Y, n/(2X))] with both dimensions busy at once.
// A routed all-to-all
// costs the sum of its phases, every message of a phase in flight at
// once; a flow between ranks with no path makes a schedule infinitely
// slow, which is how the model rules it out.
//
// # How to add a schedule
//
// Take a Bruck allgather as the example: ceil(log2 p) steps in which rank
// r sends what it holds to rank r-2^k.
//
// First, write the kernel in its own file, bruck_allgather.go, against
// Peers and Workspace, e.g. AllGatherBruck(ctx, p, ws, data, blockBytes),
// with a doc comment giving its steps, message step labels, bytes on the
// wire and the Workspace slots it stages in (a named Slot constant), and
// list it in the index above; test it on the fake network of
// algo/internal/fakepeers (runRanks over netConfigs) against a serial
// computation.
//
// Second, give it an identity: append AlgoBruck before numAlgorithms in
// collective.go (the values are API: append, never renumber) and list its
// name beside ParseAlgorithm (TestParseAlgorithmDoc checks it).
//
// Third, describe it once, in the table in table.go:
//
//	&Schedule{
//		Algorithm: AlgoBruck,
//		Name:      "bruck",
//		Summary:   "Bruck's allgather: ceil(log2 p) steps, any p",
//		Impls: []Impl{{
//			Op: OpAllGather,
//			Run: allGather(func(ctx context.Context, a Args) error {
//				return AllGatherBruck(ctx, a.Peers, a.WS, a.Dst, a.Block)
//			}),
//			Cost: (*Model).allGatherBruck,
//		}},
//	},
//
// The collective's wrapper (allGather here; allReduce, inPlace, reduce,
// broadcast, reduceScatter and allToAll for the others) does what every
// schedule of the collective does alike: in-place and out-of-place
// inputs, the cases with nothing to exchange. Applies (nil: everywhere)
// restricts the schedule to the fabrics it suits; Cost, a Model method
// built from stepTime and ringTime, lets the cost model weigh it; BySize
// makes the size rules pick it without a topology. Its place in the table
// decides ties.
//
// Fourth, add it to the index above.
//
// Nothing in comm changes: OCCL_ALGO=bruck forces it, the cost model
// considers it, TestTable and TestRunSrcDst run it in place and out of
// place. Regenerate comm's golden file of schedule choices (go test
// ./comm -run TestScheduleChoiceGolden -update) and review the diff: it
// lists exactly the choices the new schedule takes over.
package algo
