package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// railMajor returns the staging position of every rank (kept in ws): rank
// hosts[h][l] goes to l*H+h.
func railMajor(ws *Workspace, hosts [][]int, size int) []int {
	pos := ws.Ints(IntsHierPos, size)
	H := len(hosts)
	for h, hr := range hosts {
		for l, r := range hr {
			pos[r] = l*H + h
		}
	}
	return pos
}

// AllGatherHierarchical fills data, Size() blocks of blockBytes in rank
// order whose own block is in place on entry, with every rank's block.
// hosts lists every host's ranks in local-rank order, the same number per
// host. Staging uses SlotHierStage (and SlotStage for the ring schedules
// it runs).
//
// # Hierarchical allgather and reduce-scatter
//
// For H hosts of L ranks each, after the rail-only paper: a rail phase
// among the H ranks of the same local rank (one rail each, all at once) and
// an HB phase among the L ranks of a host. Blocks are staged in rail-major
// order (the block of the rank with local rank l on host h at position
// l*H+h), so that each phase moves contiguous regions.
//
// Allgather: (1) rail phase: ring allgather of the H blocks of this rank's
// rail; (2) HB phase: ring allgather of the L rail regions of H blocks
// inside the host; (3) the staged blocks are copied into rank order.
//
// Reduce-scatter, the reverse: (1) the input is staged in rail-major
// order; (2) HB phase: ring reduce-scatter of the L rail regions inside the
// host, local rank l keeping region l reduced over its host; (3) rail
// phase: ring reduce-scatter of region l's H blocks along the rail, each
// rank keeping its own block.
//
// Communication steps: H-1 on the rail network and L-1 inside the host.
//
// Bytes on the wire per rank, for D bytes of output (allgather) or input
// (reduce-scatter): (H-1) D/(HL) on the rail network and (L-1) D/L inside
// the host, the rail-only paper's AG(D,x,y) = (y-1)D/(xyC_S) + (x-1)D/(xC_F)
// with x = L, y = H. The staging costs one extra local pass over D.
//
// Message step labels: the ring's labels, offset by hierRail for the rail
// phase and hierLocalRS / hierLocalAG for the HB phase.
func AllGatherHierarchical(ctx context.Context, p Peers, ws *Workspace, data []byte, blockBytes int, hosts [][]int, chunkBytes int) error {
	h, l, err := locate(p.Rank(), hosts)
	if err != nil {
		return err
	}
	n := p.Size()
	if n <= 1 || blockBytes == 0 {
		return nil
	}
	H, L := len(hosts), len(hosts[0])
	pos := railMajor(ws, hosts, n)
	stage := ws.Get(SlotHierStage, n*blockBytes)
	me := p.Rank()
	memcopy.Copy(stage[pos[me]*blockBytes:], data[me*blockBytes:(me+1)*blockBytes])
	if H > 1 {
		rail := ws.Ints(IntsHierRail, H)
		offs, lens := ws.Ints(IntsHierOffs, H), ws.Ints(IntsHierLens, H)
		for i := range hosts {
			rail[i] = hosts[i][l]
			offs[i], lens[i] = (l*H+i)*blockBytes, blockBytes
		}
		if err := AllGatherRing(ctx, ws.Sub(SubHier, p, rail, hierRail), stage, offs, lens, chunkBytes); err != nil {
			return fmt.Errorf("hierarchical allgather: rail phase: %w", err)
		}
	}
	if L > 1 {
		offs, lens := ws.Ints(IntsHierOffs, L), ws.Ints(IntsHierLens, L)
		for j := range offs {
			offs[j], lens[j] = j*H*blockBytes, H*blockBytes
		}
		if err := AllGatherRing(ctx, ws.Sub(SubHier, p, hosts[h], hierLocalAG), stage, offs, lens, chunkBytes); err != nil {
			return fmt.Errorf("hierarchical allgather: host phase: %w", err)
		}
	}
	for r := 0; r < n; r++ {
		memcopy.Copy(data[r*blockBytes:(r+1)*blockBytes], stage[pos[r]*blockBytes:])
	}
	return nil
}

// ReduceScatterHierarchical reduces the Size() blocks of blockBytes of the
// input over all ranks with op's combiner and leaves block Rank() of the
// result in data's block Rank() (other blocks of data are unspecified).
// src, if not nil, is the input (read only); else data holds it. hosts
// lists every host's ranks in local-rank order, the same number per host.
// Staging uses SlotHierStage and SlotStage.
func ReduceScatterHierarchical(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, blockBytes int, hosts [][]int, chunkBytes int) error {
	h, l, err := locate(p.Rank(), hosts)
	if err != nil {
		return err
	}
	n, me := p.Size(), p.Rank()
	if src == nil {
		src = data
	}
	if n <= 1 || blockBytes == 0 {
		memcopy.Copy(data[me*blockBytes:(me+1)*blockBytes], src[me*blockBytes:])
		return nil
	}
	H, L := len(hosts), len(hosts[0])
	es := dt.Size()
	bc := blockBytes / es
	pos := railMajor(ws, hosts, n)
	stage := ws.Get(SlotHierStage, n*blockBytes)
	for r := 0; r < n; r++ {
		memcopy.Copy(stage[pos[r]*blockBytes:(pos[r]+1)*blockBytes], src[r*blockBytes:])
	}
	if L > 1 {
		segs := ws.Ints(IntsSegs, L+1)
		for j := range segs {
			segs[j] = j * H * bc
		}
		if err := ReduceScatterRing(ctx, ws.Sub(SubHier, p, hosts[h], hierLocalRS), ws, stage, dt, op, segs, chunkBytes); err != nil {
			return fmt.Errorf("hierarchical reduce-scatter: host phase: %w", err)
		}
	}
	region := stage[l*H*blockBytes : (l+1)*H*blockBytes]
	if H > 1 {
		rail := ws.Ints(IntsHierRail, H)
		for i := range hosts {
			rail[i] = hosts[i][l]
		}
		segs := ws.Ints(IntsSegs, H+1)
		for i := range segs {
			segs[i] = i * bc
		}
		if err := ReduceScatterRing(ctx, ws.Sub(SubHier, p, rail, hierRail), ws, region, dt, op, segs, chunkBytes); err != nil {
			return fmt.Errorf("hierarchical reduce-scatter: rail phase: %w", err)
		}
	}
	memcopy.Copy(data[me*blockBytes:(me+1)*blockBytes], region[h*blockBytes:(h+1)*blockBytes])
	return nil
}
