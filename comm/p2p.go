package comm

import (
	"context"
	"slices"
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
// ncclGroupStart / ncclGroupEnd: no send of a group waits for a receive of
// the same group, so a ring exchange or an all-to-all written with Send
// and Recv cannot deadlock. Build it with NewGroup, add operations, then
// Run or Start it. A Group is used once and is not safe for concurrent
// use.
//
// A send of at most its connection's eager limit (transport.Conn) returns
// without its receiver, as long as the connection has room (the peer has
// received earlier messages); a larger one returns once its receiver has
// it, and on shared memory the receiver copies it straight out of the
// sender's buffer (see runP2P). On shared memory a send of 32 KiB (64 KiB
// where the processes outnumber the cores) up to the eager limit is
// offered: a receiver that receives it while the group runs copies it out
// of the sender's buffer too, and otherwise the group's end writes it into
// the connection as a smaller send.
type Group struct {
	c   *Communicator
	err error
	// n operations: the first ones in first, the others in more. A
	// group of up to len(first) operations that Run or Start posts
	// allocates nothing: its operations move into pooled storage
	// (p2pOps), and the Group itself can live on its caller's stack.
	n     int
	first [4]p2pOp
	more  []p2pOp
}

type p2pOp struct {
	send bool
	peer int
	buf  Buffer
}

// p2pOps holds a posted group's operations until it completes (see
// opArgs.putBlocks), with what its flight record entry shows: the bytes of
// all its sends and receives, and the element type they share (oneType),
// if they do.
type p2pOps struct {
	list    []p2pOp
	bytes   int64
	dt      DType
	oneType bool
}

// groupOps recycles the operations of posted groups.
var groupOps = sync.Pool{New: func() any { return new(p2pOps) }}

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
	op := p2pOp{send: send, peer: peer, buf: buf}
	if g.n < len(g.first) {
		g.first[g.n] = op
	} else {
		g.more = append(g.more, op)
	}
	g.n++
	return g
}

// Run starts the group and waits for all of its operations.
func (g *Group) Run(ctx context.Context) error {
	if ran, err := g.runTaken(ctx); ran {
		return err
	}
	return wait(g.post(ctx))
}

// runTaken runs a small group of up to len(first) operations on the
// calling goroutine without a Request, as a small blocking collective
// runs (see takeAlone): every payload at most directMessage and within
// the connections' eager limits, nothing queued or running. It runs what
// the request path runs (groupOp), so that its messages and their order
// are the same. It reports whether it ran the group, which it then
// empties, and the group's error if it did. Without the request path's
// pools (the Request, the operations' storage) a 2-rank exchange of 8
// bytes costs 290-348 ns instead of 363-432 (BenchmarkMachinery
// SendRecv8B).
func (g *Group) runTaken(ctx context.Context) (bool, error) {
	c := g.c
	if g.err != nil || g.n > len(g.first) {
		return false, nil
	}
	ops := p2pOps{list: g.first[:g.n]}
	largest := 0
	for _, op := range ops.list {
		largest = max(largest, len(op.buf.b))
	}
	if !small(largest) || ops.summarize(c.rank) != nil || !c.takeAlone(ctx, largest) {
		return false, nil
	}
	g.n, g.more = 0, nil
	err := c.runTakenP2P(ctx, "Group", &ops, func(ctx context.Context, p *opPeers) error {
		return groupOp(ctx, p, &opArgs{p2p: &ops})
	})
	g.first = [len(g.first)]p2pOp{}
	return true, err
}

// Start queues the group on its communicator and returns its Request.
func (g *Group) Start(ctx context.Context) *Request { return g.c.issue(g.post(ctx)) }

// post checks the group and makes its request, unissued (see
// Communicator.post). The group is empty afterwards.
func (g *Group) post(ctx context.Context) *Request {
	const name = "Group"
	c := g.c
	if g.err != nil {
		return c.failedRequest(name, g.err)
	}
	ops := groupOps.Get().(*p2pOps)
	ops.list = append(append(ops.list[:0], g.first[:min(g.n, len(g.first))]...), g.more...)
	g.n, g.first, g.more = 0, [len(g.first)]p2pOp{}, nil
	if err := ops.summarize(c.rank); err != nil {
		ops.put()
		return c.failedRequest(name, err)
	}
	return c.post(ctx, name, p2pHeader, groupOp, opArgs{p2p: ops})
}

// p2pHeader is the header of a group's frames before its communicator,
// epoch and sequence are set (see Communicator.run).
var p2pHeader = transport.Header{Kind: transport.KindP2P, Op: uint8(algo.OpSendRecv)}

