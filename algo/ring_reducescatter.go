package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// ReduceScatterRing reduces data over all ranks with op's combiner and
// leaves segment Rank() — elements segs[r] to segs[r+1] — of data holding the
// result on rank r. segs has Size()+1 nondecreasing element offsets into
// data; segments may be empty or uneven. The other segments of data are
// used as scratch and hold partial results on return. chunkBytes is the
// pipelining unit (rounded down to whole elements; <= 0 sends each segment
// as one message). Staging uses SlotStage.
//
// # Ring reduce-scatter
//
// The p ranks form a ring: rank r sends to rank r+1 and receives from rank
// r-1 (mod p). The vector of n bytes is cut into p segments given by the
// caller (they may be uneven or empty). Segment b travels around the ring
// starting at rank b+1 and accumulating one rank's contribution per hop, so
// that it ends, fully reduced, on rank b:
//
//	step s = 0 .. p-2:
//	  send    segment (r-s-1) mod p to   rank r+1
//	  receive segment (r-s-2) mod p from rank r-1 and reduce it into data
//
// The segment sent in step s+1 is the one reduced in step s, and after step
// p-2 rank r has reduced segment (r-p) mod p = r for the last time.
//
// Every segment is further cut into chunks of at most chunkBytes (whole
// elements), and the steps are pipelined: a sender goroutine sends chunk k
// of step s+1 as soon as the receive loop has reduced chunk k of step s, so
// that sending one chunk overlaps receiving and reducing the next. The
// receive loop reduces each chunk into place from where the connection
// holds it where the peers can show it (ViewPeers: a shared-memory ring),
// else from a staging buffer of one chunk that it receives it into.
//
// Communication steps: p-1, each of ceil(segment bytes / chunkBytes)
// messages. Every message of step s carries the step label s.
//
// Bytes on the wire per rank: sends n - |segment r|, receives
// n - |segment r-1|; with p equal segments (p-1)/p * n each way.
//
// The input vector is overwritten: on return segment r of data holds the
// result on rank r and the other segments hold partial reductions. The
// out-of-place form (ReduceScatterRingFrom) reads the input from a separate
// vector and never writes it: step 0 sends straight from it and every
// received chunk is combined with it into data, which saves copying the
// input first.
func ReduceScatterRing(ctx context.Context, p Peers, ws *Workspace, data []byte, dt DType, op Op, segs []int, chunkBytes int) error {
	return reduceScatterRing(ctx, p, ws, nil, data, dt, op, layout{segs: segs, scale: dt.Size()}, chunkBytes, 0)
}

// ReduceScatterRingFrom is ReduceScatterRing with the input in src, which is
// only read; data (the same length) receives the result segment and the
// partial reductions.
func ReduceScatterRingFrom(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, segs []int, chunkBytes int) error {
	return reduceScatterRing(ctx, p, ws, src, data, dt, op, layout{segs: segs, scale: dt.Size()}, chunkBytes, 0)
}

// ReduceScatterRingBlocks is ReduceScatterRingFrom with each rank's block
// given by a byte offset and length (offs[i], lens[i] for ring position i),
// so the blocks may be laid out in any order. src may be nil (in place).
func ReduceScatterRingBlocks(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, offs, lens []int, chunkBytes int) error {
	return reduceScatterRing(ctx, p, ws, src, data, dt, op, layout{offs: offs, lens: lens, scale: dt.Size()}, chunkBytes, 0)
}

// layout describes the p blocks a ring schedule moves, without allocating:
// either byte offsets and lengths, element boundaries segs scaled by the
// element size, or (when both are nil) the balanced Partition of count
// elements of the given size.
type layout struct {
	offs, lens []int
	segs       []int
	count      int
	scale      int
}

// block returns the byte offset and length of block i of p.
func (l layout) block(i, p int) (off, n int) {
	switch {
	case l.offs != nil:
		return l.offs[i], l.lens[i]
	case l.segs != nil:
		return l.segs[i] * l.scale, (l.segs[i+1] - l.segs[i]) * l.scale
	}
	off, n = Partition(l.count, p, i)
	return off * l.scale, n * l.scale
}

// chunks returns the total number of chunks over all p blocks and the
// largest chunk.
func (l layout) chunks(p, chunk int) (total, largest int) {
	for i := 0; i < p; i++ {
		_, n := l.block(i, p)
		total += numChunks(n, chunk)
		largest = max(largest, min(n, chunk))
	}
	return total, largest
}

// smallestChunk returns the length in bytes of the smallest chunk of the
// p blocks cut into chunks of chunk bytes (0 if no block has a byte).
func (l layout) smallestChunk(p, chunk int) int {
	smallest := 0
	for i := 0; i < p; i++ {
		if _, n := l.block(i, p); n > 0 && (smallest == 0 || lastChunk(n, chunk) < smallest) {
			smallest = lastChunk(n, chunk)
		}
	}
	return smallest
}

// largestBlock returns the length in bytes of the largest of the p blocks.
func (l layout) largestBlock(p int) int {
	largest := 0
	for i := 0; i < p; i++ {
		_, n := l.block(i, p)
		largest = max(largest, n)
	}
	return largest
}

