package algo

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/occl/occl/algo/internal/fakepeers"
	"github.com/occl/occl/transport"
)

func TestBroadcastTree(t *testing.T) {
	i := 0
	for _, p := range testRanks {
		for _, n := range []int{0, 1, 2, p - 1, p + 1, 13, 1031, 1 << 16} {
			for _, root := range []int{0, p - 1, p / 2} {
				for _, chunk := range []int{64, 7, 0} {
					if n < 0 || (n == 1<<16 && chunk != 64) {
						continue
					}
					net, opts := netConfig(i)
					i++
					t.Run(fmt.Sprintf("p%d/n%d/root%d/chunk%d/%s", p, n, root, chunk, net), func(t *testing.T) {
						t.Parallel()
						want := make([]byte, n)
						for j := range want {
							want[j] = byte(j*7 + 3)
						}
						bufs := make([][]byte, p)
						for r := range bufs {
							bufs[r] = make([]byte, n)
							if r == root {
								copy(bufs[r], want)
							}
						}
						runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
							return BroadcastTree(ctx, peers, bufs[rank], root, chunk)
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

// TestReduceTreeChain runs the binomial tree, the pipelined chain and the
// ring, whole and in chunks, in place and out of place, against a serial
// reduction.
func TestReduceTreeChain(t *testing.T) {
	for _, sched := range []struct {
		name string
		// run reduces src into dst on root.
		run func(ctx context.Context, p Peers, ws *Workspace, src, dst []byte, dt DType, op Op, root, chunkBytes int) error
	}{
		{"tree", ReduceTree},
		{"chain", ReduceChain},
		{"ring", ReduceRing},
	} {
		cs := combos()
		i := 0
		for _, p := range testRanks {
			for _, count := range testCounts(p) {
				for _, root := range []int{0, p - 1, p / 2} {
					c := cs[i%len(cs)]
					net, opts := netConfig(i)
					chunk := []int{0, 24, 1000}[i%3] // whole, in chunks of a few elements, in uneven ones
					outOfPlace := i%2 == 1
					i++
					t.Run(fmt.Sprintf("%s/p%d/n%d/root%d/%v/%v/%s/chunk%d/outofplace=%v", sched.name, p, count, root, c.dt, c.op, net, chunk, outOfPlace), func(t *testing.T) {
						t.Parallel()
						in := rankInputs(c.dt, c.op, p, count)
						want := serialReduce(c.dt, c.op, in)
						kept := make([][]byte, p)
						dst := make([][]byte, p)
						for r := range in {
							kept[r] = append([]byte(nil), in[r]...)
							dst[r] = in[r]
							if outOfPlace {
								dst[r] = make([]byte, len(in[r]))
							}
						}
						runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
							return sched.run(ctx, peers, new(Workspace), in[rank], dst[rank], c.dt, c.op, root, chunk)
						})
						if d := firstDiff(dst[root], want, c.dt.Size()); d != "" {
							t.Fatalf("root %d: %s", root, d)
						}
						if !outOfPlace {
							return
						}
						for r := range in {
							if !bytes.Equal(in[r], kept[r]) {
								t.Fatalf("rank %d: the input changed", r)
							}
							if r != root && !bytes.Equal(dst[r], make([]byte, len(dst[r]))) {
								t.Fatalf("rank %d, not the root: the output was written", r)
							}
						}
					})
				}
			}
		}
	}
}

func TestReduceTypes(t *testing.T) {
	for _, p := range []int{5, 8} {
		for j, c := range combos() {
			net, opts := netConfig(j)
			t.Run(fmt.Sprintf("p%d/%v/%v/%s", p, c.dt, c.op, net), func(t *testing.T) {
				t.Parallel()
				in := rankInputs(c.dt, c.op, p, 1031)
				want := serialReduce(c.dt, c.op, in)
				tree := make([][]byte, p)
				for r := range tree {
					tree[r] = append([]byte(nil), in[r]...)
				}
				runRanks(t, p, opts, func(ctx context.Context, rank int, peers Peers) error {
					if err := ReduceTree(ctx, peers, new(Workspace), tree[rank], tree[rank], c.dt, c.op, 1, 0); err != nil {
						return err
					}
					return ReduceRing(ctx, peers, new(Workspace), in[rank], in[rank], c.dt, c.op, 2, 128)
				})
				if d := firstDiff(tree[1], want, c.dt.Size()); d != "" {
					t.Fatalf("tree: %s", d)
				}
				if d := firstDiff(in[2], want, c.dt.Size()); d != "" {
					t.Fatalf("ring: %s", d)
				}
			})
		}
	}
}

// TestLarge runs the rooted collectives on about a megabyte.
func TestLarge(t *testing.T) {
	const count = 1 << 18
	const p, root = 5, 3
	in := rankInputs(Int32, Sum, p, count)
	want := serialReduce(Int32, Sum, in)
	tree := make([][]byte, p)
	bcast := make([][]byte, p)
	for r := range tree {
		tree[r] = append([]byte(nil), in[r]...)
		bcast[r] = make([]byte, len(want))
	}
	copy(bcast[root], want)
	runRanks(t, p, netConfigs[2].opts, func(ctx context.Context, rank int, peers Peers) error {
		ws := new(Workspace)
		if err := ReduceTree(ctx, peers, ws, tree[rank], tree[rank], Int32, Sum, root, 64<<10); err != nil {
			return err
		}
		if err := ReduceRing(ctx, peers, ws, in[rank], in[rank], Int32, Sum, root, 8<<10); err != nil {
			return err
		}
		return BroadcastTree(ctx, peers, bcast[rank], root, 8<<10)
	})
	if d := firstDiff(tree[root], want, 4); d != "" {
		t.Fatalf("tree reduce: %s", d)
	}
	if d := firstDiff(in[root], want, 4); d != "" {
		t.Fatalf("ring reduce: %s", d)
	}
	for r := range bcast {
		if d := firstDiff(bcast[r], want, 4); d != "" {
			t.Fatalf("broadcast rank %d: %s", r, d)
		}
	}
}

// sendsFromCaller records whether every Send ran on the goroutine of the
// function that called the schedule (named caller), by its stack.
type sendsFromCaller struct {
	Peers
	caller string
	sends  int
	other  bool // a Send ran on another goroutine
}

func (s *sendsFromCaller) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	stack := make([]byte, 8<<10)
	if !strings.Contains(string(stack[:runtime.Stack(stack, false)]), s.caller) {
		s.other = true
	}
	s.sends++
	return s.Peers.Send(ctx, peer, step, buf)
}

// yieldRecorder records whether any Send or Recv ran under a context that
// lets polling transports yield.
type yieldRecorder struct {
	Peers
	yielded atomic.Bool
}

func (y *yieldRecorder) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	y.yielded.CompareAndSwap(false, transport.Yields(ctx))
	return y.Peers.Send(ctx, peer, step, buf)
}

func (y *yieldRecorder) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	y.yielded.CompareAndSwap(false, transport.Yields(ctx))
	return y.Peers.Recv(ctx, peer, step, buf)
}

// TestBroadcastTreeTwoRanksInline: with 2 ranks the root (a tree of one
// child) sends every chunk of a pipelined broadcast on its own goroutine,
// and the leaf receives them on its own, both under the caller's context
// (which here tells transports not to yield: nothing else of the
// operation runs in the process); the result is checked.
func TestBroadcastTreeTwoRanksInline(t *testing.T) {
	const n, chunk = 10000, 1024
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7 + 3)
	}
	bufs := [][]byte{append([]byte(nil), want...), make([]byte, n)}
	rec := []*yieldRecorder{{}, {}}
	root := &sendsFromCaller{caller: "algo.TestBroadcastTreeTwoRanksInline.func1"}
	runRanks(t, 2, fakepeers.Options{EagerLimit: -1}, func(ctx context.Context, rank int, p Peers) error {
		rec[rank].Peers = p
		p = rec[rank]
		if rank == 0 {
			root.Peers = p
			p = root
		}
		return BroadcastTree(transport.WithoutYield(ctx), p, bufs[rank], 0, chunk)
	})
	if !bytes.Equal(bufs[1], want) {
		t.Fatal("rank 1 did not receive the root's data")
	}
	if root.sends != (n+chunk-1)/chunk || root.other {
		t.Fatalf("root made %d sends (want %d), on another goroutine: %v", root.sends, (n+chunk-1)/chunk, root.other)
	}
	for r, y := range rec {
		if y.yielded.Load() {
			t.Errorf("rank %d sent or received under a context that yields (a goroutine group's)", r)
		}
	}
}
