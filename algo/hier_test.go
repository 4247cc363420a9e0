package algo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// grids are the host layouts the composite schedules are tested on: H
// hosts of L ranks each.
var grids = [][2]int{{1, 1}, {1, 3}, {3, 1}, {2, 2}, {4, 2}, {2, 4}, {3, 3}, {2, 3}}

// hostsOf lays out H hosts of L ranks. With shuffle, ranks are assigned to
// hosts in a random order, so that nothing relies on host-major numbering.
func hostsOf(H, L int, shuffle *rand.Rand) [][]int {
	ranks := make([]int, H*L)
	for i := range ranks {
		ranks[i] = i
	}
	if shuffle != nil {
		shuffle.Shuffle(len(ranks), func(i, j int) { ranks[i], ranks[j] = ranks[j], ranks[i] })
	}
	hosts := make([][]int, H)
	for h := range hosts {
		hosts[h] = ranks[h*L : (h+1)*L]
	}
	return hosts
}

type compositeAllReduce func(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, hosts [][]int, chunk int) error

var composites = []struct {
	name string
	fn   compositeAllReduce
}{
	{"hierarchical", AllReduceHierarchical},
	{"gateway", AllReduceGateway},
	{"2d", AllReduce2D},
}

func TestCompositeAllReduce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cs := combos()
	i := 0
	for _, ar := range composites {
		for _, g := range grids {
			H, L := g[0], g[1]
			for _, count := range []int{0, 1, 5, 1031, 1 << 14} {
				for _, outOfPlace := range []bool{false, true} {
					c := cs[i%len(cs)]
					net, opts := netConfig(i)
					i++
					hosts := hostsOf(H, L, rng)
					name := fmt.Sprintf("%s/%dx%d/n%d/oop%v/%v/%v/%s", ar.name, H, L, count, outOfPlace, c.dt, c.op, net)
					t.Run(name, func(t *testing.T) {
						p := H * L
						in := rankInputs(c.dt, c.op, p, count)
						want := serialReduce(c.dt, c.op, in)
						got := make([][]byte, p)
						for r := range got {
							if outOfPlace {
								got[r] = make([]byte, len(in[r]))
							} else {
								got[r] = append([]byte(nil), in[r]...)
							}
						}
						runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
							var src []byte
							if outOfPlace {
								src = in[rank]
							}
							return ar.fn(ctx, peers, new(Workspace), src, got[rank], c.dt, c.op, hosts, 256)
						})
						for r := range got {
							if d := firstDiff(got[r], want, c.dt.Size()); d != "" {
								t.Fatalf("rank %d: %s", r, d)
							}
						}
						if outOfPlace {
							again := rankInputs(c.dt, c.op, p, count)
							for r := range in {
								if d := firstDiff(in[r], again[r], c.dt.Size()); d != "" {
									t.Fatalf("rank %d: input changed: %s", r, d)
								}
							}
						}
					})
				}
			}
		}
	}
}

func TestHierarchicalAllGatherReduceScatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i, g := range grids {
		H, L := g[0], g[1]
		p := H * L
		hosts := hostsOf(H, L, rng)
		for _, bc := range []int{0, 1, 7, 300} {
			net, opts := netConfig(i + bc)
			t.Run(fmt.Sprintf("%dx%d/block%d/%s", H, L, bc, net), func(t *testing.T) {
				dt, op := Int32, Sum
				es := dt.Size()
				// AllGather: rank r contributes makeInput(r)[:bc].
				blocks := rankInputs(dt, op, p, bc)
				out := make([][]byte, p)
				for r := range out {
					out[r] = make([]byte, p*bc*es)
					copy(out[r][r*bc*es:], blocks[r])
				}
				runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
					return AllGatherHierarchical(ctx, peers, new(Workspace), out[rank], bc*es, hosts, 128)
				})
				for r := range out {
					for j := 0; j < p; j++ {
						if d := firstDiff(out[r][j*bc*es:(j+1)*bc*es], blocks[j], es); d != "" {
							t.Fatalf("allgather rank %d block %d: %s", r, j, d)
						}
					}
				}
				// ReduceScatter: every rank holds p blocks; rank r keeps the
				// reduction of block r.
				full := rankInputs(dt, op, p, p*bc)
				want := serialReduce(dt, op, full)
				res := make([][]byte, p)
				for r := range res {
					res[r] = make([]byte, p*bc*es)
				}
				runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
					return ReduceScatterHierarchical(ctx, peers, new(Workspace), full[rank], res[rank], dt, op, bc*es, hosts, 128)
				})
				for r := range res {
					if d := firstDiff(res[r][r*bc*es:(r+1)*bc*es], want[r*bc*es:(r+1)*bc*es], es); d != "" {
						t.Fatalf("reduce-scatter rank %d: %s", r, d)
					}
				}
			})
		}
	}
}

func TestSubPeers(t *testing.T) {
	runRanks(t, 5, netConfigs[0].opts, func(ctx context.Context, rank int, p Peers) error {
		group := []int{4, 1, 3}
		in := false
		for _, r := range group {
			in = in || r == rank
		}
		if !in {
			return nil
		}
		s := SubPeers(p, group, 77)
		if s.Size() != 3 || group[s.Rank()] != rank {
			return fmt.Errorf("rank %d: sub rank %d of %d", rank, s.Rank(), s.Size())
		}
		x := []byte{byte(rank), 0, 0, 0}
		if err := AllReduceRing(ctx, s, new(Workspace), x, Int32, Sum, 0); err != nil {
			return err
		}
		if x[0] != 8 {
			return fmt.Errorf("rank %d: sum over the group = %d, want 8", rank, x[0])
		}
		return nil
	})
}
