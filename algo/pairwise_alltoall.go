package algo

import (
	"context"
	"fmt"

	"github.com/occl/occl/internal/memcopy"
)

// AllToAllPairwise sends send[sendOffs[i]:sendOffs[i]+sendLens[i]] to rank
// i and receives rank i's block for this rank into
// recv[recvOffs[i]:recvOffs[i]+recvLens[i]], for every rank i including
// this one (copied locally). sendLens[j] on rank i must equal recvLens[i]
// on rank j. send and recv must not overlap (an in-place all-to-all runs
// the same exchange through pairwiseInPlace, or on a copy of its input).
//
// # Pairwise-exchange all-to-all
//
// Every rank has one block for every rank (possibly of different sizes:
// this serves both AllToAll and AllToAllV). The own block is copied
// locally; the others are exchanged in p-1 steps where each rank sends to
// one rank and receives from another, so that every step is a permutation
// and no rank is the target of two senders at once:
//
//	step s = 1 .. p-1:
//	  send    block for rank (r+s) mod p to that rank
//	  receive block from rank (r-s) mod p into its place
//
// The sends run in one sender goroutine while the caller receives, in the
// same step order, so that a rank may send step s+1 while it is still
// receiving step s; matching in step order on both sides cannot deadlock.
// Blocks larger than 512 KiB (pairwiseChunk) go in pieces of that size,
// round robin: piece c of every step, then piece c+1, on both sides, so
// that a rank keeps moving data with whichever peers are running instead
// of waiting for one peer's whole block (4 processes on 2 cores, 64 MiB,
// pieces of 1 MiB: 20.3-20.6 -> 15.7-17.0 ms).
// The sender keeps pace with the rank's own receives: it sends round c
// only once piece c-lead of every peer's block has arrived, lead being 1,
// or 2 between two ranks, where a round is one piece (paceLead). Since its
// receiver's sender was held the same way, at most 2*lead rounds of
// pieces are then in flight on a link. A sender left to run ahead fills
// the sockets with pieces their receivers are not yet taking; kept in
// step, the ranks move through the rounds together (TCP over loopback on
// 2 cores, 4 processes: 16 and 64 MiB 1.17x and 1.20x faster; 2
// processes: 64 MiB 1.10x-1.12x, 8-16 MiB even; see docs/performance.md).
// Two ranks kept to one round ahead were slower (2 and 16 MiB: 0.81x and
// 0.75x).
// It cannot deadlock either: a send waits only for a receiver behind it
// and for its own rank's receives of earlier rounds, and the receiver
// waiting on the earliest piece waits for a sender that nothing blocks.
// Empty blocks are skipped by both sides: a block is skipped by its sender
// exactly when its receiver skips it, as the block sizes agree.
// When every block this rank sends fits in its connection's eager limit
// and in a piece (and is at most 64 KiB, unless the process has one
// processor), the sends are made inline first and the
// receives follow, on the caller's goroutine: no send waits for its
// receiver, so this cannot deadlock either, and a small all-to-all costs
// no goroutine. The own block is copied between the sends and the
// receives there, so that an in-place all-to-all needs no copy of its
// input: every block has left the buffer before anything lands in it.
// Blocks that the connection lends (LendPeers: shared memory, where the
// receiver copies them out of the sender's memory) take the same inline
// path, as long as every other block is eager: the rank posts all its
// blocks, receives its peers' (copying the lent ones out of their
// memory), and then waits until its own lent blocks have been taken. Every
// lent byte is copied once, as by MPI's rendezvous over cross-memory
// attach, instead of into a ring and out of it; no send waits for its
// receiver, so this cannot deadlock either. A rank that sends in pieces
// lends such blocks too, whole, in the first round.
//
// Whichever way a rank goes, each block travels in the same messages: whole
// where its sender lends it by size (which its receiver knows:
// LendPeers.LentMin) or it is at most a piece, else in pieces. A block
// taken whole may still be sent rather than lent where the connection's
// rule for whole messages says so (WholeLendPeers): one message, which
// the receiver takes as it takes a lent one. The pieces of a block that
// does not stay in the cache are copied to their place past the caches
// where the connection shows them where they lie (ViewPeers). A rank
// that lends can so meet
// one that sends in pieces (an AllToAllV whose large blocks go to peers on
// shared memory on one rank and over TCP on another).
//
// Two ranks whose connection sends and receives at once on one goroutine
// (DuplexPeers: TCP), with blocks of at most a piece that are not all
// eager, exchange them in one call instead of a sender goroutine and the
// caller's receive: one thread writes and reads the socket by turns, so
// no thread wakes another and each copy runs on the CPU that last
// touched the data. Over loopback, 2 processes on 2 cores, a 1 MiB
// AllToAll took 181 us before and 162 us after (medians of 10
// interleaved rounds; Open MPI's TCP transport 180 us); larger blocks
// keep the two threads, which overlap their copies (16 MiB: 2.2 ms,
// against 2.7 ms in one thread). The messages are the same either way.
//
// Communication steps: p-1 (times the pieces of the largest block).
// Message step labels: c*p + s for piece c of step s (a whole block is
// piece 0).
//
// Bytes on the wire per rank: sends everything but its own block, receives
// everything but its own block; for AllToAll with n bytes per rank that is
// (p-1)/p * n each way.
func AllToAllPairwise(ctx context.Context, p Peers, send []byte, sendOffs, sendLens []int, recv []byte, recvOffs, recvLens []int) error {
	return allToAllPairwise(ctx, p, send, sendOffs, sendLens, recv, recvOffs, recvLens, true)
}

