package comm

import (
	"context"
	"sync"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/transport"
)

// Point-to-point messages between two ranks are matched in order: the k-th
// message rank a sends to rank b is received by b's k-th receive from a,
// and the two must agree on dtype and element count (a disagreement is
// reported as ErrMismatch on both ranks). As with NCCL, a rank must issue
// its operations towards each peer in an order the peer can follow; use a
// Group to post sends and receives that must progress together.

// Group posts several sends and receives as one operation, like
// ncclGroupStart / ncclGroupEnd: all of them progress concurrently, so a
// ring exchange or an all-to-all written with Send and Recv cannot
// deadlock. Build it with NewGroup, add operations, then Run or Start it.
// A Group is used once and is not safe for concurrent use.
type Group struct {
	c   *Communicator
	ops []p2pOp
	err error
	// first holds the first operations, so that a small group (a
	// sendrecv, a pipeline stage) costs one allocation, the Group's.
	first [4]p2pOp
}

type p2pOp struct {
	send bool
	peer int
	buf  Buffer
}

// NewGroup returns an empty group on c.
func (c *Communicator) NewGroup() *Group {
	g := &Group{c: c}
	g.ops = g.first[:0]
	return g
}

// Send adds sending buf to peer.
func (g *Group) Send(buf Buffer, peer int) *Group { return g.add(true, buf, peer) }

// Recv adds receiving into buf from peer.
func (g *Group) Recv(buf Buffer, peer int) *Group { return g.add(false, buf, peer) }

func (g *Group) add(send bool, buf Buffer, peer int) *Group {
	if g.err == nil {
		if err := buf.validate("buffer"); err != nil {
			g.err = err
		} else if peer < 0 || peer >= g.c.size {
			g.err = invalidf("peer %d out of range [0, %d)", peer, g.c.size)
		}
	}
	g.ops = append(g.ops, p2pOp{send: send, peer: peer, buf: buf})
	return g
}

// Run starts the group and waits for all of its operations.
func (g *Group) Run(ctx context.Context) error { return wait(g.post(ctx)) }

// Start queues the group on its communicator and returns its Request.
func (g *Group) Start(ctx context.Context) *Request { return g.c.issue(g.post(ctx)) }

// post checks the group and makes its request, unissued (see
// Communicator.post).
func (g *Group) post(ctx context.Context) *Request {
	const name = "Group"
	c := g.c
	if g.err != nil {
		return c.failedRequest(name, g.err)
	}
	// Sends to self are matched with receives from self, in order.
	var selfSend, selfRecv []Buffer
	for _, op := range g.ops {
		if op.peer == c.rank {
			if op.send {
				selfSend = append(selfSend, op.buf)
			} else {
				selfRecv = append(selfRecv, op.buf)
			}
		}
	}
	if len(selfSend) != len(selfRecv) {
		return c.failedRequest(name, invalidf("%d sends to self but %d receives from self", len(selfSend), len(selfRecv)))
	}
	for i := range selfSend {
		if selfSend[i].dt != selfRecv[i].dt || len(selfSend[i].b) != len(selfRecv[i].b) {
			return c.failedRequest(name, invalidf("send to self of %d %s does not match receive of %d %s",
				selfSend[i].Len(), selfSend[i].dt, selfRecv[i].Len(), selfRecv[i].dt))
		}
	}
	args := opArgs{p2p: g.ops}
	g.ops = nil
	hdr := transport.Header{Kind: transport.KindP2P, Op: uint8(algo.OpSendRecv)}
	return c.post(ctx, name, hdr, groupOp, args)
}

// groupOp runs a group (its operations in a.p2p): the sends to self are
// copied into the receives from self, pairing them in order (post checked
// that they match), and the remote operations run (runP2P).
func groupOp(ctx context.Context, p *opPeers, a *opArgs) error {
	c, ops, r := p.c, a.p2p, 0
	for _, s := range ops {
		if !s.send || s.peer != c.rank {
			continue
		}
		for r < len(ops) && (ops[r].send || ops[r].peer != c.rank) {
			r++
		}
		if r == len(ops) {
			break // post checked that they pair up
		}
		copy(ops[r].buf.b, s.buf.b)
		r++
	}
	return c.runP2P(ctx, p, ops)
}

// runP2P runs the remote operations of a group. Its sends go first, on
// the calling goroutine, as long as each connection buffers them at once
// (transport.Buffered); if they all did, its receives follow there too,
// in order, where each is eager. Otherwise the operations left run on one
// goroutine per peer and direction, each going through its operations in
// order, so that no send waits for a receive of the same group.
//
// The calling goroutine cannot deadlock: its sends return without any
// peer, and each receive waits only for a peer's send, which a group posts
// first or on a goroutine of its own. A small exchange (a ring's
// sendrecv, a pipeline stage's send and receive) so costs no goroutine:
// 8 B between 2 processes on shared memory went from 6-7 us to the
// time of the messages themselves.
func (c *Communicator) runP2P(ctx context.Context, p *opPeers, ops []p2pOp) error {
	rest, err := c.p2pInline(ctx, p, ops)
	if err != nil || len(rest) == 0 {
		return err
	}
	return c.p2pLanes(ctx, p, rest)
}

