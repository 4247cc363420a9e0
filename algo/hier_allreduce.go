package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// Step label bases of the phases of composite schedules, far enough apart
// that the labels of one phase never collide with another's.
const (
	hierLocalRS uint32 = 0
	hierRail    uint32 = 1 << 20
	hierLocalAG uint32 = 2 << 20
	hierExtra   uint32 = 3 << 20
)

// AllReduceHierarchical reduces data over all ranks with op's combiner;
// hosts lists every host's ranks in local-rank order and every host must
// have the same number. src, if not nil, is the input (read only) and data
// receives the result; with a nil src data is reduced in place. Staging
// uses SlotStage.
//
// # Hierarchical allreduce
//
// For ranks spread over H hosts of L ranks each (the same L on every host),
// with fast links inside a host and a slower network between hosts:
//
//  1. intra-host ring reduce-scatter: the vector is cut into L segments
//     and local rank l ends with segment l reduced over its host;
//  2. inter-host ring allreduce of segment l among the H ranks of local
//     rank l (one "rail" per local rank; all rails run at once, each over
//     its own NIC on a rail-optimised fabric);
//  3. intra-host ring allgather of the L segments.
//
// Communication steps: 2(L-1) inside hosts and 2(H-1) between hosts.
//
// Bytes on the wire per rank, for n bytes: 2(L-1)/L * n over intra-host
// links and 2(H-1)/(H*L) * n over the network — an L-th of what a flat ring
// sends through the network, which is why this wins when the network is the
// bottleneck. With L = 1 it is a ring allreduce over hosts; with H = 1 a
// ring allreduce over the host.
//
// Message step labels: hierLocalRS+s, hierRail+s' (the rail ring's labels),
// hierLocalAG+s.
func AllReduceHierarchical(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, hosts [][]int, chunkBytes int) error {
	h, l, err := locate(p.Rank(), hosts)
	if err != nil {
		return err
	}
	es := dt.Size()
	count := len(data) / es
	L, H := len(hosts[h]), len(hosts)
	if p.Size() <= 1 || count == 0 {
		if src != nil {
			memcopy.Copy(data, src)
		}
		return nil
	}
	lay := layout{count: count, scale: es}
	if L > 1 {
		if err := reduceScatterRing(ctx, ws.Sub(SubHier, p, hosts[h], hierLocalRS), ws, src, data, dt, op, lay, chunkBytes, 0); err != nil {
			return fmt.Errorf("hierarchical allreduce: intra-host reduce-scatter: %w", err)
		}
	} else if src != nil {
		memcopy.Copy(data, src)
	}
	if H > 1 {
		off, n := lay.block(l, L)
		rail := ws.Ints(IntsHierRail, H)
		for i := range hosts {
			rail[i] = hosts[i][l]
		}
		if err := AllReduceRing(ctx, ws.Sub(SubHier, p, rail, hierRail), ws, data[off:off+n], dt, op, chunkBytes); err != nil {
			return fmt.Errorf("hierarchical allreduce: inter-host allreduce of segment %d: %w", l, err)
		}
	}
	if L > 1 {
		if chunkBytes > 0 {
			chunkBytes = chunkSize(chunkBytes, es)
		}
		if err := allGatherRing(ctx, ws.Sub(SubHier, p, hosts[h], hierLocalAG), nil, data, lay, chunkBytes, 0); err != nil {
			return fmt.Errorf("hierarchical allreduce: intra-host allgather: %w", err)
		}
	}
	return nil
}

// locate returns the host index and local rank of rank in hosts, and checks
// that every host has the same number of ranks.
func locate(rank int, hosts [][]int) (host, local int, err error) {
	host, local = -1, -1
	for i, hr := range hosts {
		if len(hr) != len(hosts[0]) {
			return 0, 0, fmt.Errorf("hosts have different numbers of ranks (%d and %d)", len(hosts[0]), len(hr))
		}
		for j, r := range hr {
			if r == rank {
				host, local = i, j
			}
		}
	}
	if host < 0 {
		return 0, 0, fmt.Errorf("rank %d is on no host", rank)
	}
	return host, local, nil
}
