package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// AllGatherRing fills every block of data from the rank that owns it: block
// i is data[offs[i]:offs[i]+lens[i]] and on entry block Rank() holds this
// rank's contribution. offs and lens have Size() entries and are the same
// on every rank; blocks must not overlap. chunkBytes is the pipelining unit
// (<= 0 sends each block as one message).
//
// # Ring allgather
//
// The p ranks form a ring: rank r sends to rank r+1 and receives from rank
// r-1 (mod p). Every rank starts with its own block in place and forwards
// around the ring the block it received in the previous step:
//
//	step s = 0 .. p-2:
//	  send    block (r-s) mod p   to   rank r+1
//	  receive block (r-s-1) mod p from rank r-1, directly into its place
//
// Blocks may have any byte length (allgatherv), including zero. Every block
// is cut into chunks of at most chunkBytes bytes, and the steps are
// pipelined: a sender goroutine forwards chunk k of step s+1 as soon as the
// receive loop has received chunk k of step s. Nothing is copied: chunks are
// received into their final position and sent from it. Where the
// connection to rank r+1 lends every chunk (see LendPeers), and not every
// chunk is eager or they are at least LendFirst times the smallest message
// lent, a rank lends them instead, on the calling goroutine without
// waiting for their copies, and waits for rank r+1 to have copied them all
// at the end: each byte is then copied once per step, by its receiver.
//
// Communication steps: p-1, each of ceil(block bytes / chunkBytes) messages.
// Every message of step s carries the step label s.
//
// Bytes on the wire per rank: sends n - |block r+1|, receives n - |block r|,
// where n is the total of all blocks; with p equal blocks (p-1)/p * n each
// way.
func AllGatherRing(ctx context.Context, p Peers, data []byte, offs, lens []int, chunkBytes int) error {
	return allGatherRing(ctx, p, nil, data, layout{offs: offs, lens: lens}, chunkBytes, 0)
}

// allGatherRing is AllGatherRing over any layout, with step labels starting
// at base. own, unless nil, is this rank's block, which it copies into its
// place in data: while the next rank copies what it lends, otherwise
// first.
func allGatherRing(ctx context.Context, p Peers, own, data []byte, l layout, chunkBytes int, base uint32) error {
	size, r := p.Size(), p.Rank()
	chunk := chunkSize(chunkBytes, 1)
	total, _ := l.chunks(size, chunk)
	next, prev := mod(r+1, size), mod(r-1, size)
	win := 0
	if size > 1 && total > 0 {
		win = ringWindow(p, l, chunk, total, next)
		// Lent, if the next rank takes every chunk so, and if not every
		// chunk is eager or they are large enough to pay.
		smallest := l.smallestChunk(size, chunk)
		if lp := lender(p, []int{next}, smallest); lp != nil && (win < total || lendsFirst(lp, []int{next}, smallest)) {
			return allGatherRingLent(ctx, p, lp, own, data, l, chunk, base)
		}
	}
	if off, n := l.block(r, size); own != nil {
		memcopy.Copy(data[off:off+n], own)
	}
	if size <= 1 || total == 0 {
		return nil
	}
	if win > 0 {
		for s := 0; s < size-1; s++ {
			sb, rb := mod(r-s, size), mod(r-s-1, size)
			soff, sn := l.block(sb, size)
			roff, rn := l.block(rb, size)
			snc, rnc := numChunks(sn, chunk), numChunks(rn, chunk)
			for w := 0; w < max(snc, rnc); w += win {
				for k := w; k < windowEnd(w, win, snc); k++ {
					lo, hi := chunkAt(soff, sn, chunk, k)
					if err := p.Send(ctx, next, base+uint32(s), data[lo:hi]); err != nil {
						return fmt.Errorf("ring allgather: rank %d step %d: send chunk %d of block %d to rank %d: %w", r, s, k, sb, next, err)
					}
				}
				for k := w; k < windowEnd(w, win, rnc); k++ {
					lo, hi := chunkAt(roff, rn, chunk, k)
					if err := p.Recv(ctx, prev, base+uint32(s), data[lo:hi]); err != nil {
						return fmt.Errorf("ring allgather: rank %d step %d: recv chunk %d of block %d from rank %d: %w", r, s, k, rb, prev, err)
					}
				}
			}
		}
		return nil
	}

	g := newGroup(ctx)
	defer g.cancel()
	// One token per chunk received in steps 0..p-3, which the sender
	// forwards in the next step.
	ready := make(chan struct{}, total)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer RecoverTo(g.fail)
		for s := 0; s < size-1; s++ {
			b := mod(r-s, size)
			off, n := l.block(b, size)
			for k, nc := 0, numChunks(n, chunk); k < nc; k++ {
				if s > 0 {
					if err := g.wait(ready); err != nil {
						g.fail(fmt.Errorf("ring allgather: rank %d step %d: waiting for chunk %d of block %d: %w", r, s, k, b, err))
						return
					}
				}
				lo, hi := chunkAt(off, n, chunk, k)
				if err := p.Send(g.ctx, next, base+uint32(s), data[lo:hi]); err != nil {
					g.fail(fmt.Errorf("ring allgather: rank %d step %d: send chunk %d of block %d to rank %d: %w", r, s, k, b, next, err))
					return
				}
			}
		}
	}()