// allToAllPairwise is AllToAllPairwise, lending blocks only if lend is
// set: an in-place all-to-all, whose ranks all run in place, lends
// nothing, and each of its ranks expects nothing lent.
func allToAllPairwise(ctx context.Context, p Peers, send []byte, sendOffs, sendLens []int, recv []byte, recvOffs, recvLens []int, lend bool) error {
	size, r := p.Size(), p.Rank()
	if size <= 1 {
		memcopy.Deliver(recv[recvOffs[r]:recvOffs[r]+recvLens[r]], send[sendOffs[r]:sendOffs[r]+sendLens[r]])
		return nil
	}
	if lp, ok := inlineAllToAll(p, r, send, sendOffs, sendLens, lend); ok {
		// Every block fits in its connection's buffer, or is lent to
		// its receiver (LendPeers): send them all, then receive, on the
		// caller's goroutine, then wait for the lent blocks to be
		// taken. No send waits for its receiver, so no rank can block
		// another, and the exchange costs no goroutine and no context.
		b := rankBlocks{send: send, sendOffs: sendOffs, sendLens: sendLens, recv: recv, recvOffs: recvOffs, recvLens: recvLens}
		if lp == nil && lend && lendable(recvLens, r) {
			// This rank lends nothing, but its peers may lend it their
			// blocks: it must receive them as lent (none of its own
			// blocks is lent by lp either, as inlineAllToAll found).
			from, _ := p.(LendPeers)
			return exchangeInline(ctx, p, size, r, from, &b, false)
		}
		err := exchangeInline(ctx, p, size, r, lp, &b, false)
		if lp == nil {
			return err
		}
		return settleLent(ctx, p, lp, &b, err)
	}
	var lp LendPeers
	if lend {
		lp, _ = p.(LendPeers)
	}
	nsend, nlent := 0, 0
	for s := 1; s < size; s++ {
		if to := mod(r+s, size); lentBlock(lp, to, send[sendOffs[to]:sendOffs[to]+sendLens[to]]) {
			nlent++
		} else if sendLens[to] > 0 {
			nsend++
		}
	}
	memcopy.Deliver(recv[recvOffs[r]:recvOffs[r]+recvLens[r]], send[sendOffs[r]:sendOffs[r]+sendLens[r]])
	if size == 2 && nlent == 0 && (lp == nil || lp.LentMin(1-r) == 0) {
		peer := 1 - r
		if d := duplexWith(p, peer, max(sendLens[peer], recvLens[peer])); d != nil {
			return pairDuplex(ctx, d, r, send[sendOffs[peer]:sendOffs[peer]+sendLens[peer]], recv[recvOffs[peer]:recvOffs[peer]+recvLens[peer]])
		}
	}
	g := newGroup(ctx)
	defer g.cancel()
	// Blocks larger than pairwiseChunk go in pieces, round robin over the
	// peers (piece c to every peer, then piece c+1), so that a rank keeps
	// moving data with whichever peers can take it instead of waiting for
	// one peer's whole block. Lent blocks go whole, in the first round.
	rounds := 1
	for i := range sendLens {
		rounds = max(rounds, pieces(sendLens[i]))
	}
	b := rankBlocks{send: send, sendOffs: sendOffs, sendLens: sendLens, recv: recv, recvOffs: recvOffs, recvLens: recvLens}
	// The sender starts round c once this rank has received round c-lead
	// (or everything).
	lead := paceLead(size)
	var received chan struct{}
	if rounds > lead {
		received = make(chan struct{}, recvRounds(r, lp, &b))
	}
	var done chan struct{}
	if nsend+nlent > 0 {
		done = make(chan struct{})
		go func() {
			defer close(done)
			defer RecoverTo(g.fail)
			for c := range rounds {
				if c >= lead && received != nil && g.wait(received) != nil {
					return
				}
				for s := 1; s < size; s++ {
					to := mod(r+s, size)
					var err error
					if blk := send[sendOffs[to] : sendOffs[to]+sendLens[to]]; lentBlock(lp, to, blk) {
						if c == 0 {
							err = lp.Lend(g.ctx, to, uint32(s), blk)
						}
					} else if len(blk) > pairwiseChunk && lent(lp, to, len(blk)) {
						// Taken whole, but not lent (WholeLendPeers).
						if c == 0 {
							err = p.Send(g.ctx, to, uint32(s), blk)
						}
					} else if lo, hi, ok := piece(sendLens[to], c); ok {
						off := sendOffs[to]
						err = p.Send(g.ctx, to, uint32(c*size+s), send[off+lo:off+hi])
					}
					if err != nil {
						g.fail(fmt.Errorf("pairwise all-to-all: rank %d step %d piece %d: send to rank %d: %w", r, s, c, to, err))
						return
					}
				}
			}
		}()
	}
	g.fail(recvBlocks(g.ctx, p, size, r, lp, &b, received))
	if done != nil {
		<-done
	}
	if nlent > 0 {
		return settleLent(ctx, p, lp, &b, g.err)
	}
	return g.err
}

