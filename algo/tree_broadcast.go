package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
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
// Where every child of a rank takes its chunks lent (see LendPeers), and
// they do not fit the connections' buffers or are at least LendFirst times
// the smallest message lent, the rank lends them instead, on the calling
// goroutine: chunk k to every child as soon as it has it, waiting for the
// children's copies only at the end. Every byte is then copied once per
// receiving rank, by that rank; the root lends its source and copies it
// into its own output meanwhile.
//
// Communication steps: ceil(log2 p) tree levels; with c chunks the last
// rank receives the last chunk after about ceil(log2 p) + c - 1 chunk
// times. Message step labels: chunk index k.
//
// Bytes on the wire: every non-root rank receives n; a rank sends n to each
// of its children, so the root sends ceil(log2 p) * n, leaves send nothing.
// In total (p-1) * n bytes cross the wire.
func BroadcastTree(ctx context.Context, p Peers, data []byte, root int, chunkBytes int) error {
	return broadcastTree(ctx, p, data, data, root, chunkBytes, false)
}

// broadcastTree is BroadcastTree where the root broadcasts src (len(data)
// bytes; src may be data) and copies it into its own data: while its
// children copy what it lends them, otherwise first. Other ranks ignore
// src. A rank with one child lends it nothing unless crowded (the host's
// ranks outnumber its cores): copying into the connection's buffer while
// the child copies out keeps two cores busy with half the copying each,
// where lending leaves all of it to the child's (a 64 MiB broadcast
// between 2 processes on 2 cores: 5.8-6.9 ms through the rings, 14-17
// lent); crowded, or with several children, lending saves copies that
// would share the cores (4 processes on 2 cores, 16 MiB: lent from every
// rank 5.0-6.3 ms, from the root only 5.8-6.8; 64 MiB 31-34 against
// 39-45). Crowded, a broadcast of one chunk is not lent: a child forwards
// the chunk only once it has all of it, so the tree's levels copy one
// after the other whichever way it goes, and there two copies through the
// rings took less than one process_vm_readv with its descriptor and
// completion (4 processes on 2 cores, 4 rotating rounds, medians: 256 KiB
// 59 us through the rings against 85 lent, 512 KiB 121 against 143; Open
// MPI's vader 56 and 116; from 2 chunks on lending is faster: 1 MiB 259
// against 360).
func broadcastTree(ctx context.Context, p Peers, src, data []byte, root int, chunkBytes int, crowded bool) error {
	size, r := p.Size(), p.Rank()
	if size <= 1 || len(data) == 0 {
		if r == root && !same(src, data) {
			memcopy.Copy(data, src)
		}
		return nil
	}
	v := mod(r-root, size)
	chunk := chunkSize(chunkBytes, 1)
	nc := numChunks(len(data), chunk)

	var buf [64]int
	children := treeChildren(v, root, size, buf[:0])
	nchild := len(children)
	inline := nc == 1 && eagerTo(p, children, len(data))
	if (nchild > 1 || (nchild == 1 && crowded)) && (nc > 1 || !crowded) {
		// Lent, if every child takes every chunk so, and if the buffer
		// does not go inline or its chunks are large enough to pay.
		smallest := lastChunk(len(data), chunk)
		if lp := lender(p, children, smallest); lp != nil && (!inline || lendsFirst(lp, children, smallest)) {
			return broadcastTreeLent(ctx, p, lp, src, data, v, root, chunk, children)
		}
	}
	if v == 0 && !same(src, data) {
		memcopy.Copy(data, src)
	}
	if inline {
		return broadcastTreeInline(ctx, p, data, v, root, children)
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

// broadcastTreeLent is BroadcastTree for a rank that lends every chunk to
// each of its children (lp): it receives chunk k from its parent, if it
// has one, and lends it to every child without waiting for their copies,
// all on the calling goroutine, then waits for the children to have
// copied everything. Every byte is copied once per rank, by the rank that
// receives it, and a rank forwards chunk k as soon as it has it. The root
// lends src and copies it into data while its children copy.
func broadcastTreeLent(ctx context.Context, p Peers, lp LendPeers, src, data []byte, v, root, chunk int, children []int) error {
	r, size := p.Rank(), p.Size()
	parent := mod(v-lowBit(v)+root, size)
	out := data
	if v == 0 {
		out = src
	}
	var err error
	for k, nc := 0, numChunks(len(data), chunk); k < nc && err == nil; k++ {
		lo, hi := chunkAt(0, len(data), chunk, k)
		if v != 0 {
			if err = p.Recv(ctx, parent, uint32(k), data[lo:hi]); err != nil {
				err = fmt.Errorf("tree broadcast: rank %d: recv chunk %d from rank %d: %w", r, k, parent, err)
				break
			}
		}
		for _, child := range children {
			if err = lp.Lend(ctx, child, uint32(k), out[lo:hi]); err != nil {
				err = fmt.Errorf("tree broadcast: rank %d: lend chunk %d to rank %d: %w", r, k, child, err)
				break
			}
		}
	}
	if err == nil && !same(out, data) {
		memcopy.Copy(data, out)
	}
	return settleAll(ctx, lp, children, err, "tree broadcast", r)
}

// TreeParent returns the parent of rank r in BroadcastTree's binomial tree
// of size ranks rooted at root, -1 for the root.
func TreeParent(r, root, size int) int {
	v := mod(r-root, size)
	if v == 0 {
		return -1
	}
	return mod(v-lowBit(v)+root, size)
}

// TreeChildren appends to children the children of rank r in
// BroadcastTree's binomial tree of size ranks rooted at root, in the order
// BroadcastTree sends to them (largest subtree first), and returns it.
func TreeChildren(r, root, size int, children []int) []int {
	return treeChildren(mod(r-root, size), root, size, children)
}

// treeChildren appends to children the ranks of the children of v (the
// rank relative to root) in the binomial tree of size ranks rooted at
// root, largest subtree first, and returns it.
func treeChildren(v, root, size int, children []int) []int {
	top := lowBit(v)
	if v == 0 {
		top = 1
		for top < size {
			top <<= 1
		}
	}
	for m := top >> 1; m >= 1; m >>= 1 {
		if v+m < size {
			children = append(children, mod(v+m+root, size))
		}
	}
	return children
}

// lowBit returns the lowest set bit of v (0 for v == 0).
func lowBit(v int) int { return v & -v }
