package algo

import (
	"context"
	"fmt"
)

// ReduceChain reduces data over all ranks with op's combiner (Avg is
// summed; the caller divides) into data on root, along a pipelined chain.
// On the other ranks data is clobbered (it holds partial results on
// return). Staging uses workspace SlotStage (one chunk).
//
// # Pipelined chain reduce
//
// Ranks are renumbered relative to the root, v = (r - root) mod p, and
// form a chain p-1 -> p-2 -> ... -> 0 (the root). The vector is cut into
// chunks of at most chunkBytes (whole elements; <= 0: one chunk), and for
// every chunk k in turn:
//
//	if v < p-1: receive chunk k of v+1's partial and combine it into
//	            data (own partial on the left)
//	if v > 0:   send chunk k of data to v-1
//
// so that rank v reduces chunk k while v+1 reduces chunk k+1: every rank
// but the last reduces the vector once, at the same time as the others,
// where the binomial tree's root reduces it once per level while its
// children wait. Between two ranks it sends the tree's messages. The combination order is fixed by p and root, so results
// are deterministic.
//
// Communication steps: p-1 down the chain, pipelined over the chunks
// (the last chunk reaches the root p-1 chunks after the first). Message
// step label: 0 (each rank receives from one rank only).
//
// Bytes on the wire: every non-root rank sends n; every rank but the last
// receives n.
func ReduceChain(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op, root, chunkBytes int) error {
	size, r := p.Size(), p.Rank()
	if size <= 1 || len(data) == 0 {
		return nil
	}
	op = op.Combiner()
	v := mod(r-root, size)
	chunk := chunkSize(chunkBytes, dt.Size())
	var stage []byte
	if v < size-1 {
		stage = ws.Get(SlotStage, min(len(data), chunk))
	}
	next, prev := mod(v+1+root, size), mod(v-1+root, size)
	for k, nc := 0, numChunks(len(data), chunk); k < nc; k++ {
		lo, hi := chunkAt(0, len(data), chunk, k)
		if v < size-1 {
			if err := recvReduce(ctx, p, next, 0, stage[:hi-lo], &reduction{ws: ws, dst: data[lo:hi], dt: dt, op: op}); err != nil {
				return fmt.Errorf("chain reduce: rank %d: recv chunk %d from rank %d: %w", r, k, next, err)
			}
		}
		if v > 0 {
			if err := p.Send(ctx, prev, 0, data[lo:hi]); err != nil {
				return fmt.Errorf("chain reduce: rank %d: send chunk %d to rank %d: %w", r, k, prev, err)
			}
		}
	}
	return nil
}
