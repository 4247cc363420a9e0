package algo

import (
	"context"
	"fmt"
)

// GatherLinear collects every rank's block at root: block i is
// data[offs[i]:offs[i]+lens[i]]. On every rank the own block is in place
// on entry. On the root every block is filled on return; on the other ranks
// only the own block is read and data is not modified. offs and lens have
// Size() entries and are the same on every rank.
//
// # Linear gather
//
// Every rank other than the root sends its block to the root in one
// message; the root receives them one after the other, in rank order
// starting after itself (root+1, root+2, .. mod p), directly into place.
// Empty blocks are skipped by both sides.
//
// Communication steps: 1 for non-root ranks, p-1 sequential receives at the
// root. Message step label: 0.
//
// Bytes on the wire: every non-root rank sends its block; the root receives
// n minus its own block. The root's inbound link is the bottleneck, which
// is inherent to gather.
func GatherLinear(ctx context.Context, p Peers, data []byte, offs, lens []int, root int) error {
	size, r := p.Size(), p.Rank()
	if size <= 1 {
		return nil
	}
	if r != root {
		if lens[r] == 0 {
			return nil
		}
		if err := p.Send(ctx, root, 0, data[offs[r]:offs[r]+lens[r]]); err != nil {
			return fmt.Errorf("linear gather: rank %d: send to root %d: %w", r, root, err)
		}
		return nil
	}
	for i := 1; i < size; i++ {
		from := mod(root+i, size)
		if lens[from] == 0 {
			continue
		}
		if err := p.Recv(ctx, from, 0, data[offs[from]:offs[from]+lens[from]]); err != nil {
			return fmt.Errorf("linear gather: root %d: recv from rank %d: %w", r, from, err)
		}
	}
	return nil
}
