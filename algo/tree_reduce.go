package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// ReduceTree reduces src over all ranks with op's combiner (Avg is summed;
// the caller divides) into dst on root. src is only read, on every rank;
// dst, which may be src (in place), is written on root only (other ranks
// may pass nil). Staging uses workspace SlotStage (one chunk) and, on ranks
// that both receive and send (inner nodes of the tree), SlotInput (the
// vector: the partial result of their subtree).
//
// # Binomial tree reduce
//
// Ranks are renumbered relative to the root, v = (r - root) mod p, and form
// the binomial tree of tree_broadcast.go, traversed bottom-up:
//
//	for j = 0, 1, .. while 2^j < p:
//	  if bit j of v is set: send the partial result to v - 2^j and stop
//	  else if v + 2^j < p:  receive the partial of v + 2^j's subtree and
//	                        combine it into data (own partial on the left)
//
// After ceil(log2 p) steps the root holds the reduction over all ranks.
// The combination tree is fixed by p and root, so results are
// deterministic.
//
// A partial goes in chunks of at most chunkBytes (whole elements; <= 0:
// one message), each reduced as it comes, so that over a stream (TCP)
// receiving a chunk overlaps reducing the one before.
//
// No rank copies its input first: a leaf sends src as it lies, and the
// first child's partial is combined with src into the accumulator (dst on
// the root, scratch on an inner node), which later children reduce into.
//
// Communication steps: ceil(log2 p). Message step labels: j, the tree
// level, on every chunk of it.
//
// Bytes on the wire: every non-root rank sends n once; a rank receives n
// from each of its children, so the root receives ceil(log2 p) * n. Best
// for small vectors; large ones go to the chain (up to
// ReduceChainMaxRanks ranks; between two it is this tree's messages) or
// the ring reduce.
func ReduceTree(ctx context.Context, p Peers, ws *Workspace, src, dst []byte, dt DType, op Op, root, chunkBytes int) error {
	size, r := p.Size(), p.Rank()
	if size <= 1 || len(src) == 0 {
		if r == root && !same(src, dst) {
			memcopy.Copy(dst, src)
		}
		return nil
	}
	op = op.Combiner()
	v := mod(r-root, size)
	chunk := chunkSize(chunkBytes, dt.Size())
	nc := numChunks(len(src), chunk)
	// acc is this rank's partial so far: its input until a child's partial
	// is combined into the accumulator.
	acc := src
	var stage, into []byte
	for j, m := 0, 1; m < size; j, m = j+1, m<<1 {
		if v&m != 0 {
			parent := mod(v-m+root, size)
			for k := range nc {
				lo, hi := chunkAt(0, len(acc), chunk, k)
				if err := p.Send(ctx, parent, uint32(j), acc[lo:hi]); err != nil {
					return fmt.Errorf("tree reduce: rank %d level %d: send chunk %d to rank %d: %w", r, j, k, parent, err)
				}
			}
			return nil
		}
		if v+m >= size {
			continue
		}
		child := mod(v+m+root, size)
		if stage == nil {
			stage, into = ws.Get(SlotStage, min(len(src), chunk)), dst
			if v != 0 {
				into = ws.Get(SlotInput, len(src))
			}
		}
		for k := range nc {
			lo, hi := chunkAt(0, len(src), chunk, k)
			red := reduction{ws: ws, dst: into[lo:hi], src: acc[lo:hi], dt: dt, op: op}
			if same(red.src, red.dst) {
				red.src = nil
			}
			if err := recvReduce(ctx, p, child, uint32(j), stage[:hi-lo], &red); err != nil {
				return fmt.Errorf("tree reduce: rank %d level %d: recv chunk %d from rank %d: %w", r, j, k, child, err)
			}
		}
		acc = into
	}
	return nil
}
