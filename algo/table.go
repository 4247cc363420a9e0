package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
	"github.com/occl/occl/topo"
)

// The table of schedules. Its order matters: the size rules take the
// first schedule whose BySize accepts the size, and of schedules with the
// same predicted time the cost model takes the earlier.
func init() {
	register(
		&Schedule{
			Algorithm: AlgoRD,
			Name:      "rd",
			Summary:   "recursive doubling: log2(p) steps exchanging the whole vector, for small, latency-bound buffers",
			Impls: []Impl{{
				Op: OpAllReduce,
				Run: allReduce(inPlace(func(ctx context.Context, a *Args, data []byte) error {
					return AllReduceRD(ctx, a.Peers, a.WS, data, a.DType, a.Op)
				})),
				Cost: func(m *Model, n int) (float64, bool) {
					return m.halvingDoubling(len(m.t.Ranks), float64(n), false), true
				},
				BySize: upTo(&AllReduceRDMaxBytes),
			}},
		},
		&Schedule{
			Algorithm: AlgoRHD,
			Name:      "rhd",
			Summary:   "recursive halving-doubling (Rabenseifner): bandwidth-optimal in 2 log2(p) steps, for medium buffers",
			Impls: []Impl{{
				Op: OpAllReduce,
				Run: allReduce(inPlace(func(ctx context.Context, a *Args, data []byte) error {
					return AllReduceRHD(ctx, a.Peers, a.WS, data, a.DType, a.Op)
				})),
				Cost: func(m *Model, n int) (float64, bool) {
					return m.halvingDoubling(len(m.t.Ranks), float64(n), true), true
				},
				BySize: upTo(&AllReduceRHDMaxBytes),
			}},
		},
		&Schedule{
			Algorithm: AlgoChain,
			Name:      "chain",
			Summary:   "pipelined chain towards the root: every rank reduces the vector once, all at the same time",
			Impls: []Impl{{
				Op: OpReduce,
				Run: func(ctx context.Context, a *Args) error {
					return ReduceChain(ctx, a.Peers, a.WS, a.Src, a.Dst, a.DType, a.Op, a.Root, a.Chunk)
				},
				BySize: reduceByChain,
			}},
		},
		&Schedule{
			Algorithm: AlgoTree,
			Name:      "tree",
			Summary:   "binomial tree rooted at the root: log2(p) steps of the whole buffer",
			Impls: []Impl{{
				Op: OpBroadcast,
				Run: func(ctx context.Context, a *Args) error {
					// The root copies its source itself: while it lends it.
					return broadcastTree(ctx, a.Peers, a.Src, a.Dst, a.Root, a.Chunk, a.Crowded)
				},
				BySize: always,
			}, {
				Op: OpReduce,
				Run: func(ctx context.Context, a *Args) error {
					return ReduceTree(ctx, a.Peers, a.WS, a.Src, a.Dst, a.DType, a.Op, a.Root, a.Chunk)
				},
				BySize: upTo(&ReduceTreeMaxBytes),
			}},
		},
		&Schedule{
			Algorithm: AlgoRing,
			Name:      "ring",
			Summary:   "pipelined ring along the topology's ring: bandwidth-optimal for large buffers",
			Impls: []Impl{{
				Op: OpAllReduce,
				Run: allReduce(func(ctx context.Context, a *Args, src, data []byte) error {
					rp, _ := a.ring()
					return AllReduceRingFrom(ctx, rp, a.WS, src, data, a.DType, a.Op, a.Chunk)
				}),
				Cost: func(m *Model, n int) (float64, bool) {
					return m.ringAllReduce([][]int{m.t.RingOrder()}, len(m.t.Ranks), float64(n)), true
				},
				BySize: always,
			}, {
				Op: OpReduce,
				Run: func(ctx context.Context, a *Args) error {
					return ReduceRing(ctx, a.Peers, a.WS, a.Src, a.Dst, a.DType, a.Op, a.Root, a.Chunk)
				},
				BySize: always,
			}, {
				Op: OpAllGather,
				Run: func(ctx context.Context, a *Args) error {
					// The ring copies this rank's block itself: while it
					// lends it.
					rp, order := a.ring()
					offs, lens := a.blockLayout(order)
					return allGatherRing(ctx, rp, a.Src, a.Dst, layout{offs: offs, lens: lens}, a.Chunk, 0)
				},
				Cost:   func(m *Model, n int) (float64, bool) { return m.ringCollective(n, false), true },
				BySize: always,
			}, {
				Op: OpReduceScatter,
				Run: reduceScatter(func(ctx context.Context, a *Args, src, data []byte) error {
					if rp, order := a.ring(); order != nil {
						offs, lens := a.blockLayout(order)
						return ReduceScatterRingBlocks(ctx, rp, a.WS, src, data, a.DType, a.Op, offs, lens, a.Chunk)
					}
					segs := a.WS.Ints(IntsSegs, a.Peers.Size()+1)
					for i := range segs {
						segs[i] = i * a.Block / a.DType.Size()
					}
					return ReduceScatterRingFrom(ctx, a.Peers, a.WS, src, data, a.DType, a.Op, segs, a.Chunk)
				}),
				Cost:   func(m *Model, n int) (float64, bool) { return m.ringCollective(n, true), true },
				BySize: always,
			}},
		},
		&Schedule{
			Algorithm: AlgoHierarchical,
			Name:      "hier",
			Summary:   "intra-host and inter-host (rail) phases; hosts of equal size",
			Applies:   uniformHosts,
			Impls: []Impl{{
				Op: OpAllReduce,
				Run: allReduce(func(ctx context.Context, a *Args, src, data []byte) error {
					return AllReduceHierarchical(ctx, a.Peers, a.WS, src, data, a.DType, a.Op, a.Hosts, a.Chunk)
				}),
				Cost: (*Model).allReduceHierarchical,
			}, {
				Op: OpAllGather,
				Run: allGather(func(ctx context.Context, a *Args) error {
					return AllGatherHierarchical(ctx, a.Peers, a.WS, a.Dst, a.Block, a.Hosts, a.Chunk)
				}),
				Cost: (*Model).allGatherHierarchical,
			}, {
				Op: OpReduceScatter,
				Run: reduceScatter(func(ctx context.Context, a *Args, src, data []byte) error {
					return ReduceScatterHierarchical(ctx, a.Peers, a.WS, src, data, a.DType, a.Op, a.Block, a.Hosts, a.Chunk)
				}),
				Cost: (*Model).reduceScatterHierarchical,
			}},
		},
		&Schedule{
			Algorithm: AlgoGateway,
			Name:      "gateway",
			Summary:   "reduce onto one gateway per host, ring among gateways, broadcast back",
			Applies:   described,
			Impls: []Impl{{
				Op: OpAllReduce,
				Run: allReduce(func(ctx context.Context, a *Args, src, data []byte) error {
					return AllReduceGateway(ctx, a.Peers, a.WS, src, data, a.DType, a.Op, a.Hosts, a.Chunk)
				}),
				Cost: (*Model).allReduceGateway,
			}},
		},
		&Schedule{
			Algorithm: Algo2D,
			Name:      "2d",
			Summary:   "RailX's 2D allreduce over hosts and rails, two halves in opposite dimension order at once; hosts of equal size",
			Applies:   uniformHosts,
			Impls: []Impl{{
				Op: OpAllReduce,
				Run: allReduce(func(ctx context.Context, a *Args, src, data []byte) error {
					return AllReduce2D(ctx, a.Peers, a.WS, src, data, a.DType, a.Op, a.Hosts, a.Chunk)
				}),
				Cost: (*Model).allReduce2D,
			}},
		},
		&Schedule{
			Algorithm: AlgoPairwise,
			Name:      "pairwise",
			Summary:   "pairwise exchange: p-1 steps, rank r sending to r+s in step s",
			Impls: []Impl{
				pairwise(OpAllToAll),
				pairwise(OpAllToAllV),
			},
		},
		routed(AlgoDelegated, "delegated",
			"mFabric's delegated all-to-all: traffic to a host goes through the ranks that drive optical circuits to it",
			func(t *topo.Topology, bytes [][]int) *Route {
				if len(t.Circuits) == 0 {
					return nil
				}
				return RouteDelegated(t, bytes)
			}),
		routed(AlgoRailForward, "railfwd",
			"forward blocks inside the HB domain to the rank on the destination's rail, then along the rail (rail-only fabrics)",
			func(t *topo.Topology, _ [][]int) *Route { return RouteRailForward(t) }),
		routed(AlgoXY, "xy",
			"route blocks along the X rail, then the Y rail (RailX grids)",
			func(t *topo.Topology, _ [][]int) *Route { return RouteXY(t) }),
		&Schedule{
			Algorithm: AlgoLinear,
			Name:      "linear",
			Summary:   "the root exchanges with every rank directly: p-1 messages at the root",
			Impls: []Impl{{
				Op: OpGather,
				Run: func(ctx context.Context, a *Args) error {
					offs, lens := a.blockLayout(nil)
					data, me := a.Dst, a.Peers.Rank()
					if me == a.Root {
						memcopy.Copy(data[me*a.Block:(me+1)*a.Block], a.Src)
					} else {
						// Off the root only this rank's block is read; point at it.
						offs[me] = 0
						data = a.Src
					}
					return GatherLinear(ctx, a.Peers, data, offs, lens, a.Root)
				},
				BySize: always,
			}, {
				Op: OpScatter,
				Run: func(ctx context.Context, a *Args) error {
					offs, lens := a.blockLayout(nil)
					return ScatterLinear(ctx, a.Peers, a.Src, offs, lens, a.Root, a.Dst)
				},
				BySize: always,
			}},
		},
		&Schedule{
			Algorithm: AlgoDissemination,
			Name:      "dissemination",
			Summary:   "dissemination barrier: ceil(log2 p) rounds of one empty message",
			Impls: []Impl{{
				Op: OpBarrier,
				Run: func(ctx context.Context, a *Args) error {
					if a.Peers.Size() == 1 {
						return nil
					}
					return BarrierDissemination(ctx, a.Peers)
				},
				BySize: always,
			}},
		},
	)
}

