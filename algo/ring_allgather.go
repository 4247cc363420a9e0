package algo

import (
	"context"
	"fmt"
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
// received into their final position and sent from it.
//
// Communication steps: p-1, each of ceil(block bytes / chunkBytes) messages.
// Every message of step s carries the step label s.
//
// Bytes on the wire per rank: sends n - |block r+1|, receives n - |block r|,
// where n is the total of all blocks; with p equal blocks (p-1)/p * n each
// way.
func AllGatherRing(ctx context.Context, p Peers, data []byte, offs, lens []int, chunkBytes int) error {
	return allGatherRing(ctx, p, data, layout{offs: offs, lens: lens}, chunkBytes, 0)
}

// allGatherRing is AllGatherRing over any layout, with step labels starting
// at base.
func allGatherRing(ctx context.Context, p Peers, data []byte, l layout, chunkBytes int, base uint32) error {
	size, r := p.Size(), p.Rank()
	if size <= 1 {
		return nil
	}
	chunk := chunkSize(chunkBytes, 1)
	total, _ := l.chunks(size, chunk)
	if total == 0 {
		return nil
	}
	next, prev := mod(r+1, size), mod(r-1, size)
	if win := ringWindow(p, l, chunk, total, next); win > 0 {
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
