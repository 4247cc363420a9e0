package algo

import (
	"context"
	"fmt"
	"sync"

	"github.com/occl/occl/internal/memcopy"
	"github.com/occl/occl/transport"
)

// AllReduce2D reduces data over every rank of grid with op's combiner.
// grid[i][j] is the rank at row i, column j; all rows have the same length.
// src, if not nil, is the input (read only). Staging uses the first two
// child workspaces of ws.
//
// # 2D allreduce
//
// RailX's 2D ring allreduce for ranks on a grid whose rows (X groups) and
// columns (Y groups) are joined by separate rails. The vector is split in
// two halves that run the three phases in opposite dimension order, at the
// same time, so both sets of rails are busy throughout:
//
//	           half A                      half B
//	phase 1    reduce-scatter along X      reduce-scatter along Y
//	phase 2    allreduce along Y of the    allreduce along X of the
//	           X-segment this rank owns    Y-segment this rank owns
//	phase 3    allgather along X           allgather along Y
//
// Each rank finishes a phase before it starts the next, so on any pair of
// ranks (which are either in the same row or in the same column, never
// both) the messages of different phases never interleave.
//
// Communication steps: 2(X-1) + 2(Y-1) per half, the halves concurrent.
//
// Bytes on the wire per rank, for n bytes on an X by Y grid: half A sends
// (X-1)/X * n over X links (reduce-scatter and allgather of n/2) and
// 2(Y-1)/Y * n/(2X) over Y links; half B the mirror image. In all, X links
// carry (X-1)/X * n * (Y+1)/Y and Y links (Y-1)/Y * n * (X+1)/X, both sets
// at the same time — RailX's T = 2[T_R(X, n/2) + T_R(Y, n/(2X))] per
// dimension.
//
// Message step labels: per half and phase, offsets of 1<<20 (see
// hierLocalRS and friends) plus the ring's own labels.
func AllReduce2D(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, grid [][]int, chunkBytes int) error {
	row, col := -1, -1
	for i, r := range grid {
		if len(r) != len(grid[0]) {
			return fmt.Errorf("2d allreduce: rows of %d and %d ranks", len(grid[0]), len(r))
		}
		for j, x := range r {
			if x == p.Rank() {
				row, col = i, j
			}
		}
	}
	if row < 0 {
		return fmt.Errorf("2d allreduce: rank %d is not on the grid", p.Rank())
	}
	es := dt.Size()
	count := len(data) / es
	if p.Size() <= 1 || count == 0 {
		if src != nil {
			memcopy.Copy(data, src)
		}
		return nil
	}
	xs := grid[row]
	ys := make([]int, len(grid))
	for i := range grid {
		ys[i] = grid[i][col]
	}
	half := count / 2
	dataA, dataB := data[:half*es], data[half*es:]
	var srcA, srcB []byte
	if src != nil {
		srcA, srcB = src[:half*es], src[half*es:]
	}
	layA := layout{count: half, scale: es}
	layB := layout{count: count - half, scale: es}
	wsA, wsB := ws.Child(0), ws.Child(1)
	agChunk := chunkBytes
	if agChunk > 0 {
		agChunk = chunkSize(agChunk, es)
	}

	// Phase 1: reduce-scatter, A along X and B along Y.
	err := both(ctx,
		func(ctx context.Context) error {
			return reduceScatterRing(ctx, SubPeers(p, xs, 0), wsA, srcA, dataA, dt, op, layA, chunkBytes, 0)
		},
		func(ctx context.Context) error {
			return reduceScatterRing(ctx, SubPeers(p, ys, 3<<20), wsB, srcB, dataB, dt, op, layB, chunkBytes, 0)
		})
	if err != nil {
		return fmt.Errorf("2d allreduce: phase 1: %w", err)
	}
	// Phase 2: allreduce of the owned segment along the other dimension.
	err = both(ctx,
		func(ctx context.Context) error {
			off, n := layA.block(col, len(xs))
			return AllReduceRing(ctx, SubPeers(p, ys, 1<<20), wsA, dataA[off:off+n], dt, op, chunkBytes)
		},
		func(ctx context.Context) error {
			off, n := layB.block(row, len(ys))
			return AllReduceRing(ctx, SubPeers(p, xs, 4<<20), wsB, dataB[off:off+n], dt, op, chunkBytes)
		})
	if err != nil {
		return fmt.Errorf("2d allreduce: phase 2: %w", err)
	}
	// Phase 3: allgather, A along X and B along Y.
	err = both(ctx,
		func(ctx context.Context) error {
			return allGatherRing(ctx, SubPeers(p, xs, 2<<20), nil, dataA, layA, agChunk, 0)
		},
		func(ctx context.Context) error {
			return allGatherRing(ctx, SubPeers(p, ys, 5<<20), nil, dataB, layB, agChunk, 0)
		})
	if err != nil {
		return fmt.Errorf("2d allreduce: phase 3: %w", err)
	}
	return nil
}

// both runs f and g concurrently and returns the first error; the first
// failure cancels the other, whose error (usually the cancellation it
// caused) is dropped.
func both(ctx context.Context, f, g func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(transport.WithYield(ctx))
	defer cancel()
	var (
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	failed := func(err error) {
		if err != nil {
			once.Do(func() { first = err })
			cancel()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer RecoverTo(failed)
		failed(g(ctx))
	}()
	failed(f(ctx))
	wg.Wait()
	return first
}
