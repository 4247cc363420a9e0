package comm

import (
	"context"
	"fmt"

	"github.com/occl/occl/algo"
)

// directMessage is the largest message of a direct exchange (see
// directAllReduce): up to it an operation's time is the layers it goes
// through, not its bytes. It stays below the smallest block the pairwise
// all-to-all lends (4 KiB), so that a direct all-to-all sends every block
// as that schedule does.
const directMessage = 2 << 10

// directAllReduce runs a small AllReduce (at most directMessage bytes) on
// a power-of-two number of ranks, where the choice is recursive doubling,
// against the connections themselves: the messages of algo.AllReduceRD
// (step 1+i with rank r^2^i, the lower rank's partial on the left of
// every reduction), without the schedule table's dispatch and the Peers
// adapters around every message, which cost a 2-rank AllReduce of 8 bytes
// on shared memory about a sixth of its time. Ranks that run it and ranks
// that run the schedule (one that records a timeline, say) meet,
// since both send the same messages in the same order. It reports whether
// it ran the operation, and the operation's error if it did.
func (c *Communicator) directAllReduce(ctx context.Context, p *opPeers, send, recv Buffer, op Op) (bool, error) {
	data, n, size := recv.b, len(recv.b), c.size
	if !c.direct(n) || size&(size-1) != 0 {
		return false, nil
	}
	l := c.lay()
	alg := c.worker.choice.get(l, algo.OpAllReduce, n, c.choose)
	if alg != algo.AlgoRD {
		return false, nil
	}
	sctx := c.worker.op.schedule(ctx, opWaits(n, c.links.shm))
	if !same(send.b, data) {
		copy(data, send.b)
	}
	stage := c.worker.ws.Get(algo.SlotStage, n)
	dt, comb := send.dt, op.Combiner()
	for i, d := 0, 1; d < size; i, d = i+1, d<<1 {
		peer, step := c.rank^d, uint32(1+i)
		if err := c.directSend(sctx, p, peer, step, data); err != nil {
			return true, fmt.Errorf("rd allreduce: rank %d step %d with rank %d: %w", c.rank, i, peer, err)
		}
		if i == 0 {
			// Recorded while the peer's message is on its way.
			c.chose(ctx, l, algo.OpAllReduce, alg, n, nil)
		}
		if err := c.directRecv(sctx, p, peer, step, stage); err != nil {
			return true, fmt.Errorf("rd allreduce: rank %d step %d with rank %d: %w", c.rank, i, peer, err)
		}
		if c.rank&d == 0 {
			algo.Reduce3(data, data, stage, dt, comb)
		} else {
			algo.Reduce3(data, stage, data, dt, comb)
		}
	}
	algo.Finalize(data, dt, op, size)
	return true, nil
}

// directAllToAll runs a small all-to-all (every block at most
// directMessage and eager, both ways) where no route applies, against the
// connections themselves: the messages of the pairwise exchange as it runs
// blocks that fit the connections' buffers (algo's exchangeInline: step s
// to rank r+s for every s, then step s from rank r-s, empty blocks skipped
// on both sides), without the schedule table's layers. Block j of send
// lies at soffs[j] and is slens[j] bytes, and likewise in recv; uniform is
// the block size of an AllToAll, -1 for an AllToAllV. It reports whether
// it ran the operation, and the operation's error if it did.
func (c *Communicator) directAllToAll(ctx context.Context, p *opPeers, send []byte, soffs, slens []int, recv []byte, roffs, rlens []int, uniform int) (bool, error) {
	size, r := c.size, c.rank
	if !c.direct(largestBlock(uniform, slens, rlens)) || c.routable() {
		return false, nil
	}
	op := algo.OpAllToAll
	if uniform < 0 {
		op = algo.OpAllToAllV
	}
	sctx := c.worker.op.schedule(ctx, allToAllWaits(len(send), c.links.shm, false, uniform, slens, rlens))
	for s := 1; s < size; s++ {
		to := wrap(r+s, size)
		if slens[to] == 0 {
			continue
		}
		if err := c.directSend(sctx, p, to, uint32(s), send[soffs[to]:soffs[to]+slens[to]]); err != nil {
			return true, fmt.Errorf("pairwise all-to-all: rank %d step %d: %w", r, s, err)
		}
	}
	// Recorded while the peers' blocks are on their way.
	c.chose(ctx, c.lay(), op, algo.AlgoPairwise, len(send), nil)
	own := recv[roffs[r] : roffs[r]+rlens[r]]
	if !same(send, recv) {
		copy(own, send[soffs[r]:soffs[r]+slens[r]])
	} else if soffs[r] != roffs[r] {
		copy(own, recv[soffs[r]:soffs[r]+slens[r]]) // every block has left
	}
	for s := 1; s < size; s++ {
		from := wrap(r-s, size)
		if rlens[from] == 0 {
			continue
		}
		if err := c.directRecv(sctx, p, from, uint32(s), recv[roffs[from]:roffs[from]+rlens[from]]); err != nil {
			return true, fmt.Errorf("pairwise all-to-all: rank %d step %d: %w", r, s, err)
		}
	}
	return true, nil
}

