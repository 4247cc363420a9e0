package algo

import (
	"context"
	"fmt"
)

// AllReduceRD reduces data in place over all ranks with op's combiner (Avg
// is summed; the caller divides), by recursive doubling. Staging uses
// SlotStage (len(data) bytes).
//
// # Recursive doubling allreduce
//
// Let p' = 2^floor(log2 p) and q = p - p'.
//
//  0. fold (only when p is not a power of two): of the first 2q ranks, each
//     even rank r sends its whole vector to rank r+1, which reduces it into
//     its own; the even ranks then wait for the result. The odd ranks among
//     the first 2q and all ranks >= 2q take part as virtual ranks
//     0 .. p'-1.
//  1. for d = 1, 2, 4 .. p'/2: virtual rank v exchanges its whole vector
//     with virtual rank v^d and combines the two. After the step with
//     distance d every aligned group of 2d virtual ranks holds the
//     reduction over the group.
//  2. unfold: each odd rank among the first 2q sends the result to the even
//     rank it absorbed in step 0.
//
// Every rank computes the result itself, so to make all ranks end with
// bit-identical floating-point results every rank evaluates the same
// combination tree with the same operand order: the partial of the group
// with the lower virtual ranks is always the left operand (and in the fold,
// the even rank's vector is the left operand).
//
// Communication steps: log2 p', plus 2 when p is not a power of two.
// Message step labels: 0 for the fold, 1+i for exchange step i, 1+log2 p'
// for the unfold.
//
// Bytes on the wire per participating rank: n log2 p' sent and received;
// the folded pairs add n each way. Suited to small vectors, where the
// log2 p' latency dominates.
//
// The input vector is overwritten with the result on every rank.
func AllReduceRD(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op) error {
	size, r := p.Size(), p.Rank()
	es := dt.Size()
	if size <= 1 || es == 0 || len(data) < es {
		return nil
	}
	op = op.Combiner()
	// The arguments are checked once: every step reduces data with the
	// stage, both of len(data) bytes, the stage being the workspace's
	// own slot (data is the caller's buffer).
	checkReduceArgs("AllReduceRD", data, dt, op)
	pof2, log := floorPow2(size)
	rem := size - pof2
	unfold := uint32(1 + log)

	v := r
	if rem > 0 {
		var err error
		if v, err = foldRanks(ctx, p, ws, data, dt, op, unfold, "rd allreduce"); err != nil || v < 0 {
			return err
		}
	}
	stage := ws.Get(SlotStage, len(data))
	for i, d := 0, 1; d < pof2; i, d = i+1, d*2 {
		peer := virtualToRank(v^d, rem)
		if err := SendRecv(ctx, p, peer, uint32(1+i), data, peer, uint32(1+i), stage); err != nil {
			return fmt.Errorf("rd allreduce: rank %d step %d with rank %d: %w", r, i, peer, err)
		}
		if v&d == 0 {
			reduceBuffers(data, data, stage, dt, op)
		} else {
			reduceBuffers(data, stage, data, dt, op)
		}
	}
	if rem == 0 {
		return nil
	}
	return unfoldRanks(ctx, p, data, unfold, "rd allreduce")
}

// foldRanks folds a non-power-of-two rank count onto the largest power of
// two p' <= p: of the first 2q ranks (q = p - p'), each even rank sends data
// to the next odd rank, which combines it into its own data (even vector
// on the left) using SlotStage, with step label 0. It returns the
// virtual rank of this rank in [0, p'), or -1 when this rank was folded
// away: it then has already received the final result, as message
// unfoldStep from its odd neighbour (see unfoldRanks).
func foldRanks(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op, unfoldStep uint32, name string) (int, error) {
	size, r := p.Size(), p.Rank()
	pof2, _ := floorPow2(size)
	rem := size - pof2
	switch {
	case r >= 2*rem:
		return r - rem, nil
	case r%2 == 0:
		if err := p.Send(ctx, r+1, 0, data); err != nil {
			return -1, fmt.Errorf("%s: rank %d fold: send to rank %d: %w", name, r, r+1, err)
		}
		if err := p.Recv(ctx, r+1, unfoldStep, data); err != nil {
			return -1, fmt.Errorf("%s: rank %d unfold: recv from rank %d: %w", name, r, r+1, err)
		}
		return -1, nil
	}
	stage := ws.Get(SlotStage, len(data))
	if err := recvReduce(ctx, p, r-1, 0, stage, &reduction{ws: ws, dst: data, dt: dt, op: op, msgFirst: true}); err != nil {
		return -1, fmt.Errorf("%s: rank %d fold: recv from rank %d: %w", name, r, r-1, err)
	}
	return r / 2, nil
}

// unfoldRanks sends the result from each odd rank among the first 2q to the
// even rank it absorbed in foldRanks, as message unfoldStep.
func unfoldRanks(ctx context.Context, p Peers, data []byte, unfoldStep uint32, name string) error {
	size, r := p.Size(), p.Rank()
	pof2, _ := floorPow2(size)
	if rem := size - pof2; r < 2*rem {
		if err := p.Send(ctx, r-1, unfoldStep, data); err != nil {
			return fmt.Errorf("%s: rank %d unfold: send to rank %d: %w", name, r, r-1, err)
		}
	}
	return nil
}

// virtualToRank maps a virtual rank of the folded power-of-two group back to
// a real rank: the first rem virtual ranks are the odd ranks 1, 3 .. 2rem-1,
// the others follow from rank 2rem on.
func virtualToRank(v, rem int) int {
	if v < rem {
		return 2*v + 1
	}
	return v + rem
}