recv:
	for s := 0; s < size-1; s++ {
		b := mod(r-s-1, size)
		off, n := l.block(b, size)
		for k, nc := 0, numChunks(n, chunk); k < nc; k++ {
			lo, hi := chunkAt(off, n, chunk, k)
			if err := p.Recv(g.ctx, prev, base+uint32(s), data[lo:hi]); err != nil {
				g.fail(fmt.Errorf("ring allgather: rank %d step %d: recv chunk %d of block %d from rank %d: %w", r, s, k, b, prev, err))
				break recv
			}
			if s < size-2 {
				ready <- struct{}{}
			}
		}
	}
	<-done
	return g.err
}

// allGatherRingLent is allGatherRing for a rank that lends every chunk to
// the next rank (lp): each step lends chunk k of the block to forward,
// then receives chunk k of the next block, k = 0, 1, ..., so that a
// connection never holds more than a few of its descriptors, whatever the
// number of chunks (ranks that each lent every chunk of a step before
// receiving would wait for each other once their buffers filled); at the
// end it waits for the next rank's copies. Step 0 lends own, if not nil,
// and copies each chunk of it into data while the next rank copies it.
func allGatherRingLent(ctx context.Context, p Peers, lp LendPeers, own, data []byte, l layout, chunk int, base uint32) error {
	size, r := p.Size(), p.Rank()
	next, prev := mod(r+1, size), mod(r-1, size)
	var err error
steps:
	for s := 0; s < size-1; s++ {
		sb, rb := mod(r-s, size), mod(r-s-1, size)
		soff, sn := l.block(sb, size)
		roff, rn := l.block(rb, size)
		out := data[soff : soff+sn]
		if s == 0 && own != nil {
			out = own
		}
		snc, rnc := numChunks(sn, chunk), numChunks(rn, chunk)
		for k := 0; k < max(snc, rnc); k++ {
			if k < snc {
				lo, hi := chunkAt(0, sn, chunk, k)
				if err = lp.Lend(ctx, next, base+uint32(s), out[lo:hi]); err != nil {
					err = fmt.Errorf("ring allgather: rank %d step %d: lend chunk %d of block %d to rank %d: %w", r, s, k, sb, next, err)
					break steps
				}
				if s == 0 && own != nil {
					memcopy.Copy(data[soff+lo:soff+hi], own[lo:hi])
				}
			}
			if k < rnc {
				lo, hi := chunkAt(roff, rn, chunk, k)
				if err = p.Recv(ctx, prev, base+uint32(s), data[lo:hi]); err != nil {
					err = fmt.Errorf("ring allgather: rank %d step %d: recv chunk %d of block %d from rank %d: %w", r, s, k, rb, prev, err)
					break steps
				}
			}
		}
	}
	return settleAll(ctx, lp, []int{next}, err, "ring allgather", r)
}