// pairDuplex is the exchange of two ranks whose connection is duplex
// (DuplexPeers) and lends nothing: piece c of each block, in both
// directions at once, for every c, on the calling goroutine.
func pairDuplex(ctx context.Context, d DuplexPeers, r int, sblk, rblk []byte) error {
	peer := 1 - r
	rounds := max(pieces(len(sblk)), pieces(len(rblk)))
	for c := range rounds {
		slo, shi, sok := piece(len(sblk), c)
		rlo, rhi, rok := piece(len(rblk), c)
		step := uint32(c*2 + 1)
		var err error
		switch {
		case sok && rok:
			err = d.Exchange(ctx, peer, step, sblk[slo:shi], step, rblk[rlo:rhi])
		case sok:
			err = d.Send(ctx, peer, step, sblk[slo:shi])
		case rok:
			err = d.Recv(ctx, peer, step, rblk[rlo:rhi])
		}
		if err != nil {
			return fmt.Errorf("pairwise all-to-all: rank %d piece %d: exchange with rank %d: %w", r, c, peer, err)
		}
	}
	return nil
}

// paceLead is how many rounds of pieces the sender of a pairwise exchange
// among size ranks may run ahead of its rank's receives: one, or two
// where a round is a single piece (two ranks), so that a sender may have
// at least two pieces out beyond the round its rank is receiving.
func paceLead(size int) int {
	if size == 2 {
		return 2
	}
	return 1
}

