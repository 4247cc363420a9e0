package algo

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// unevenSegs returns p+1 element boundaries over count elements with
// random, possibly empty segments.
func unevenSegs(rng *rand.Rand, count, p int) []int {
	segs := make([]int, p+1)
	for i := 1; i < p; i++ {
		segs[i] = rng.IntN(count + 1)
	}
	segs[p] = count
	for i := 1; i < p; i++ { // insertion sort keeps it simple
		for j := i; j > 1 && segs[j] < segs[j-1]; j-- {
			segs[j], segs[j-1] = segs[j-1], segs[j]
		}
	}
	return segs
}

func TestReduceScatterRing(t *testing.T) {
	cs := combos()
	i := 0
	for _, p := range testRanks {
		for _, count := range testCounts(p) {
			for _, uneven := range []bool{false, true} {
				for _, chunk := range []int{64, 0} {
					c := cs[i%len(cs)]
					net, opts := netConfig(i)
					i++
					name := fmt.Sprintf("p%d/n%d/uneven=%v/chunk%d/%v/%v/%s", p, count, uneven, chunk, c.dt, c.op, net)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						segs := PartitionOffsets(nil, count, p)
						if uneven {
							segs = unevenSegs(rand.New(rand.NewPCG(uint64(p), uint64(count))), count, p)
						}
						in := rankInputs(c.dt, c.op, p, count)
						want := serialReduce(c.dt, c.op, in)
						runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
							return ReduceScatterRing(ctx, peers, new(Workspace), in[rank], c.dt, c.op, segs, chunk)
						})
						es := c.dt.Size()
						for r := 0; r < p; r++ {
							lo, hi := segs[r]*es, segs[r+1]*es
							if d := firstDiff(in[r][lo:hi], want[lo:hi], es); d != "" {
								t.Fatalf("rank %d segment [%d,%d): %s", r, segs[r], segs[r+1], d)
							}
						}
					})
				}
			}
		}
	}
}

func TestAllGatherRing(t *testing.T) {
	i := 0
	for _, p := range testRanks {
		for _, per := range []int{0, 1, 3, 13, 1031} {
			for _, variable := range []bool{false, true} {
				for _, chunk := range []int{64, 7, 0} {
					net, opts := netConfig(i)
					i++
					t.Run(fmt.Sprintf("p%d/per%d/v=%v/chunk%d/%s", p, per, variable, chunk, net), func(t *testing.T) {
						t.Parallel()
						rng := rand.New(rand.NewPCG(uint64(p), uint64(per)))
						// Blocks in shuffled order with gaps between them, which
						// must stay untouched.
						offs, lens := make([]int, p), make([]int, p)
						order := rng.Perm(p)
						pos := 0
						for _, b := range order {
							lens[b] = per
							if variable {
								lens[b] = rng.IntN(2*per + 1)
							}
							pos += rng.IntN(3)
							offs[b] = pos
							pos += lens[b]
						}
						total := pos + 2
						want := make([]byte, total)
						for j := range want {
							want[j] = 0xEE
						}
						for b := 0; b < p; b++ {
							for j := 0; j < lens[b]; j++ {
								want[offs[b]+j] = byte(b*31 + j)
							}
						}
						bufs := make([][]byte, p)
						for r := range bufs {
							bufs[r] = bytes.Repeat([]byte{0xEE}, total)
							copy(bufs[r][offs[r]:offs[r]+lens[r]], want[offs[r]:offs[r]+lens[r]])
						}
						runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
							return AllGatherRing(ctx, peers, bufs[rank], offs, lens, chunk)
						})
						for r := range bufs {
							if d := firstDiff(bufs[r], want, 1); d != "" {
								t.Fatalf("rank %d: %s", r, d)
							}
						}
					})
				}
			}
		}
	}
}

func TestReduceRing(t *testing.T) {
	cs := combos()
	i := 0
	for _, p := range testRanks {
		for _, count := range testCounts(p) {
			for _, root := range []int{0, p - 1, p / 2} {
				for _, chunk := range []int{64, 0} {
					c := cs[i%len(cs)]
					net, opts := netConfig(i)
					i++
					t.Run(fmt.Sprintf("p%d/n%d/root%d/chunk%d/%v/%v/%s", p, count, root, chunk, c.dt, c.op, net), func(t *testing.T) {
						t.Parallel()
						in := rankInputs(c.dt, c.op, p, count)
						want := serialReduce(c.dt, c.op, in)
						runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
							return ReduceRing(ctx, peers, new(Workspace), in[rank], in[rank], c.dt, c.op, root, chunk)
						})
						if d := firstDiff(in[root], want, c.dt.Size()); d != "" {
							t.Fatalf("root %d: %s", root, d)
						}
					})
				}
			}
		}
	}
}