// summarize sets what the flight record shows of the operations in
// o.list (bytes, dt, oneType) on rank, and checks their sends to self
// against their receives from self, which are matched in order.
func (o *p2pOps) summarize(rank int) error {
	sends, recvs := 0, 0
	o.bytes, o.oneType = 0, len(o.list) > 0
	for i, op := range o.list {
		o.bytes += int64(len(op.buf.b))
		if i == 0 {
			o.dt = op.buf.dt
		} else if op.buf.dt != o.dt {
			o.oneType = false
		}
		if op.peer == rank {
			if op.send {
				sends++
			} else {
				recvs++
			}
		}
	}
	if sends != recvs {
		return invalidf("%d sends to self but %d receives from self", sends, recvs)
	}
	return selfPairs(o.list, rank, func(s, r Buffer) error {
		if s.dt != r.dt || len(s.b) != len(r.b) {
			return invalidf("send to self of %d %s does not match receive of %d %s", s.Len(), s.dt, r.Len(), r.dt)
		}
		return nil
	})
}

// put clears the operations and gives them back to groupOps.
func (o *p2pOps) put() {
	clear(o.list)
	o.list = o.list[:0]
	groupOps.Put(o)
}

// selfPairs calls fn on each send to self (rank) of ops and the receive
// from self it is matched with, in order, and returns fn's first error.
// Every send to self must have its receive.
func selfPairs(ops []p2pOp, rank int, fn func(send, recv Buffer) error) error {
	r := 0
	for _, s := range ops {
		if !s.send || s.peer != rank {
			continue
		}
		for ops[r].send || ops[r].peer != rank {
			r++
		}
		if err := fn(s.buf, ops[r].buf); err != nil {
			return err
		}
		r++
	}
	return nil
}

// groupOp runs a group (its operations in a.p2p): the sends to self are
// copied into the receives from self (post checked that they pair up),
// and the remote operations run (runP2P).
func groupOp(ctx context.Context, p *opPeers, a *opArgs) error {
	c, ops := p.c, a.p2p.list
	selfPairs(ops, c.rank, func(s, r Buffer) error {
		copy(r.b, s.b)
		return nil
	})
	return c.runP2P(ctx, p, ops)
}

// runP2P runs the remote operations of a group. Its sends go first, on
// the calling goroutine, as long as each returns at once: a payload above
// its connection's eager limit lent where the connection lends it
// (transport.Lender: the receiver copies it out of this process, one copy
// instead of two through a ring), a smaller one offered where the
// connection offers it (transport.Offerer: lent until the group ends, and
// taken back into the connection if the receiver has not begun to copy
// it by then), any other buffered by the connection (transport.Buffered).
// If they all did, its receives follow there too, in order, where each is
// eager or lent. Otherwise the operations left run on one goroutine per
// peer and direction, each going through its operations in order, so that
// no send waits for a receive of the same group. Last, it waits until its
// lent payloads have been copied and takes back its offers not yet
// claimed.
//
// The calling goroutine cannot deadlock: its sends return without any
// peer, each receive waits only for a peer's send, which a group posts
// first or on a goroutine of its own, and a lent payload is copied by a
// receive that waits for nothing of this group. A payload within the eager
// limit is never lent, so that a send the connection would buffer never
// waits for its receiver: a rank's send may be received in the peer's next
// operation; an offered one keeps that promise, as the group ends without
// waiting for a receiver that has not claimed it (beyond a moment bounded
// by the cost of taking it back, where the processes share the cores). A small exchange (a
// ring's sendrecv, a pipeline stage's send and receive) so costs no
// goroutine: 8 B between 2 processes on shared memory went from 3.7-8 us
// to 0.43 (Open MPI's vader: 0.41). An exchange of 32 KiB to 1 MiB whose
// sends are offered costs one copy per message instead of two when the
// ranks' receives overlap (see offerMinCore).
func (c *Communicator) runP2P(ctx context.Context, p *opPeers, ops []p2pOp) error {
	var to [4]int
	sctx := c.worker.op.schedule(ctx, c.p2pWaits(ops))
	rest, lent, err := c.p2pInline(sctx, p, ops, to[:0])
	if err == nil && len(rest) > 0 {
		err = c.p2pLanes(ctx, p, rest)
	}
	for _, peer := range lent {
		settle := sctx
		if err != nil {
			// Withdrawn at once: the caller may reuse its buffers.
			var cancel context.CancelFunc
			settle, cancel = context.WithCancel(ctx)
			cancel()
		}
		c.hist.wait(int32(peer))
		if serr := c.links.to(peer).(transport.Lender).Settle(settle); serr != nil && err == nil {
			err = &linkError{peer: peer, dir: "send", err: serr}
		}
	}
	return err
}

