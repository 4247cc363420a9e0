package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// ReduceChain reduces src over all ranks with op's combiner (Avg is summed;
// the caller divides) into dst on root, along a pipelined chain. src is
// only read, on every rank; dst, which may be src (in place), is written
// on root only (other ranks may pass nil). Staging uses workspace
// SlotStage (one chunk) and, on ranks between the chain's ends, SlotInput
// (one chunk).
//
// # Pipelined chain reduce
//
// Ranks are renumbered relative to the root, v = (r - root) mod p, and
// form a chain p-1 -> p-2 -> ... -> 0 (the root). The vector is cut into
// chunks of at most chunkBytes (whole elements; <= 0: one chunk), and for
// every chunk k in turn:
//
//	v = p-1:      send chunk k of src to v-1
//	0 < v < p-1:  receive chunk k of v+1's partial, combine it with chunk
//	              k of src (own on the left) into a chunk of scratch, and
//	              send that to v-1
//	v = 0:        receive chunk k of 1's partial and combine it with chunk
//	              k of src into chunk k of dst
//
// so that rank v reduces chunk k while v+1 reduces chunk k+1: every rank
// but the last reduces the vector once, at the same time as the others,
// where the binomial tree's root reduces it once per level while its
// children wait. No rank copies its input first: each combination reads
// the input where it lies and writes the chunk it sends (or the result),
// so a rank other than the root needs one chunk of scratch, not a copy of
// the vector. Between two ranks it sends the tree's messages. The
// combination order is fixed by p and root, so results are deterministic.
//
// Communication steps: p-1 down the chain, pipelined over the chunks
// (the last chunk reaches the root p-1 chunks after the first). Message
// step label: 0 (each rank receives from one rank only).
//
// Bytes on the wire: every non-root rank sends n; every rank but the last
// receives n.
func ReduceChain(ctx context.Context, p Peers, ws *Workspace, src, dst []byte, dt DType, op Op, root, chunkBytes int) error {
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
	var stage, scratch []byte
	if v < size-1 {
		stage = ws.Get(SlotStage, min(len(src), chunk))
	}
	if v > 0 && v < size-1 {
		scratch = ws.Get(SlotInput, min(len(src), chunk))
	}
	next, prev := mod(v+1+root, size), mod(v-1+root, size)
	for k, nc := 0, numChunks(len(src), chunk); k < nc; k++ {
		lo, hi := chunkAt(0, len(src), chunk, k)
		out := src[lo:hi]
		if v < size-1 {
			red := reduction{ws: ws, src: src[lo:hi], dt: dt, op: op}
			if v == 0 {
				red.dst = dst[lo:hi]
			} else {
				red.dst = scratch[:hi-lo]
			}
			if same(red.src, red.dst) {
				red.src = nil
			}
			if err := recvReduce(ctx, p, next, 0, stage[:hi-lo], &red); err != nil {
				return fmt.Errorf("chain reduce: rank %d: recv chunk %d from rank %d: %w", r, k, next, err)
			}
			out = red.dst
		}
		if v > 0 {
			if err := p.Send(ctx, prev, 0, out); err != nil {
				return fmt.Errorf("chain reduce: rank %d: send chunk %d to rank %d: %w", r, k, prev, err)
			}
		}
	}
	return nil
}