// recvBlocks receives every peer's block into b.recv, in the messages its
// sender uses whatever the path it takes: whole where the sender lends it
// (lp: lentFrom) or it is at most a piece, else in pieces, round robin
// over the peers (piece c from every peer, then piece c+1) as the pieces
// are sent; a whole block is received in the first round. If received is
// not nil, it gets a token after each round (its capacity must be at
// least recvRounds, so that this never blocks) and is closed when the
// receives end, whether they succeed or not.
func recvBlocks(ctx context.Context, p Peers, size, r int, lp LendPeers, b *rankBlocks, received chan<- struct{}) error {
	if received != nil {
		defer close(received)
	}
	for c := range recvRounds(r, lp, b) {
		if err := recvRound(ctx, p, size, r, lp, b, c); err != nil {
			return err
		}
		if received != nil {
			received <- struct{}{}
		}
	}
	return nil
}

// recvRounds is how many rounds recvBlocks receives in: the pieces of the
// longest block that is not lent, at least one.
func recvRounds(r int, lp LendPeers, b *rankBlocks) int {
	longest := 0
	for i, n := range b.recvLens {
		if i != r && n > longest && (lp == nil || !lentFrom(lp, i, n)) {
			longest = n
		}
	}
	if longest > pairwiseChunk {
		return pieces(longest)
	}
	return 1
}

// recvRound receives round c of recvBlocks: piece c of every peer's block
// that goes in pieces, and in round 0 the blocks that go whole.
func recvRound(ctx context.Context, p Peers, size, r int, lp LendPeers, b *rankBlocks, c int) error {
	for s := 1; s < size; s++ {
		from := mod(r-s, size)
		n, off := b.recvLens[from], b.recvOffs[from]
		lo, hi, ok := piece(n, c)
		if lp != nil && lentFrom(lp, from, n) {
			lo, hi, ok = 0, n, c == 0
		}
		if !ok {
			continue
		}
		if err := b.recvPiece(ctx, p, from, uint32(c*size+s), b.recv[off+lo:off+hi], n); err != nil {
			return fmt.Errorf("pairwise all-to-all: rank %d step %d piece %d: recv from rank %d: %w", r, s, c, from, err)
		}
	}
	return nil
}

// recvPiece receives message step from peer into dst, a piece of a block
// of n bytes: where the block does not stay in the cache
// (memcopy.Streams) and p can show the message where it lies, it is
// copied from there with stores that go past the caches (not reading
// every line of dst first), through b.sink.
func (b *rankBlocks) recvPiece(ctx context.Context, p Peers, peer int, step uint32, dst []byte, n int) error {
	if !memcopy.Streams(n) {
		return p.Recv(ctx, peer, step, dst) // small blocks: no type assertion
	}
	vp, ok := p.(ViewPeers)
	if !ok {
		return p.Recv(ctx, peer, step, dst)
	}
	if b.sink == nil {
		b.sink = new(delivery) // once per exchange, for its large blocks only
	}
	b.sink.dst = dst
	err := vp.RecvView(ctx, peer, step, dst, 1, b.sink)
	b.sink.dst = nil
	return err
}

// delivery is the transport.Consumer of rankBlocks.recvPiece: it copies
// each piece to the same bytes of dst, past the caches; a piece already
// there (received into dst) stays.
type delivery struct{ dst []byte }

// Consume implements transport.Consumer.
func (d *delivery) Consume(off int, piece []byte) { memcopy.Stream(d.dst[off:], piece) }

// PairwisePiece is the largest block the pairwise all-to-all sends as one
// message, the largest piece of a larger one. It is within shared memory's
// eager limit (a quarter of its 4 MiB ring), so that an in-place exchange
// sends its pieces straight from its buffer (exchangePieces). An exchange
// whose blocks are all at most this (or lent) runs on its calling
// goroutine alone (exchangeInline); larger ones start a sender goroutine.
const PairwisePiece = 512 << 10

// pairwiseChunk is PairwisePiece, changed by tests.
var pairwiseChunk = PairwisePiece

// pieces is how many pieces a block of n bytes goes in.
func pieces(n int) int { return (n + pairwiseChunk - 1) / pairwiseChunk }