// directRing reports whether a collective op of n bytes whose blocks are
// nb bytes may run the ring's direct form: blocks of at most
// directMessage, each one chunk, a ring in rank order (not the fabric's)
// and the ring chosen. If so it records the choice and returns the
// context the exchange runs under.
func (c *Communicator) directRing(ctx context.Context, op algo.Collective, n, nb int) (context.Context, bool) {
	if c.size < 2 || !c.direct(nb) || (c.cfg.chunk > 0 && nb > c.cfg.chunk) {
		return ctx, false
	}
	l := c.lay()
	if l.topo != nil && len(l.topo.Ring) == c.size {
		return ctx, false // the ring follows the fabric, not the ranks
	}
	if c.worker.choice.get(l, op, n, c.choose) != algo.AlgoRing {
		return ctx, false
	}
	c.chose(ctx, l, op, algo.AlgoRing, n, nil)
	return c.worker.op.schedule(ctx, opWaits(n, c.links.shm)), true
}

// directAllGather runs a small AllGather (see directRing) against the
// connections themselves: the messages of algo.AllGatherRing with every
// block one chunk (step s sends block r-s to rank r+1, then receives
// block r-s-1 from rank r-1, both labelled s), without the schedule
// table's dispatch, its block layout and the Peers adapters. It reports
// whether it ran the operation, and the operation's error if it did.
func (c *Communicator) directAllGather(ctx context.Context, p *opPeers, send, recv []byte) (bool, error) {
	size, r, nb := c.size, c.rank, len(send)
	ctx, ok := c.directRing(ctx, algo.OpAllGather, len(recv), nb)
	if !ok {
		return false, nil
	}
	if own := recv[r*nb : (r+1)*nb]; !same(send, own) {
		copy(own, send)
	}
	next, prev := wrap(r+1, size), wrap(r-1, size)
	for s := 0; s < size-1; s++ {
		sb, rb := wrap(r-s, size), wrap(r-s-1, size)
		if err := c.directSendRecv(ctx, p, next, prev, uint32(s), recv[sb*nb:(sb+1)*nb], recv[rb*nb:(rb+1)*nb]); err != nil {
			return true, fmt.Errorf("ring allgather: rank %d step %d: %w", r, s, err)
		}
	}
	return true, nil
}

// directReduceScatter runs a small ReduceScatter (see directRing) against
// the connections themselves: the messages of algo.ReduceScatterRing with
// every segment one chunk (step s sends the partial of segment r-s-1 to
// rank r+1, the input's own at step 0, then receives the partial of
// segment r-s-2 from rank r-1 and combines it with this rank's input
// there, this rank's operand on the left), without the schedule table's
// layers. The partials live in the workspace; the input is only read. It
// reports whether it ran the operation, and the operation's error if it
// did.
func (c *Communicator) directReduceScatter(ctx context.Context, p *opPeers, send, recv Buffer, op Op) (bool, error) {
	size, r, nb := c.size, c.rank, len(recv.b)
	src := send.b
	ctx, ok := c.directRing(ctx, algo.OpReduceScatter, len(src), nb)
	if !ok {
		return false, nil
	}
	dt, comb := send.dt, op.Combiner()
	stage, acc := c.worker.ws.Get(algo.SlotStage, nb), c.worker.ws.Get(algo.SlotInput, nb)
	next, prev := wrap(r+1, size), wrap(r-1, size)
	for s := 0; s < size-1; s++ {
		sb, rb := wrap(r-s-1, size), wrap(r-s-2, size)
		out := acc
		if s == 0 {
			out = src[sb*nb : (sb+1)*nb]
		}
		if err := c.directSendRecv(ctx, p, next, prev, uint32(s), out, stage); err != nil {
			return true, fmt.Errorf("ring reduce-scatter: rank %d step %d: %w", r, s, err)
		}
		algo.Reduce3(acc, src[rb*nb:(rb+1)*nb], stage, dt, comb)
	}
	copy(recv.b, acc)
	algo.Finalize(recv.b, dt, op, size)
	return true, nil
}