// ringWindow says whether a ring schedule over layout l, cut into chunks
// of chunk bytes, runs on the calling goroutine, and how: it returns the
// number of chunks a rank sends before it receives as many, 0 for a
// sender goroutine instead.
//
// Inline, each step sends the chunks of a window, then receives the chunks
// of the same window, window after window. A window's payloads fit the
// next rank's eager limit, so the window fits its connection's buffer at
// once (the transports keep four times the limit, which covers the frames'
// headers): a send waits at
// most for next to receive an earlier window, and next receives a window
// before it sends the following one, so the ring cannot deadlock. The
// messages are the same chunks as with a sender goroutine, so ranks that
// decide differently still agree on every message.
//
// A whole step is one window when every block fits the eager limit (see
// eagerTo). A rank with one CPU's worth (see CPUPeers) runs every ring
// inline, in windows of as many chunks as the eager limit holds: a sender
// goroutine there cannot overlap its copies with the receives, and only
// adds a hand-off per chunk (from a thread locked to its goroutine, as a
// call from C is, two thread switches).
func ringWindow(p Peers, l layout, chunk, total, next int) int {
	if eagerTo(p, []int{next}, l.largestBlock(p.Size())) {
		return total
	}
	ep, ok := p.(EagerPeers)
	if !ok || chunk > ep.EagerLimit(next) || !oneCPU(p) {
		return 0
	}
	return ep.EagerLimit(next) / chunk
}

// windowEnd returns the end of the window of k chunks starting at chunk w,
// for a block of n chunks.
func windowEnd(w, k, n int) int { return min(n, w+k) }

// operand returns the bytes lo to hi of src, the other operand of a ring
// reduce-scatter's received chunk, or nil in place (src is the output).
func operand(src []byte, lo, hi int, inPlace bool) []byte {
	if inPlace {
		return nil
	}
	return src[lo:hi]
}

// reduceScatterRing is ReduceScatterRing over any layout, with step labels
// starting at base. A nil src means in place (src is data).
func reduceScatterRing(ctx context.Context, p Peers, ws *Workspace, src, data []byte, dt DType, op Op, l layout, chunkBytes int, base uint32) error {
	size, r := p.Size(), p.Rank()
	inPlace := src == nil
	if inPlace {
		src = data
	}
	if size <= 1 {
		if !inPlace {
			memcopy.Copy(data, src)
		}
		return nil
	}
	op = op.Combiner()
	chunk := chunkSize(chunkBytes, dt.Size())
	total, largest := l.chunks(size, chunk)
	if total == 0 {
		return nil
	}
	stage := ws.Get(SlotStage, largest)
	next, prev := mod(r+1, size), mod(r-1, size)
	if win := ringWindow(p, l, chunk, total, next); win > 0 {
		for s := 0; s < size-1; s++ {
			sb, rb := mod(r-s-1, size), mod(r-s-2, size)
			soff, sn := l.block(sb, size)
			roff, rn := l.block(rb, size)
			snc, rnc := numChunks(sn, chunk), numChunks(rn, chunk)
			from := data
			if s == 0 {
				from = src
			}
			for w := 0; w < max(snc, rnc); w += win {
				for k := w; k < windowEnd(w, win, snc); k++ {
					lo, hi := chunkAt(soff, sn, chunk, k)
					if err := p.Send(ctx, next, base+uint32(s), from[lo:hi]); err != nil {
						return fmt.Errorf("ring reduce-scatter: rank %d step %d: send chunk %d of segment %d to rank %d: %w", r, s, k, sb, next, err)
					}
				}
				for k := w; k < windowEnd(w, win, rnc); k++ {
					lo, hi := chunkAt(roff, rn, chunk, k)
					if err := recvReduce(ctx, p, prev, base+uint32(s), stage[:hi-lo], &reduction{ws: ws, dst: data[lo:hi], src: operand(src, lo, hi, inPlace), dt: dt, op: op}); err != nil {
						return fmt.Errorf("ring reduce-scatter: rank %d step %d: recv chunk %d of segment %d from rank %d: %w", r, s, k, rb, prev, err)
					}
				}
			}
		}
		return nil
	}

	g := newGroup(ctx)
	defer g.cancel()
	// One token per chunk reduced in steps 0..p-3: the sender may forward
	// that chunk in the next step. The capacity covers every chunk, so the
	// receive loop never blocks on it.
	ready := make(chan struct{}, total)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer RecoverTo(g.fail)
		for s := 0; s < size-1; s++ {
			b := mod(r-s-1, size)
			off, n := l.block(b, size)
			for k, nc := 0, numChunks(n, chunk); k < nc; k++ {
				if s > 0 {
					if err := g.wait(ready); err != nil {
						g.fail(fmt.Errorf("ring reduce-scatter: rank %d step %d: waiting for chunk %d of segment %d: %w", r, s, k, b, err))
						return
					}
				}
				lo, hi := chunkAt(off, n, chunk, k)
				from := data
				if s == 0 {
					from = src // step 0 sends this rank's own input
				}
				if err := p.Send(g.ctx, next, base+uint32(s), from[lo:hi]); err != nil {
					g.fail(fmt.Errorf("ring reduce-scatter: rank %d step %d: send chunk %d of segment %d to rank %d: %w", r, s, k, b, next, err))
					return
				}
			}
		}
	}()

recv:
	for s := 0; s < size-1; s++ {
		b := mod(r-s-2, size)
		off, n := l.block(b, size)
		for k, nc := 0, numChunks(n, chunk); k < nc; k++ {
			lo, hi := chunkAt(off, n, chunk, k)
			if err := recvReduce(g.ctx, p, prev, base+uint32(s), stage[:hi-lo], &reduction{ws: ws, dst: data[lo:hi], src: operand(src, lo, hi, inPlace), dt: dt, op: op}); err != nil {
				g.fail(fmt.Errorf("ring reduce-scatter: rank %d step %d: recv chunk %d of segment %d from rank %d: %w", r, s, k, b, prev, err))
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