// piece returns the byte range of piece c of a block of n bytes, and
// whether there is one (an empty block has none).
func piece(n, c int) (lo, hi int, ok bool) {
	lo = c * pairwiseChunk
	if lo >= n {
		return 0, 0, false
	}
	return lo, min(lo+pairwiseChunk, n), true
}

// pairwiseInPlace runs an in-place all-to-all (a.Src is a.Dst) as the
// pairwise exchange on its buffer as it is, without copying its input
// first, if every block goes by the eager path: its sends have all
// returned (the blocks have left the buffer) before the own block is
// copied and anything is received. Larger blocks go in pieces
// (exchangePieces, or pairwiseInPlacePieces where a piece is above its
// connection's eager limit) where every peer's block is received where the
// block sent to it lies (always so for AllToAll). It reports whether it
// ran; otherwise the caller runs the exchange on a copy of the input, not
// lending (allToAllPairwise). No block is lent in place, since the
// receives overwrite the buffer while the peers could still be copying
// out of it, so every rank of the all-to-all must run in place, and then
// none expects a lent block.
func pairwiseInPlace(ctx context.Context, a *Args) (bool, error) {
	p := a.Peers
	if p.Size() <= 1 {
		return false, nil
	}
	r := p.Rank()
	b := rankBlocks{send: a.Dst, sendOffs: a.SendOffs, sendLens: a.SendLens, recv: a.Dst, recvOffs: a.RecvOffs, recvLens: a.RecvLens}
	if _, ok := inlineAllToAll(p, r, a.Dst, a.SendOffs, a.SendLens, false); ok {
		return true, exchangeInline(ctx, p, p.Size(), r, nil, &b, true)
	}
	if !symmetric(a) {
		return false, nil
	}
	if eagerPieces(p, r, a.SendLens) {
		return true, exchangePieces(ctx, p, &b)
	}
	return true, pairwiseInPlacePieces(ctx, p, a.WS, a.Dst, a.SendOffs, a.SendLens)
}

// symmetric reports whether every peer's block is received where the
// block sent to it lies.
func symmetric(a *Args) bool {
	for i := range a.SendOffs {
		if a.SendOffs[i] != a.RecvOffs[i] || a.SendLens[i] != a.RecvLens[i] {
			return false
		}
	}
	return true
}

// eagerPieces reports whether every piece rank me sends (blocks of lens
// in pieces of pairwiseChunk) is within its connection's eager limit.
func eagerPieces(p Peers, me int, lens []int) bool {
	ep, ok := p.(EagerPeers)
	if !ok {
		return false
	}
	for to, n := range lens {
		if to != me && n > 0 && min(n, pairwiseChunk) > ep.EagerLimit(to) {
			return false
		}
	}
	return true
}

// exchangePieces is the pairwise exchange's pieces (AllToAllPairwise)
// where every piece is eager (eagerPieces), on the caller's goroutine and
// with the same messages: in round c the rank sends piece c of every block
// and then receives piece c of every peer's block. A send of round c waits
// at most for its receiver to take the piece of round c-1, which that
// receiver does in its round c-1 without waiting for anything of round c:
// this cannot deadlock. In place (b.send is b.recv, every peer's block
// received where the block sent to it lies), each send has copied its
// piece into the connection by the time it returns, so a range is
// overwritten only once what it held has left: nothing is copied beyond
// the out-of-place exchange. The own block is the caller's. It runs in
// place only (pairwiseInPlace): out of place, a sender goroutine measured
// no different.
func exchangePieces(ctx context.Context, p Peers, b *rankBlocks) error {
	size, r := p.Size(), p.Rank()
	rounds := 1
	for i := range b.sendLens {
		if i != r {
			rounds = max(rounds, pieces(b.sendLens[i]), pieces(b.recvLens[i]))
		}
	}
	for c := range rounds {
		for s := 1; s < size; s++ {
			to := mod(r+s, size)
			lo, hi, ok := piece(b.sendLens[to], c)
			if !ok {
				continue
			}
			off := b.sendOffs[to]
			if err := p.Send(ctx, to, uint32(c*size+s), b.send[off+lo:off+hi]); err != nil {
				return fmt.Errorf("pairwise all-to-all: rank %d step %d piece %d: send to rank %d: %w", r, s, c, to, err)
			}
		}
		if err := recvRound(ctx, p, size, r, nil, b, c); err != nil {
			return err
		}
	}
	return nil
}

