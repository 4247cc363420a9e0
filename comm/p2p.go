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
}

type p2pOp struct {
	send bool
	peer int
	buf  Buffer
}

// NewGroup returns an empty group on c.
func (c *Communicator) NewGroup() *Group { return &Group{c: c} }

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
	ops := g.ops
	g.ops = nil
	hdr := transport.Header{Kind: transport.KindP2P, Op: uint8(algo.OpSendRecv)}
	return c.post(ctx, name, hdr, callOp, opArgs{call: func(ctx context.Context, p *opPeers) error {
		for i := range selfSend {
			copy(selfRecv[i].b, selfSend[i].b)
		}
		return c.runP2P(ctx, p, ops)
	}})
}

// runP2P runs the remote operations of a group: one goroutine per peer and
// direction, each going through its operations in order.
func (c *Communicator) runP2P(ctx context.Context, p *opPeers, ops []p2pOp) error {
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