// p2pWaits returns how the waits of a group on its calling goroutine
// behave (see runP2P): nothing else of the operation needs the processor
// meanwhile; a small group's waits give the core away, as a small
// collective's do, and so do those of a group that lends or offers on
// shared memory while its peers copy, as a lending all-to-all's do.
// Offered sends of more than 256 KiB (shortOpShm) between 4 processes on
// 2 cores waited alone, without giving the core away, and so kept the
// receivers from claiming them: 288 KiB took 384 us, against 57 with the
// copy waits and 121 through the rings.
func (c *Communicator) p2pWaits(ops []p2pOp) waits {
	out, in := 0, 0
	for _, op := range ops {
		switch {
		case op.peer == c.rank:
		case op.send:
			out += len(op.buf.b)
		default:
			in += len(op.buf.b)
		}
	}
	w := opWaits(max(out, in), c.links.shm)
	if w == waitShort || !c.links.shm {
		return w
	}
	for _, op := range ops {
		if op.send && op.peer != c.rank {
			if n := len(op.buf.b); lends(c.links.to(op.peer), n) != nil || c.links.offers(op.peer, n) != nil {
				return waitCopy
			}
		}
	}
	return w
}

// p2pInline runs a group's remote sends while each returns at once (see
// runP2P), and then, if all did, its receives where all are eager or lent.
// It returns the operations it did not run: none, the receives alone, or
// the first send that could wait, every later send and every receive; and
// the peers it lent or offered payloads to, appended to lent.
func (c *Communicator) p2pInline(ctx context.Context, p *opPeers, ops []p2pOp, lent []int) ([]p2pOp, []int, error) {
	eager, sent := true, false
	for i, op := range ops {
		if op.peer == c.rank {
			continue
		}
		conn, n := c.links.to(op.peer), len(op.buf.b)
		if !op.send {
			// Eager, or lent by the peer (whole, copied at once).
			m := p.LentMin(op.peer)
			eager = eager && (n <= conn.EagerLimit() || (m > 0 && n >= m))
			continue
		}
		how, l := sendBuffered, lends(conn, n)
		switch b, ok := conn.(transport.Buffered); {
		case l != nil && l.LendBuffers():
			how = sendLent
		case l == nil && c.links.offers(op.peer, n) != nil:
			how = sendOffered
		case l != nil || !ok || !b.Buffers(n):
			// This send could wait.
			if !sent {
				return ops, lent, nil
			}
			return p2pLeft(ops, i), lent, nil
		}
		if err := c.p2pSend(ctx, p, op.peer, op.buf, how); err != nil {
			return nil, lent, err
		}
		if how != sendBuffered && !slices.Contains(lent, op.peer) {
			lent = append(lent, op.peer)
		}
		sent = true
	}
	if !eager {
		if !sent {
			return ops, lent, nil
		}
		return p2pLeft(ops, len(ops)), lent, nil
	}
	for _, op := range ops {
		if op.peer != c.rank && !op.send {
			if err := c.p2pRecv(ctx, p, op.peer, op.buf); err != nil {
				return nil, lent, err
			}
		}
	}
	return nil, lent, nil
}

// lends returns conn as a transport.Lender if it lends a payload of n
// bytes and a group lends it (n is above conn's eager limit), else nil.
func lends(conn transport.Conn, n int) transport.Lender {
	if n <= conn.EagerLimit() {
		return nil
	}
	if l, ok := conn.(transport.Lender); ok && l.LendMin() > 0 && n >= l.LendMin() {
		return l
	}
	return nil
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
// direction (the last one on the calling goroutine), each going through
// its operations in order.
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
				err = c.p2pSend(ctx, p, l.peer, b, sendBuffered)
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
	// The last lane runs on the calling goroutine, the others on their
	// own.
	for _, l := range order[:len(order)-1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer algo.RecoverTo(fail)
			fail(run(l))
		}()
	}
	func() {
		defer algo.RecoverTo(fail)
		fail(run(order[len(order)-1]))
	}()
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

// p2pSend sends b to peer, lent through l, its connection, if l is not
// nil (see runP2P).
// sendMode is how p2pSend sends a payload on the peer's connection.
type sendMode uint8

const (
	sendBuffered sendMode = iota // Send
	sendLent                     // Lend (transport.Lender)
	sendOffered                  // Offer (transport.Offerer)
)

// p2pSend sends a group's payload b to peer as how says (see runP2P).
func (c *Communicator) p2pSend(ctx context.Context, p *opPeers, peer int, b Buffer, how sendMode) error {
	c.worker.p2pTx[peer]++
	h := c.p2pHeader(p, c.worker.p2pTx[peer], b)
	c.hist.wait(int32(peer))
	conn := c.links.to(peer)
	var err error
	switch how {
	case sendLent:
		err = conn.(transport.Lender).Lend(ctx, h, b.b)
	case sendOffered:
		err = conn.(transport.Offerer).Offer(ctx, h, b.b)
	default:
		err = conn.Send(ctx, h, b.b)
	}
	if err != nil {
		return &linkError{peer: peer, dir: "send", err: err}
	}
	return nil
}

func (c *Communicator) p2pRecv(ctx context.Context, p *opPeers, peer int, b Buffer) error {
	c.worker.p2pRx[peer]++
	c.hist.wait(int32(peer))
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
