package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// ScatterLinear distributes the blocks of data from root: block i is
// data[offs[i]:offs[i]+lens[i]] on the root and is delivered into out on
// rank i; out must be lens[Rank()] bytes long on every rank. data is only
// read, and only on the root (other ranks may pass nil). On the root, out
// may be the root's own block of data. offs and lens have Size() entries
// and are the same on every rank (offs matter on the root only).
//
// # Linear scatter
//
// The root sends every other rank its block in one message, one after the
// other in rank order starting after itself (root+1, root+2, .. mod p), and
// copies its own block locally. Each non-root rank receives its block
// directly into its output buffer. Empty blocks are skipped by both sides.
//
// Communication steps: 1 for non-root ranks, p-1 sequential sends at the
// root. Message step label: 0.
//
// Bytes on the wire: the root sends n minus its own block; every other rank
// receives its block.
func ScatterLinear(ctx context.Context, p Peers, data []byte, offs, lens []int, root int, out []byte) error {
	size, r := p.Size(), p.Rank()
	if r != root {
		if len(out) == 0 {
			return nil
		}
		if err := p.Recv(ctx, root, 0, out); err != nil {
			return fmt.Errorf("linear scatter: rank %d: recv from root %d: %w", r, root, err)
		}
		return nil
	}
	memcopy.Deliver(out, data[offs[r]:offs[r]+lens[r]])
	for i := 1; i < size; i++ {
		to := mod(root+i, size)
		if lens[to] == 0 {
			continue
		}
		if err := p.Send(ctx, to, 0, data[offs[to]:offs[to]+lens[to]]); err != nil {
			return fmt.Errorf("linear scatter: root %d: send to rank %d: %w", r, to, err)
		}
	}
	return nil
}
