package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// AllReduceRing reduces data in place over all ranks with op's combiner
// (Avg is summed; the caller divides). chunkBytes is the pipelining unit
// (<= 0 sends each segment as one message). Staging uses SlotStage.
//
// # Ring allreduce
//
// A ring reduce-scatter followed by a ring allgather over the same ring
// (rank r sends to r+1 and receives from r-1). The vector of n bytes is cut
// into p balanced segments of whole elements (Partition):
//
//  1. reduce-scatter, steps 0 .. p-2: after it, segment r on rank r holds
//     the reduction over all ranks (see ring_reducescatter.go);
//  2. allgather, steps p-1 .. 2p-3: every rank forwards the reduced
//     segments around the ring until all ranks hold all of them (see
//     ring_allgather.go; its chunks are lent where AllGatherRing lends
//     them).
//
// Both phases are chunked and pipelined. Every element of the result is
// computed once, by the rank that owns its segment, and copied to the
// others, so all ranks hold bit-identical results.
//
// Communication steps: 2(p-1). Message step labels: s for reduce-scatter
// step s, p-1+s for allgather step s.
//
// Bytes on the wire per rank: 2(p-1)/p * n sent and 2(p-1)/p * n received
// (exactly, up to one element per segment of rounding).
func AllReduceRing(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op, chunkBytes int) error {
	return AllReduceRingFrom(ctx, p, ws, nil, data, dt, op, chunkBytes)
}

// AllReduceRingFrom is AllReduceRing out of place: the input is read from
// src (never written) and the result lands in data, without copying the
// input first. A nil src means in place.
func AllReduceRingFrom(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, chunkBytes int) error {
	size := p.Size()
	es := dt.Size()
	if size <= 1 || es == 0 || len(data) < es {
		if src != nil {
			memcopy.Copy(data, src)
		}
		return nil
	}
	l := layout{count: len(data) / es, scale: es}
	if err := reduceScatterRing(ctx, p, ws, src, data, dt, op, l, chunkBytes, 0); err != nil {
		return fmt.Errorf("ring allreduce: %w", err)
	}
	// The allgather chunks in bytes; keep the same (element-rounded) unit.
	if chunkBytes > 0 {
		chunkBytes = chunkSize(chunkBytes, es)
	}
	if err := allGatherRing(ctx, p, nil, data, l, chunkBytes, uint32(size-1)); err != nil {
		return fmt.Errorf("ring allreduce: %w", err)
	}
	return nil
}