// pairwiseInPlacePieces is the in-place form of the pairwise exchange's
// pieces (AllToAllPairwise) where some piece is above its connection's
// eager limit (else exchangePieces runs in place), on a buffer whose block
// for each peer is also where that peer's block lands (offs, lens). It
// sends the messages of the out-of-place exchange where that lends
// nothing, but stages pieces instead of a copy of the whole input: for
// round c the rank copies piece c of every block it sends into one of two
// staging areas of a piece per peer, a sender goroutine sends them from
// there, and the rank receives piece c of every peer's block into the
// buffer. A range is thus
// overwritten only once what it held is staged. The sender may run a round
// ahead of the receives; a staging area is refilled only once its sends
// have returned. Staging round c waits only for the sends of round c-2,
// which wait only for the peers' receives of round c-2, which come before
// their staging of round c: this cannot deadlock. The own block stays
// where it is.
//
// Bytes copied beyond the out-of-place exchange: the (p-1)/p of the
// buffer that is sent, once, into staging areas of two pieces per peer,
// instead of the whole buffer into a second one.
func pairwiseInPlacePieces(ctx context.Context, p Peers, ws *Workspace, buf []byte, offs, lens []int) error {
	size, r := p.Size(), p.Rank()
	rounds, piece0 := 1, 0
	for i, n := range lens {
		if i != r {
			rounds, piece0 = max(rounds, pieces(n)), max(piece0, min(n, pairwiseChunk))
		}
	}
	area := (size - 1) * piece0
	stage := ws.Get(SlotInput, 2*area)
	// slot returns the staging of the piece for step s in round c.
	slot := func(c, s int) []byte { return stage[c%2*area+(s-1)*piece0:] }
	g := newGroup(ctx)
	defer g.cancel()
	b := rankBlocks{send: buf, sendOffs: offs, sendLens: lens, recv: buf, recvOffs: offs, recvLens: lens}
	staged, sent := make(chan struct{}, 2), make(chan struct{}, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer RecoverTo(g.fail)
		for c := range rounds {
			select {
			case <-staged:
			case <-g.ctx.Done():
				return
			}
			for s := 1; s < size; s++ {
				to := mod(r+s, size)
				lo, hi, ok := piece(lens[to], c)
				if !ok {
					continue
				}
				if err := p.Send(g.ctx, to, uint32(c*size+s), slot(c, s)[:hi-lo]); err != nil {
					g.fail(fmt.Errorf("pairwise all-to-all in place: rank %d step %d piece %d: send to rank %d: %w", r, s, c, to, err))
					return
				}
			}
			sent <- struct{}{}
		}
	}()
recv:
	for c := range rounds {
		if c >= 2 {
			// The sends of round c-2 used this staging area.
			select {
			case <-sent:
			case <-g.ctx.Done():
				break recv
			}
		}
		for s := 1; s < size; s++ {
			to := mod(r+s, size)
			if lo, hi, ok := piece(lens[to], c); ok {
				copy(slot(c, s), buf[offs[to]+lo:offs[to]+hi])
			}
		}
		staged <- struct{}{}
		if err := recvRound(g.ctx, p, size, r, nil, &b, c); err != nil {
			g.fail(err)
			break
		}
	}
	<-done
	return g.err
}

// rankBlocks are the buffers of an all-to-all on one rank and where each
// peer's block lies in them.
type rankBlocks struct {
	send               []byte
	sendOffs, sendLens []int
	recv               []byte
	recvOffs, recvLens []int
	// sink copies the received pieces of blocks that do not stay in the
	// cache (recvPiece); nil until the first.
	sink *delivery
}

// sendBlock returns the block b sends to rank to.
func (b *rankBlocks) sendBlock(to int) []byte {
	return b.send[b.sendOffs[to] : b.sendOffs[to]+b.sendLens[to]]
}