// p2pInline runs a group's remote sends while their connections buffer
// them, and then, if all did, its receives where all are eager. It
// returns the operations it did not run: none, the receives alone, or the
// first send that could wait, every later send and every receive.
func (c *Communicator) p2pInline(ctx context.Context, p *opPeers, ops []p2pOp) ([]p2pOp, error) {
	// Nothing else of the operation needs the processor while this
	// goroutine waits; a small group's waits give the core away, as a
	// small collective's do.
	out, in := 0, 0
	for _, op := range ops {
		if op.peer == c.rank {
			continue
		}
		if op.send {
			out += len(op.buf.b)
		} else {
			in += len(op.buf.b)
		}
	}
	sctx := c.worker.op.schedule(ctx, opWaits(max(out, in), c.links.shm))
	eager, sent := true, false
	for i, op := range ops {
		if op.peer == c.rank {
			continue
		}
		conn := c.links.to(op.peer)
		if !op.send {
			eager = eager && len(op.buf.b) <= conn.EagerLimit()
			continue
		}
		if b, ok := conn.(transport.Buffered); !ok || !b.Buffers(len(op.buf.b)) {
			if !sent {
				return ops, nil
			}
			return p2pLeft(ops, i), nil
		}
		if err := c.p2pSend(sctx, p, op.peer, op.buf); err != nil {
			return nil, err
		}
		sent = true
	}
	if !eager {
		if !sent {
			return ops, nil
		}
		return p2pLeft(ops, len(ops)), nil
	}
	for _, op := range ops {
		if op.peer != c.rank && !op.send {
			if err := c.p2pRecv(sctx, p, op.peer, op.buf); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

// p2pLeft returns the operations of ops that p2pInline has not run when
// it stopped at ops[i]: every receive and the sends from i on.
func p2pLeft(ops []p2pOp, i int) []p2pOp {
	var left []p2pOp
	for j, op := range ops {
		if !op.send || j >= i {
			left = append(left, op)
		}
	}
	return left
}

// p2pLanes runs a group's remote operations on one goroutine per peer and
// direction, each going through its operations in order.
func (c *Communicator) p2pLanes(ctx context.Context, p *opPeers, ops []p2pOp) error {
	type lane struct {
		send bool
		peer int
	}
	var order []lane
	lanes := map[lane][]Buffer{}
	for _, op := range ops {
		if op.peer == c.rank {
			continue
		}
		l := lane{op.send, op.peer}
		if _, ok := lanes[l]; !ok {
			order = append(order, l)
		}
		lanes[l] = append(lanes[l], op.buf)
	}
	run := func(l lane) error {
		for _, b := range lanes[l] {
			var err error
			if l.send {
				err = c.p2pSend(ctx, p, l.peer, b)
			} else {
				err = c.p2pRecv(ctx, p, l.peer, b)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if len(order) == 1 {
		return run(order[0])
	}
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	fail := func(err error) {
		if err != nil {
			once.Do(func() { first = err })
		}
	}
	for _, l := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer algo.RecoverTo(fail)
			fail(run(l))
		}()
	}
	wg.Wait()
	return first
}

func (c *Communicator) p2pHeader(p *opPeers, seq uint64, b Buffer) transport.Header {
	h := p.hdr
	h.Seq = seq
	h.DType = uint8(b.dt)
	h.Count = uint64(b.Len())
	return h
}

func (c *Communicator) p2pSend(ctx context.Context, p *opPeers, peer int, b Buffer) error {
	c.worker.p2pTx[peer]++
	if err := c.links.to(peer).Send(ctx, c.p2pHeader(p, c.worker.p2pTx[peer], b), b.b); err != nil {
		return &linkError{peer: peer, dir: "send", err: err}
	}
	return nil
}

func (c *Communicator) p2pRecv(ctx context.Context, p *opPeers, peer int, b Buffer) error {
	c.worker.p2pRx[peer]++
	if err := c.links.to(peer).Recv(ctx, c.p2pHeader(p, c.worker.p2pRx[peer], b), b.b); err != nil {
		return &linkError{peer: peer, dir: "recv", err: err}
	}
	return nil
}

// Send sends buf to peer. It is matched by peer's next Recv from this
// rank.
func (c *Communicator) Send(ctx context.Context, buf Buffer, peer int) error {
	return c.NewGroup().Send(buf, peer).Run(ctx)
}

// SendAsync is the non-blocking form of Send.
func (c *Communicator) SendAsync(ctx context.Context, buf Buffer, peer int) *Request {
	return c.NewGroup().Send(buf, peer).Start(ctx)
}

// Recv receives peer's next message to this rank into buf, which must have
// exactly the message's length and type.
func (c *Communicator) Recv(ctx context.Context, buf Buffer, peer int) error {
	return c.NewGroup().Recv(buf, peer).Run(ctx)
}

// RecvAsync is the non-blocking form of Recv.
func (c *Communicator) RecvAsync(ctx context.Context, buf Buffer, peer int) *Request {
	return c.NewGroup().Recv(buf, peer).Start(ctx)
}
