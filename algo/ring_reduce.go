package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// ReduceRing reduces src over all ranks with op's combiner (Avg is summed;
// the caller divides) into dst on root. src is only read, on every rank;
// dst, which may be src (in place), is written on root only (other ranks
// may pass nil). chunkBytes is the reduce-scatter pipelining unit (<= 0:
// one message per segment). Staging uses SlotStage and, on ranks other
// than the root, SlotInput (the vector, of which the reduce-scatter fills
// the rank's own segment).
//
// # Ring reduce
//
// A ring reduce-scatter (see ring_reducescatter.go) over p balanced
// segments, after which rank r holds the reduced segment r, followed by a
// direct gather: every rank other than the root sends its reduced segment
// to the root, which receives each one into place.
//
// Communication steps: p-1 (reduce-scatter, chunked and pipelined) + 1
// (gather; the root receives p-1 messages one after the other). Message
// step labels: s for reduce-scatter step s, p-1 for the gather.
//
// Bytes on the wire: every rank sends and receives about (p-1)/p * n in
// the reduce-scatter; then every non-root rank sends n/p and the root
// receives (p-1)/p * n. The root's link carries about 2(p-1)/p * n inbound
// instead of the tree's ceil(log2 p) * n, which is what makes it the choice
// for large vectors over more than ReduceChainMaxRanks ranks.
//
// The reduce-scatter reads src where it lies and writes the reduced
// segments into dst on the root and into scratch elsewhere: no rank copies
// its input first.
func ReduceRing(ctx context.Context, p Peers, ws *Workspace, src, dst []byte, dt DType, op Op, root int, chunkBytes int) error {
	size, r := p.Size(), p.Rank()
	es := dt.Size()
	if size <= 1 || es == 0 || len(src) < es {
		if r == root && !same(src, dst) {
			memcopy.Copy(dst, src)
		}
		return nil
	}
	data, from := dst, src
	if r != root {
		data = ws.Get(SlotInput, len(src))
	} else if same(src, dst) {
		from = nil
	}
	l := layout{count: len(src) / es, scale: es}
	if err := reduceScatterRing(ctx, p, ws, from, data, dt, op, l, chunkBytes, 0); err != nil {
		return fmt.Errorf("ring reduce: %w", err)
	}
	step := uint32(size - 1)
	if r != root {
		off, n := l.block(r, size)
		if n == 0 {
			return nil
		}
		if err := p.Send(ctx, root, step, data[off:off+n]); err != nil {
			return fmt.Errorf("ring reduce: rank %d gather: send segment to root %d: %w", r, root, err)
		}
		return nil
	}
	for i := 1; i < size; i++ {
		from := mod(root+i, size)
		off, n := l.block(from, size)
		if n == 0 {
			continue
		}
		if err := p.Recv(ctx, from, step, data[off:off+n]); err != nil {
			return fmt.Errorf("ring reduce: root %d gather: recv segment from rank %d: %w", r, from, err)
		}
	}
	return nil
}