// directBroadcast runs a small Broadcast (at most directMessage bytes, one
// chunk) against the connections themselves: the messages of
// algo.BroadcastTree with the buffer one chunk (a rank receives it from
// its parent, then sends it to its children, largest subtree first, every
// message labelled 0: algo.TreeParent, algo.TreeChildren), without the
// schedule table's dispatch and the Peers adapters. The root sends from
// its send buffer and copies it into its own recv buffer while the first
// message is on its way. It reports whether it ran the operation, and the
// operation's error if it did.
func (c *Communicator) directBroadcast(ctx context.Context, p *opPeers, send, data []byte, root int) (bool, error) {
	n, size := len(data), c.size
	if size < 2 || !c.direct(n) || (c.cfg.chunk > 0 && n > c.cfg.chunk) {
		return false, nil
	}
	l := c.lay()
	if c.worker.choice.get(l, algo.OpBroadcast, n, c.choose) != algo.AlgoTree {
		return false, nil
	}
	sctx := c.worker.op.schedule(ctx, opWaits(n, c.links.shm))
	out := data
	if parent := algo.TreeParent(c.rank, root, size); parent < 0 {
		out = send
	} else {
		// Recorded while the parent's message is on its way.
		c.chose(ctx, l, algo.OpBroadcast, algo.AlgoTree, n, nil)
		if err := c.directRecv(sctx, p, parent, 0, data); err != nil {
			return true, fmt.Errorf("tree broadcast: rank %d: recv chunk 0 from rank %d: %w", c.rank, parent, err)
		}
	}
	var buf [64]int
	for _, child := range algo.TreeChildren(c.rank, root, size, buf[:0]) {
		if err := c.directSend(sctx, p, child, 0, out); err != nil {
			return true, fmt.Errorf("tree broadcast: rank %d: send chunk 0 to rank %d: %w", c.rank, child, err)
		}
	}
	if c.rank == root {
		c.chose(ctx, l, algo.OpBroadcast, algo.AlgoTree, n, nil)
		if !same(out, data) {
			copy(data, out)
		}
	}
	return true, nil
}

// directBarrier runs a Barrier against the connections themselves: the
// messages of algo.BarrierDissemination (round k sends an empty message
// labelled k to rank r+2^k, then receives one from rank r-2^k), without
// the schedule table's dispatch and the Peers adapters. An empty message
// fits any connection's buffer, so no send waits for its peer. The caller
// has checked direct(barrierProbe).
func (c *Communicator) directBarrier(ctx context.Context, p *opPeers) error {
	size, r := c.size, c.rank
	ctx = c.worker.op.schedule(ctx, opWaits(0, c.links.shm))
	for k, d := uint32(0), 1; d < size; k, d = k+1, d<<1 {
		if err := c.directSendRecv(ctx, p, wrap(r+d, size), wrap(r-d, size), k, nil, nil); err != nil {
			return fmt.Errorf("dissemination barrier: rank %d round %d: %w", r, k, err)
		}
	}
	return nil
}

// direct reports whether messages of n bytes may go directly (see
// directAllReduce): n is at most directMessage and goes to any peer
// without waiting for it, and no timeline is recorded (the timeline
// records every message as the schedules send it, through opPeers).
func (c *Communicator) direct(n int) bool {
	return small(n) && n <= c.links.eager && c.obs.tr == nil
}

// small reports whether a message of n bytes is of a direct exchange's
// size: the part of direct that reads nothing a rewire replaces, which a
// caller not holding exec may ask (see takeAlone).
func small(n int) bool { return n > 0 && n <= directMessage }

// directSendRecv sends out to rank to and then receives in from rank from,
// both as message step of the running operation, for a direct exchange:
// out fits the connection's buffer, so the send does not wait for the peer.
func (c *Communicator) directSendRecv(ctx context.Context, p *opPeers, to, from int, step uint32, out, in []byte) error {
	if err := c.directSend(ctx, p, to, step, out); err != nil {
		return err
	}
	return c.directRecv(ctx, p, from, step, in)
}

// directSend sends out to rank to as message step of the running
// operation, for a direct exchange (see directSendRecv).
func (c *Communicator) directSend(ctx context.Context, p *opPeers, to int, step uint32, out []byte) error {
	p.step(step)
	c.hist.wait(int32(to))
	if err := c.links.to(to).Send(ctx, p.hdr, out); err != nil {
		return &linkError{peer: to, dir: "send", step: step, err: err}
	}
	return nil
}

// directRecv receives message step of the running operation from rank
// from into in, for a direct exchange (see directSendRecv).
func (c *Communicator) directRecv(ctx context.Context, p *opPeers, from int, step uint32, in []byte) error {
	p.step(step)
	c.hist.wait(int32(from))
	if err := c.links.to(from).Recv(ctx, p.hdr, in); err != nil {
		return &linkError{peer: from, dir: "recv", step: step, err: err}
	}
	return nil
}

// wrap returns x modulo size for x in [-size, 2*size): a rank a few steps
// around the ring, found without a division (tens of cycles, on every
// step of a small operation).
func wrap(x, size int) int {
	switch {
	case x >= size:
		return x - size
	case x < 0:
		return x + size
	}
	return x
}
