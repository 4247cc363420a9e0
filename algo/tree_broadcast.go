package algo

import (
	"context"
	"fmt"
)

// BroadcastTree copies data from root to every rank. On the root data is
// the source; on the other ranks it is overwritten. chunkBytes is the
// pipelining unit (<= 0 sends the buffer as one message).
//
// # Binomial tree broadcast
//
// Ranks are renumbered relative to the root, v = (r - root) mod p, and form
// a binomial tree: the parent of v != 0 is v with its lowest set bit
// cleared, and the children of v are v + 2^j for every 2^j below v's lowest
// set bit (below the smallest power of two >= p for the root) with
// v + 2^j < p. The root has ceil(log2 p) children, the subtree of each child
// is half the size of the previous one.
//
// The buffer is cut into chunks of at most chunkBytes bytes, which flow down
// the tree as a pipeline: a rank receives chunk k from its parent directly
// into place while one sender goroutine per child forwards the chunks
// already received, so forwarding chunk k overlaps receiving chunk k+1.
// Children are fed independently, the largest subtree first. A rank that
// only sends (the root of a tree with one child, as with 2 ranks) or only
// receives (a leaf) does so on the calling goroutine: with nothing to
// overlap, a sender goroutine would only add switches (from a thread
// locked to its goroutine, as a call from C is, each one hands the
// processor to another thread and back).
//
// Communication steps: ceil(log2 p) tree levels; with c chunks the last
// rank receives the last chunk after about ceil(log2 p) + c - 1 chunk
// times. Message step labels: chunk index k.
//
// Bytes on the wire: every non-root rank receives n; a rank sends n to each
// of its children, so the root sends ceil(log2 p) * n, leaves send nothing.
// In total (p-1) * n bytes cross the wire.
func BroadcastTree(ctx context.Context, p Peers, data []byte, root int, chunkBytes int) error {
	size, r := p.Size(), p.Rank()
	if size <= 1 || len(data) == 0 {
		return nil
	}
	v := mod(r-root, size)
	chunk := chunkSize(chunkBytes, 1)
	nc := numChunks(len(data), chunk)

	// Children, largest subtree first.
	var children [64]int
	nchild := 0
	top := lowBit(v)
	if v == 0 {
		top = 1
		for top < size {
			top <<= 1
		}
	}
	for m := top >> 1; m >= 1; m >>= 1 {
		if v+m < size {
			children[nchild] = mod(v+m+root, size)
			nchild++
		}
	}

	if nc == 1 && eagerTo(p, children[:nchild], len(data)) {
		return broadcastTreeInline(ctx, p, data, v, root, children[:nchild])
	}
	switch {
	case v == 0 && nchild == 1:
		// A root with one child only sends: no receive to overlap.
		for k := 0; k < nc; k++ {
			lo, hi := chunkAt(0, len(data), chunk, k)
			if err := p.Send(ctx, children[0], uint32(k), data[lo:hi]); err != nil {
				return fmt.Errorf("tree broadcast: rank %d: send chunk %d to rank %d: %w", r, k, children[0], err)
			}
		}
		return nil
	case nchild == 0:
		// A leaf only receives.
		parent := mod(v-lowBit(v)+root, size)
		for k := 0; k < nc; k++ {
			lo, hi := chunkAt(0, len(data), chunk, k)
			if err := p.Recv(ctx, parent, uint32(k), data[lo:hi]); err != nil {
				return fmt.Errorf("tree broadcast: rank %d: recv chunk %d from rank %d: %w", r, k, parent, err)
			}
		}
		return nil
	}

	g := newGroup(ctx)
	defer g.cancel()
	// One token channel per child: the receive loop posts a token per
	// received chunk; the capacity holds every chunk so it never blocks.
	var ready [64]chan struct{}
	done := make(chan struct{}, nchild)
	for c := 0; c < nchild; c++ {
		if v != 0 {
			ready[c] = make(chan struct{}, nc)
		}
		go func(child int, ready chan struct{}) {
			defer func() { done <- struct{}{} }()
			defer RecoverTo(g.fail)
			for k := 0; k < nc; k++ {
				if ready != nil {
					if err := g.wait(ready); err != nil {
						g.fail(fmt.Errorf("tree broadcast: rank %d: waiting for chunk %d: %w", r, k, err))
						return
					}
				}
				lo, hi := chunkAt(0, len(data), chunk, k)
				if err := p.Send(g.ctx, child, uint32(k), data[lo:hi]); err != nil {
					g.fail(fmt.Errorf("tree broadcast: rank %d: send chunk %d to rank %d: %w", r, k, child, err))
					return
				}
			}
		}(children[c], ready[c])
	}

	if v != 0 {
		parent := mod(v-lowBit(v)+root, size)
		for k := 0; k < nc; k++ {
			lo, hi := chunkAt(0, len(data), chunk, k)
			if err := p.Recv(g.ctx, parent, uint32(k), data[lo:hi]); err != nil {
				g.fail(fmt.Errorf("tree broadcast: rank %d: recv chunk %d from rank %d: %w", r, k, parent, err))
				break
			}
			for c := 0; c < nchild; c++ {
				ready[c] <- struct{}{}
			}
		}
	}
	for c := 0; c < nchild; c++ {
		<-done
	}
	return g.err
}

// broadcastTreeInline is BroadcastTree for a message that is one chunk and
// fits every child's eager limit: receive it from the parent, then send it
// to each child in turn on the calling goroutine (no send waits for its
// receiver, so nothing is gained by sending concurrently, and a goroutine
// per child costs more than the copies).
func broadcastTreeInline(ctx context.Context, p Peers, data []byte, v, root int, children []int) error {
	r, size := p.Rank(), p.Size()
	if v != 0 {
		parent := mod(v-lowBit(v)+root, size)
		if err := p.Recv(ctx, parent, 0, data); err != nil {
			return fmt.Errorf("tree broadcast: rank %d: recv chunk 0 from rank %d: %w", r, parent, err)
		}
	}
	for _, child := range children {
		if err := p.Send(ctx, child, 0, data); err != nil {
			return fmt.Errorf("tree broadcast: rank %d: send chunk 0 to rank %d: %w", r, child, err)
		}
	}
	return nil
}

// lowBit returns the lowest set bit of v (0 for v == 0).
func lowBit(v int) int { return v & -v }
