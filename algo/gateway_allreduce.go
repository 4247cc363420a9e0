package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// AllReduceGateway reduces data over all ranks with op's combiner, going
// through one gateway rank per host. hosts lists every host's ranks, the
// gateway first. src, if not nil, is the input (read only). Staging uses
// SlotStage and, on inner ranks of a host's reduce tree, SlotInput.
//
// # Gateway allreduce
//
// The hierarchical allreduce of mFabric's collective manager for
// data-parallel traffic over the packet network:
//
//  1. intra-host binomial-tree reduce onto the host's gateway (its lowest
//     local rank);
//  2. ring allreduce among the H gateways;
//  3. intra-host binomial-tree broadcast from the gateway.
//
// Communication steps: 2 ceil(log2 L) inside hosts, 2(H-1) between hosts.
//
// Bytes on the wire: the network carries 2(H-1)/H * n per gateway (only
// one rank per host uses the network, so it suits one NIC per host);
// intra-host links carry n per tree level. Hosts may have different
// numbers of ranks.
//
// Message step labels: tree levels for the reduce, hierRail+s for the
// gateway ring, chunk indices (offset by hierLocalAG) for the broadcast.
func AllReduceGateway(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, hosts [][]int, chunkBytes int) error {
	if p.Size() <= 1 || len(data) == 0 {
		if src != nil {
			memcopy.Copy(data, src)
		}
		return nil
	}
	host := -1
	for i, hr := range hosts {
		for _, r := range hr {
			if r == p.Rank() {
				host = i
			}
		}
	}
	if host < 0 {
		return fmt.Errorf("gateway allreduce: rank %d is on no host", p.Rank())
	}
	local := hosts[host]
	if len(local) > 1 {
		// The tree reads the input where it lies and writes the host's
		// sum into the gateway's data only; the broadcast fills the rest.
		in := data
		if src != nil {
			in = src
		}
		if err := ReduceTree(ctx, SubPeers(p, local, hierLocalRS), ws, in, data, dt, op, 0, chunkBytes); err != nil {
			return fmt.Errorf("gateway allreduce: intra-host reduce: %w", err)
		}
	} else if src != nil {
		memcopy.Copy(data, src)
	}
	if p.Rank() == local[0] && len(hosts) > 1 {
		gateways := make([]int, len(hosts))
		for i, hr := range hosts {
			gateways[i] = hr[0]
		}
		if err := AllReduceRing(ctx, SubPeers(p, gateways, hierRail), ws, data, dt, op, chunkBytes); err != nil {
			return fmt.Errorf("gateway allreduce: ring among gateways: %w", err)
		}
	}
	if len(local) > 1 {
		if err := BroadcastTree(ctx, SubPeers(p, local, hierLocalAG), data, 0, chunkBytes); err != nil {
			return fmt.Errorf("gateway allreduce: intra-host broadcast: %w", err)
		}
	}
	return nil
}