// copyOwn copies rank r's own block; in place, its source and destination
// may overlap.
func (b *rankBlocks) copyOwn(r int, inPlace bool) {
	dst, src := b.recv[b.recvOffs[r]:b.recvOffs[r]+b.recvLens[r]], b.send[b.sendOffs[r]:b.sendOffs[r]+b.sendLens[r]]
	if inPlace {
		copy(dst, src)
	} else {
		memcopy.Deliver(dst, src)
	}
}

// settleLent waits until every peer has taken the blocks lent to it (the
// send blocks of b that lp lends), after an exchange that returned err:
// if it failed, the lent blocks are withdrawn at once. It returns the
// first error.
func settleLent(ctx context.Context, p Peers, lp LendPeers, b *rankBlocks, err error) error {
	size, r := p.Size(), p.Rank()
	settle := ctx
	if err != nil {
		settle = cancelled
	}
	for s := 1; s < size; s++ {
		to := mod(r+s, size)
		if !lentBlock(lp, to, b.sendBlock(to)) {
			continue
		}
		if serr := lp.Settle(settle, to); serr != nil && err == nil {
			err = fmt.Errorf("pairwise all-to-all: rank %d step %d: rank %d taking the block lent to it: %w", r, s, to, serr)
			settle = cancelled
		}
	}
	return err
}

// exchangeInline is the pairwise exchange on the caller's goroutine: every
// send (lent where lp lends a block of its size), the own block, every
// receive. The caller waits for the lent blocks to be taken (settleLent).
func exchangeInline(ctx context.Context, p Peers, size, r int, lp LendPeers, b *rankBlocks, inPlace bool) error {
	sendOffs, sendLens := b.sendOffs, b.sendLens
	for s := 1; s < size; s++ {
		to := mod(r+s, size)
		if sendLens[to] == 0 {
			continue
		}
		blk := b.send[sendOffs[to] : sendOffs[to]+sendLens[to]]
		var err error
		if lentBlock(lp, to, blk) {
			err = lp.Lend(ctx, to, uint32(s), blk)
		} else {
			err = p.Send(ctx, to, uint32(s), blk)
		}
		if err != nil {
			return fmt.Errorf("pairwise all-to-all: rank %d step %d: send to rank %d: %w", r, s, to, err)
		}
	}
	b.copyOwn(r, inPlace)
	return recvBlocks(ctx, p, size, r, lp, b, nil)
}

// lendable reports whether any block of lens but rank me's own is large
// enough to be lent (lendFloor).
func lendable(lens []int, me int) bool {
	for i, n := range lens {
		if i != me && n >= lendFloor {
			return true
		}
	}
	return false
}

// inlineAllToAll reports whether the blocks rank me sends (sendLens) are
// exchanged inline (exchangeInline): when every block is eager (see
// eagerEach) and at most a piece (pairwiseChunk) or, with lend, lent by p
// (LendPeers). lp is p's LendPeers if
// at least one block is lent.
func inlineAllToAll(p Peers, me int, send []byte, sendOffs, sendLens []int, lend bool) (lp LendPeers, ok bool) {
	ep, _ := p.(EagerPeers)
	var l LendPeers
	lends, large := false, false
	for to, n := range sendLens {
		if to == me || n == 0 {
			continue
		}
		if lend && n >= lendFloor {
			// Asked only here: small exchanges pay no type assertion.
			if l == nil {
				if l, lend = p.(LendPeers); !lend {
					l = nil
				}
			}
			if lentBlock(l, to, send[sendOffs[to]:sendOffs[to]+n]) {
				lends = true
				continue
			}
		}
		if ep == nil || n > ep.EagerLimit(to) || n > pairwiseChunk {
			// A block of more than a piece goes in pieces: its
			// receiver, if it exchanges in pieces, expects them.
			return nil, false
		}
		large = large || n > eagerBlock
	}
	if large && !oneCPU(p) {
		return nil, false
	}
	if lends {
		return l, true
	}
	return nil, true
}