// pairwise is the pairwise exchange's implementation of all-to-all c.
func pairwise(c Collective) Impl {
	staged := allToAll(func(ctx context.Context, a *Args, send []byte) error {
		// In place (on a copy of the input), nothing is lent: see
		// pairwiseInPlace.
		return allToAllPairwise(ctx, a.Peers, send, a.SendOffs, a.SendLens, a.Dst, a.RecvOffs, a.RecvLens, !same(a.Src, a.Dst))
	})
	im := Impl{
		Op: c,
		Run: func(ctx context.Context, a *Args) error {
			if same(a.Src, a.Dst) && len(a.Src) > 0 {
				if ran, err := pairwiseInPlace(ctx, a); ran {
					return err
				}
			}
			return staged(ctx, a)
		},
		MatrixCost: (*Model).predictPairwise,
		BySize:     always,
	}
	if c == OpAllToAll {
		im.Cost = uniformAllToAllCost(AlgoPairwise)
	}
	return im
}

// routed describes a routed all-to-all schedule whose routes plan makes.
func routed(a Algorithm, name, summary string, plan func(t *topo.Topology, bytes [][]int) *Route) *Schedule {
	run := allToAll(func(ctx context.Context, args *Args, send []byte) error {
		if args.Route == nil || args.Route.Algorithm != a {
			return fmt.Errorf("algo: rank %d: %s all-to-all run without its route", args.Peers.Rank(), name)
		}
		return AllToAllRouted(ctx, args.Peers, args.WS, args.Route, args.Matrix, send, args.SendOffs, args.Dst, args.RecvOffs)
	})
	return &Schedule{
		Algorithm: a,
		Name:      name,
		Summary:   summary,
		Applies:   routedFabric,
		Impls: []Impl{
			{Op: OpAllToAll, Run: run, Route: plan, Cost: uniformAllToAllCost(a)},
			{Op: OpAllToAllV, Run: run, Route: plan},
		},
	}
}

// uniformAllToAllCost predicts all-to-all schedule a on n bytes per rank,
// split evenly among the ranks.
func uniformAllToAllCost(a Algorithm) func(m *Model, n int) (float64, bool) {
	return func(m *Model, n int) (float64, bool) {
		p := len(m.t.Ranks)
		return m.PredictAllToAll(a, UniformBytes(p, n/p))
	}
}
