package algo

import (
	"context"
	"fmt"
)

// AllReduceRHD reduces data in place over all ranks with op's combiner
// (Avg is summed; the caller divides), by recursive halving-doubling.
// Staging uses SlotStage (up to len(data) bytes on ranks that fold).
//
// # Recursive halving-doubling allreduce (Rabenseifner)
//
// Let p' = 2^floor(log2 p) and q = p - p'. Ranks are first folded onto p'
// participants:
//
//  0. fold (only when p is not a power of two): of the first 2q ranks, each
//     even rank r sends its whole vector to rank r+1, which reduces it into
//     its own; the even ranks then wait for the result. The odd ranks among
//     the first 2q and all ranks >= 2q take part as virtual ranks
//     0 .. p'-1.
//  1. reduce-scatter by recursive halving, for distances d = p'/2 .. 1:
//     virtual rank v and its partner v^d share a window of the vector; it is
//     split in two halves at an element boundary; the rank with bit d clear
//     keeps the lower half, the other the upper half; each sends the half it
//     gives up and reduces the half it keeps with the one it receives.
//     After log2 p' steps every virtual rank holds the fully reduced window
//     of about n/p' bytes selected by the bits of v.
//  2. allgather by recursive doubling, for d = 1 .. p'/2, undoing the
//     halving: partners exchange their windows, received directly into
//     place, until every participant holds the whole result.
//  3. unfold: each odd rank among the first 2q sends the result to the even
//     rank it absorbed in step 0.
//
// Windows are split at element boundaries, so any element count works;
// halves may be empty (fewer elements than ranks), and empty messages are
// skipped by both sides. Each element of the result is computed by exactly
// one participant and copied to the others, so all ranks hold bit-identical
// results; operands are always combined with the lower-ranked group's
// partial on the left.
//
// Communication steps: 2 log2 p', plus 2 when p is not a power of two.
// Message step labels: 0 for the fold, 1+i for halving step i, 1+log2 p'+i
// for doubling step i, 1+2 log2 p' for the unfold.
//
// Bytes on the wire per participating rank: (p'-1)/p' * n sent and received
// in each of the two phases, 2(p'-1)/p' * n in total each way; the folded
// pairs add n each way (the even rank sends n and receives n; the odd rank
// receives n and sends n).
//
// The input vector is overwritten with the result on every rank.
func AllReduceRHD(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op) error {
	size, r := p.Size(), p.Rank()
	es := dt.Size()
	if size <= 1 || es == 0 || len(data) < es {
		return nil
	}
	op = op.Combiner()
	count := len(data) / es
	pof2, log := floorPow2(size)
	rem := size - pof2
	unfold := uint32(1 + 2*log)

	v, err := foldRanks(ctx, p, ws, data, dt, op, unfold, "rhd allreduce")
	if err != nil || v < 0 {
		return err
	}

	// Reduce-scatter by recursive halving. win[i] is the window shared with
	// the partner of step i, keep[i] the half this rank keeps.
	type span struct{ lo, hi int }
	var win, keep [64]span
	lo, hi := 0, count
	stage := ws.Get(SlotStage, (count/2+1)*es)
	for i, d := 0, pof2/2; d >= 1; i, d = i+1, d/2 {
		peer := virtualToRank(v^d, rem)
		mid := lo + (hi-lo)/2
		win[i] = span{lo, hi}
		var give span
		if v&d == 0 {
			keep[i], give = span{lo, mid}, span{mid, hi}
		} else {
			keep[i], give = span{mid, hi}, span{lo, mid}
		}
		k := keep[i]
		mine := data[k.lo*es : k.hi*es]
		red := reduction{ws: ws, dst: mine, dt: dt, op: op, msgFirst: v&d != 0}
		if err := exchangeReduce(ctx, p, peer, data[give.lo*es:give.hi*es], peer, stage[:len(mine)], uint32(1+i), &red); err != nil {
			return fmt.Errorf("rhd allreduce: rank %d halving step %d with rank %d: %w", r, i, peer, err)
		}
		lo, hi = k.lo, k.hi
	}

	// Allgather by recursive doubling, undoing the halving steps.
	for j := 0; j < log; j++ {
		i := log - 1 - j
		d := pof2 >> (i + 1)
		peer := virtualToRank(v^d, rem)
		k, w := keep[i], win[i]
		other := span{w.lo, k.lo}
		if v&d == 0 {
			other = span{k.hi, w.hi}
		}
		if err := exchange(ctx, p, peer, data[k.lo*es:k.hi*es], peer, data[other.lo*es:other.hi*es], uint32(1+log+j)); err != nil {
			return fmt.Errorf("rhd allreduce: rank %d doubling step %d with rank %d: %w", r, j, peer, err)
		}
	}

	return unfoldRanks(ctx, p, data, unfold, "rhd allreduce")
}
