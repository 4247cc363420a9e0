package comm

import (
	"context"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/transport"
)

// Buffers passed to an operation belong to it until it completes: for the
// blocking forms until they return, for Async forms until the Request is
// done. After a failed operation the contents of its output buffers are
// unspecified.
//
// In-place operation is selected by passing the same memory as input and
// output (for AllGather, the input is the rank's block of the output; for
// ReduceScatter, the output is the rank's block of the input). In-place
// ReduceScatter uses the rest of the input as scratch.

// collHeader returns the frame header template of collective op: Kind,
// Op, DType, RedOp, Root and Count; the worker fills in communicator,
// epoch and sequence.
func collHeader(op algo.Collective, dt DType, red Op, root, count int) transport.Header {
	var h transport.Header
	setCollHeader(&h, op, dt, red, root, count)
	return h
}

// setCollHeader writes into h, field by field, the fields of the header of
// collective op that collHeader sets (see postColl for why in place).
func setCollHeader(h *transport.Header, op algo.Collective, dt DType, red Op, root, count int) {
	h.Kind, h.Op, h.DType, h.RedOp, h.Root, h.Count = transport.KindCollective, uint8(op), uint8(dt), uint8(red), uint32(root), uint64(count)
}

func (c *Communicator) checkRoot(root int) error {
	if root < 0 || root >= c.size {
		return invalidf("root %d out of range [0, %d)", root, c.size)
	}
	return nil
}

func checkOp(op Op) error {
	if !op.Valid() {
		return invalidf("unknown reduction %d", uint8(op))
	}
	return nil
}

func checkPair(send, recv Buffer) error {
	if err := send.validate("send buffer"); err != nil {
		return err
	}
	if err := recv.validate("recv buffer"); err != nil {
		return err
	}
	if send.dt != recv.dt {
		return invalidf("send buffer is %s but recv buffer is %s", send.dt, recv.dt)
	}
	return nil
}

// wait issues r, made by post for a blocking call, and blocks until it
// completes. It needs no context of its own: a request whose context ends
// while it is queued is withdrawn here at once, and a running one is
// bounded by its context, so this returns at the deadline wherever the
// request is. It does not return before the request completes, since the
// request's buffers are in use until then.
func wait(r *Request) error {
	if r.finished.Load() {
		// Rejected before it was issued (failedRequest).
		return r.err
	}
	c := r.c
	if c.runAlone(r) {
		err := r.err
		r.free()
		return err
	}
	c.enqueue(r)
	c.help(r)
	if !r.finished.Load() {
		done := r.Done()
		select {
		case <-done:
		case <-r.ctxDone():
			// Withdrawn if still queued; a running operation honours
			// its context itself.
			c.queue.withdraw(r)
			<-done
		}
	}
	err := r.err
	r.recycle()
	return err
}

// AllReduce reduces send across all ranks with op and leaves the result in
// recv on every rank. send and recv have the same length and type.
func (c *Communicator) AllReduce(ctx context.Context, send, recv Buffer, op Op) error {
	if small(len(recv.b)) && checkAllReduce(send, recv, op) == nil && c.takeAlone(ctx, len(recv.b)) {
		return c.runTaken(ctx, "AllReduce", algo.OpAllReduce, send.dt, op, 0, send.Len(), func(ctx context.Context, p *opPeers) error {
			return p.c.allReduce(ctx, p, send, recv, op)
		})
	}
	return wait(c.postAllReduce(ctx, send, recv, op))
}

// AllReduceAsync is the non-blocking form of AllReduce.
func (c *Communicator) AllReduceAsync(ctx context.Context, send, recv Buffer, op Op) *Request {
	return c.issue(c.postAllReduce(ctx, send, recv, op))
}

// checkAllReduce checks AllReduce's arguments.
func checkAllReduce(send, recv Buffer, op Op) error {
	err := checkPair(send, recv)
	if err == nil {
		err = checkOp(op)
	}
	if err == nil && len(send.b) != len(recv.b) {
		err = invalidf("send has %d elements, recv %d", send.Len(), recv.Len())
	}
	if err == nil && !same(send.b, recv.b) && overlap(send.b, recv.b) {
		err = invalidf("send and recv buffers overlap")
	}
	return err
}

// postAllReduce checks AllReduce's arguments and makes its request, unissued (see post).
func (c *Communicator) postAllReduce(ctx context.Context, send, recv Buffer, op Op) *Request {
	const name = "AllReduce"
	if err := checkAllReduce(send, recv, op); err != nil {
		return c.failedRequest(name, err)
	}
	r := c.postColl(ctx, name, algo.OpAllReduce, send.dt, op, 0, send.Len(), allReduceOp)
	r.args.send, r.args.recv, r.args.op = send, recv, op
	return r
}

func allReduceOp(ctx context.Context, p *opPeers, a *opArgs) error {
	return p.c.allReduce(ctx, p, a.send, a.recv, a.op)
}

// allReduce runs an AllReduce of send into recv with op: directly where it
// can (directAllReduce), else by the chosen schedule.
func (c *Communicator) allReduce(ctx context.Context, p *opPeers, send, recv Buffer, op Op) error {
	if ok, err := c.directAllReduce(ctx, p, send, recv, op); ok {
		return err
	}
	dt := send.dt
	err := c.runSchedule(ctx, algo.OpAllReduce, len(recv.b), algo.Args{Peers: p, Src: send.b, Dst: recv.b, DType: dt, Op: op.Combiner()})
	if err != nil {
		return err
	}
	algo.Finalize(recv.b, dt, op, c.size)
	return nil
}

// runSchedule runs collective op on bytes bytes with the schedule
// Algorithm chooses, completing args with what every schedule takes from the
// communicator. With nothing to exchange (one rank, an empty buffer) it
// chooses nothing: the schedules then only copy.
func (c *Communicator) runSchedule(ctx context.Context, op algo.Collective, bytes int, args algo.Args) error {
	l := c.lay()
	args.WS, args.Chunk, args.Hosts, args.Crowded = &c.worker.ws, c.cfg.chunk, l.hostGroups, c.cfg.oversubscribed
	if l.topo != nil {
		args.Ring = l.topo.Ring
	}
	a := algo.AlgoAuto
	if c.size > 1 && bytes > 0 {
		a = c.worker.choice.get(l, op, bytes, c.choose)
		c.chose(ctx, l, op, a, bytes, nil)
	}
	return c.worker.run(c.worker.op.schedule(ctx, c.scheduleWaits(op, bytes)), op, a, &args)
}

// scheduleWaits returns how the waits of the schedule of collective op on
// bytes bytes behave: as opWaits says, but for a Broadcast whose chunks are
// lent (see lentChunk) and that is above shortOpShm, as those of a lent
// all-to-all (waitCopy): such a broadcast runs on its calling goroutine
// alone, and a rank waits for its parent's copies of every chunk down the
// tree, which a wait that sleeps and must be woken delays. Measured on 2
// cores, 4 processes, chunks of 512 KiB, 4 rotating rounds, medians with
// the waits of an all-to-all of such blocks (which give the core away and
// then sleep) / copy waits / Open MPI's vader: 1 MiB 285 / 262 / 255 us,
// 4 MiB 1235 / 946 / 1355, 16 MiB 6.26 / 5.18 / 4.10 ms, 64 MiB 31.7 /
// 29.7 / 32.3 ms; 512 KiB even. An AllGather's ring, lent or not, waits as
// opWaits says: with the all-to-all's waits it was slower at 4 processes
// on 2 cores (4 MiB 1155 against 1075 us, 16 MiB 5.9 against 4.5 ms, 5
// rotating rounds) and no faster at 2.
func (c *Communicator) scheduleWaits(op algo.Collective, bytes int) waits {
	if op == algo.OpBroadcast && bytes > shortOpShm && c.lentChunk(bytes) > 0 {
		return waitCopy
	}
	return opWaits(bytes, c.links.shm)
}

// lentChunk returns the size of the chunks of a Broadcast of bytes bytes
// if the tree lends them to every child (see algo.BroadcastTree): every
// connection is shared memory and lends chunks of that size, which do not
// fit its eager limit or are large enough to be lent even so
// (algo.LendFirst), and the root has several children or the ranks are
// crowded, where the broadcast is more than one chunk. It returns 0
// otherwise.
func (c *Communicator) lentChunk(bytes int) int {
	l := &c.links
	if !l.shm || l.lendMin == 0 || (c.size <= 2 && !c.cfg.oversubscribed) {
		return 0
	}
	chunk := bytes
	if c.cfg.chunk > 0 {
		chunk = min(chunk, c.cfg.chunk)
	}
	if chunk < l.lendMin || (chunk <= l.eager && chunk < algo.LendFirst*l.lendMin) || (c.cfg.oversubscribed && chunk == bytes) {
		return 0
	}
	return chunk
}

// Broadcast copies root's send buffer into recv on every rank. recv has the
// same length on every rank; send is read on the root only (other ranks may
// pass an empty Buffer). Pass the same buffer as send and recv on the root
// for in-place operation.
func (c *Communicator) Broadcast(ctx context.Context, send, recv Buffer, root int) error {
	if small(len(recv.b)) && c.checkBroadcast(send, recv, root) == nil && c.takeAlone(ctx, len(recv.b)) {
		return c.runTaken(ctx, "Broadcast", algo.OpBroadcast, recv.dt, 0, root, recv.Len(), func(ctx context.Context, p *opPeers) error {
			return p.c.broadcast(ctx, p, send, recv, root)
		})
	}
	return wait(c.postBroadcast(ctx, send, recv, root))
}

// BroadcastAsync is the non-blocking form of Broadcast.
func (c *Communicator) BroadcastAsync(ctx context.Context, send, recv Buffer, root int) *Request {
	return c.issue(c.postBroadcast(ctx, send, recv, root))
}

// checkBroadcast checks Broadcast's arguments.
func (c *Communicator) checkBroadcast(send, recv Buffer, root int) error {
	err := c.checkRoot(root)
	if err == nil {
		err = recv.validate("recv buffer")
	}
	if err == nil && c.rank == root {
		err = checkPair(send, recv)
		if err == nil && len(send.b) != len(recv.b) {
			err = invalidf("root's send has %d elements, recv %d", send.Len(), recv.Len())
		}
		if err == nil && !same(send.b, recv.b) && overlap(send.b, recv.b) {
			err = invalidf("send and recv buffers overlap")
		}
	}
	return err
}

// postBroadcast checks Broadcast's arguments and makes its request, unissued (see post).
func (c *Communicator) postBroadcast(ctx context.Context, send, recv Buffer, root int) *Request {
	const name = "Broadcast"
	if err := c.checkBroadcast(send, recv, root); err != nil {
		return c.failedRequest(name, err)
	}
	r := c.postColl(ctx, name, algo.OpBroadcast, recv.dt, 0, root, recv.Len(), broadcastOp)
	r.args.send, r.args.recv, r.args.root = send, recv, root
	return r
}

func broadcastOp(ctx context.Context, p *opPeers, a *opArgs) error {
	return p.c.broadcast(ctx, p, a.send, a.recv, a.root)
}

// broadcast runs a Broadcast of root's send into recv: directly where it
// can (directBroadcast), else by the chosen schedule.
func (c *Communicator) broadcast(ctx context.Context, p *opPeers, send, recv Buffer, root int) error {
	if ok, err := c.directBroadcast(ctx, p, send.b, recv.b, root); ok {
		return err
	}
	return c.runSchedule(ctx, algo.OpBroadcast, len(recv.b), algo.Args{Peers: p, Src: send.b, Dst: recv.b, Root: root})
}

// Reduce reduces send across all ranks with op into recv on root. recv is
// used on the root only (other ranks may pass an empty Buffer).
func (c *Communicator) Reduce(ctx context.Context, send, recv Buffer, op Op, root int) error {
	return wait(c.postReduce(ctx, send, recv, op, root))
}

// ReduceAsync is the non-blocking form of Reduce.
func (c *Communicator) ReduceAsync(ctx context.Context, send, recv Buffer, op Op, root int) *Request {
	return c.issue(c.postReduce(ctx, send, recv, op, root))
}

// postReduce checks Reduce's arguments and makes its request, unissued (see post).
func (c *Communicator) postReduce(ctx context.Context, send, recv Buffer, op Op, root int) *Request {
	const name = "Reduce"
	err := c.checkRoot(root)
	if err == nil {
		err = checkOp(op)
	}
	if err == nil {
		err = send.validate("send buffer")
	}
	isRoot := c.rank == root
	if err == nil && isRoot {
		err = checkPair(send, recv)
		if err == nil && len(send.b) != len(recv.b) {
			err = invalidf("send has %d elements, root's recv %d", send.Len(), recv.Len())
		}
		if err == nil && !same(send.b, recv.b) && overlap(send.b, recv.b) {
			err = invalidf("send and recv buffers overlap")
		}
	}
	if err != nil {
		return c.failedRequest(name, err)
	}
	r := c.postColl(ctx, name, algo.OpReduce, send.dt, op, root, send.Len(), reduceOp)
	r.args.send, r.args.recv, r.args.op, r.args.root = send, recv, op, root
	return r
}

func reduceOp(ctx context.Context, p *opPeers, a *opArgs) error {
	dt := a.send.dt
	err := p.c.runSchedule(ctx, algo.OpReduce, len(a.send.b), algo.Args{Peers: p, Src: a.send.b, Dst: a.recv.b, DType: dt, Op: a.op.Combiner(), Root: a.root})
	if err != nil {
		return err
	}
	if p.c.rank == a.root {
		algo.Finalize(a.recv.b, dt, a.op, p.c.size)
	}
	return nil
}

// AllGather gathers every rank's send buffer into recv on every rank, in
// rank order. recv holds Size() times the elements of send. In-place: send
// is rank's block of recv.
func (c *Communicator) AllGather(ctx context.Context, send, recv Buffer) error {
	if small(len(recv.b)) && c.checkAllGather(send, recv) == nil && c.takeAlone(ctx, len(recv.b)) {
		return c.runTaken(ctx, "AllGather", algo.OpAllGather, send.dt, 0, 0, send.Len(), func(ctx context.Context, p *opPeers) error {
			return p.c.allGather(ctx, p, send.b, recv.b)
		})
	}
	return wait(c.postAllGather(ctx, send, recv))
}

// AllGatherAsync is the non-blocking form of AllGather.
func (c *Communicator) AllGatherAsync(ctx context.Context, send, recv Buffer) *Request {
	return c.issue(c.postAllGather(ctx, send, recv))
}

// checkAllGather checks AllGather's arguments.
func (c *Communicator) checkAllGather(send, recv Buffer) error {
	err := checkPair(send, recv)
	nb := len(send.b)
	if err == nil && len(recv.b) != nb*c.size {
		err = invalidf("recv has %d elements, want %d x %d", recv.Len(), c.size, send.Len())
	}
	if err == nil {
		mine := recv.b[c.rank*nb : (c.rank+1)*nb]
		if !same(send.b, mine) && overlap(send.b, recv.b) {
			err = invalidf("send overlaps recv other than as this rank's block")
		}
	}
	return err
}

// postAllGather checks AllGather's arguments and makes its request, unissued (see post).
func (c *Communicator) postAllGather(ctx context.Context, send, recv Buffer) *Request {
	const name = "AllGather"
	if err := c.checkAllGather(send, recv); err != nil {
		return c.failedRequest(name, err)
	}
	r := c.postColl(ctx, name, algo.OpAllGather, send.dt, 0, 0, send.Len(), allGatherOp)
	r.args.send, r.args.recv = send, recv
	return r
}

func allGatherOp(ctx context.Context, p *opPeers, a *opArgs) error {
	return p.c.allGather(ctx, p, a.send.b, a.recv.b)
}

// allGather runs an AllGather of send into recv: directly where it can
// (directAllGather), else by the chosen schedule.
func (c *Communicator) allGather(ctx context.Context, p *opPeers, send, recv []byte) error {
	if ok, err := c.directAllGather(ctx, p, send, recv); ok {
		return err
	}
	return c.runSchedule(ctx, algo.OpAllGather, len(recv), algo.Args{Peers: p, Src: send, Dst: recv, Block: len(send)})
}

// ReduceScatter reduces send across ranks with op and leaves block Rank()
// of the result in recv. send holds Size() times the elements of recv.
// In-place: recv is rank's block of send (the rest of send is overwritten).
func (c *Communicator) ReduceScatter(ctx context.Context, send, recv Buffer, op Op) error {
	if small(len(send.b)) && c.checkReduceScatter(send, recv, op) == nil && c.takeAlone(ctx, len(send.b)) {
		return c.runTaken(ctx, "ReduceScatter", algo.OpReduceScatter, recv.dt, op, 0, recv.Len(), func(ctx context.Context, p *opPeers) error {
			return p.c.reduceScatter(ctx, p, send, recv, op)
		})
	}
	return wait(c.postReduceScatter(ctx, send, recv, op))
}

// ReduceScatterAsync is the non-blocking form of ReduceScatter.
func (c *Communicator) ReduceScatterAsync(ctx context.Context, send, recv Buffer, op Op) *Request {
	return c.issue(c.postReduceScatter(ctx, send, recv, op))
}

// checkReduceScatter checks ReduceScatter's arguments.
func (c *Communicator) checkReduceScatter(send, recv Buffer, op Op) error {
	err := checkPair(send, recv)
	if err == nil {
		err = checkOp(op)
	}
	nb := len(recv.b)
	if err == nil && len(send.b) != nb*c.size {
		err = invalidf("send has %d elements, want %d x %d", send.Len(), c.size, recv.Len())
	}
	if err == nil {
		inPlace := same(recv.b, send.b[c.rank*nb:(c.rank+1)*nb]) && nb > 0
		if !inPlace && overlap(send.b, recv.b) {
			err = invalidf("recv overlaps send other than as this rank's block")
		}
	}
	return err
}

// postReduceScatter checks ReduceScatter's arguments and makes its request, unissued (see post).
func (c *Communicator) postReduceScatter(ctx context.Context, send, recv Buffer, op Op) *Request {
	const name = "ReduceScatter"
	if err := c.checkReduceScatter(send, recv, op); err != nil {
		return c.failedRequest(name, err)
	}
	r := c.postColl(ctx, name, algo.OpReduceScatter, recv.dt, op, 0, recv.Len(), reduceScatterOp)
	r.args.send, r.args.recv, r.args.op = send, recv, op
	return r
}

func reduceScatterOp(ctx context.Context, p *opPeers, a *opArgs) error {
	return p.c.reduceScatter(ctx, p, a.send, a.recv, a.op)
}

// reduceScatter runs a ReduceScatter of send into recv with op: directly
// where it can (directReduceScatter), else by the chosen schedule.
func (c *Communicator) reduceScatter(ctx context.Context, p *opPeers, send, recv Buffer, op Op) error {
	if ok, err := c.directReduceScatter(ctx, p, send, recv, op); ok {
		return err
	}
	dt := recv.dt
	err := c.runSchedule(ctx, algo.OpReduceScatter, len(send.b), algo.Args{Peers: p, Src: send.b, Dst: recv.b, DType: dt, Op: op.Combiner(), Block: len(recv.b)})
	if err != nil {
		return err
	}
	algo.Finalize(recv.b, dt, op, c.size)
	return nil
}

// vLayout checks per-peer counts and displacements (in elements) against a
// buffer and converts them to byte offsets and lengths, into offs and lens
// (made again if they are too short).
func (c *Communicator) vLayout(what string, b Buffer, counts, displs, offs, lens []int) ([]int, []int, error) {
	if len(counts) != c.size || len(displs) != c.size {
		return offs, lens, invalidf("%s counts and displacements need %d entries, got %d and %d", what, c.size, len(counts), len(displs))
	}
	es, n := b.dt.Size(), b.Len()
	offs, lens = resize(offs, c.size), resize(lens, c.size)
	for j := range counts {
		if counts[j] < 0 || displs[j] < 0 || displs[j] > n || counts[j] > n-displs[j] {
			return offs, lens, invalidf("%s block for rank %d (displacement %d, count %d) outside the %d-element buffer", what, j, displs[j], counts[j], n)
		}
		offs[j], lens[j] = displs[j]*es, counts[j]*es
	}
	return offs, lens, nil
}

// Gather collects every rank's send buffer into recv on root, in rank
// order. recv (root only) holds Size() times the elements of send.
func (c *Communicator) Gather(ctx context.Context, send, recv Buffer, root int) error {
	return wait(c.postGather(ctx, send, recv, root))
}

// GatherAsync is the non-blocking form of Gather.
func (c *Communicator) GatherAsync(ctx context.Context, send, recv Buffer, root int) *Request {
	return c.issue(c.postGather(ctx, send, recv, root))
}

// postGather checks Gather's arguments and makes its request, unissued (see post).
func (c *Communicator) postGather(ctx context.Context, send, recv Buffer, root int) *Request {
	const name = "Gather"
	err := c.checkRoot(root)
	if err == nil {
		err = send.validate("send buffer")
	}
	isRoot := c.rank == root
	nb := len(send.b)
	if err == nil && isRoot {
		err = checkPair(send, recv)
		if err == nil && len(recv.b) != nb*c.size {
			err = invalidf("root's recv has %d elements, want %d x %d", recv.Len(), c.size, send.Len())
		}
		if err == nil && !same(send.b, recv.b[root*nb:(root+1)*nb]) && overlap(send.b, recv.b) {
			err = invalidf("send overlaps recv other than as the root's block")
		}
	}
	if err != nil {
		return c.failedRequest(name, err)
	}
	r := c.postColl(ctx, name, algo.OpGather, send.dt, 0, root, send.Len(), gatherOp)
	r.args.send, r.args.recv, r.args.root = send, recv, root
	return r
}

func gatherOp(ctx context.Context, p *opPeers, a *opArgs) error {
	nb := len(a.send.b)
	return p.c.runSchedule(ctx, algo.OpGather, nb, algo.Args{Peers: p, Src: a.send.b, Dst: a.recv.b, Root: a.root, Block: nb})
}

// Scatter sends block j of root's send buffer to rank j's recv. send (root
// only) holds Size() times the elements of recv.
func (c *Communicator) Scatter(ctx context.Context, send, recv Buffer, root int) error {
	return wait(c.postScatter(ctx, send, recv, root))
}

// ScatterAsync is the non-blocking form of Scatter.
func (c *Communicator) ScatterAsync(ctx context.Context, send, recv Buffer, root int) *Request {
	return c.issue(c.postScatter(ctx, send, recv, root))
}

// postScatter checks Scatter's arguments and makes its request, unissued (see post).
func (c *Communicator) postScatter(ctx context.Context, send, recv Buffer, root int) *Request {
	const name = "Scatter"
	err := c.checkRoot(root)
	if err == nil {
		err = recv.validate("recv buffer")
	}
	isRoot := c.rank == root
	nb := len(recv.b)
	if err == nil && isRoot {
		err = checkPair(send, recv)
		if err == nil && len(send.b) != nb*c.size {
			err = invalidf("root's send has %d elements, want %d x %d", send.Len(), c.size, recv.Len())
		}
		if err == nil && !same(recv.b, send.b[root*nb:(root+1)*nb]) && overlap(send.b, recv.b) {
			err = invalidf("recv overlaps send other than as the root's block")
		}
	}
	if err != nil {
		return c.failedRequest(name, err)
	}
	r := c.postColl(ctx, name, algo.OpScatter, recv.dt, 0, root, recv.Len(), scatterOp)
	r.args.send, r.args.recv, r.args.root = send, recv, root
	return r
}

func scatterOp(ctx context.Context, p *opPeers, a *opArgs) error {
	nb := len(a.recv.b)
	return p.c.runSchedule(ctx, algo.OpScatter, nb, algo.Args{Peers: p, Src: a.send.b, Dst: a.recv.b, Root: a.root, Block: nb})
}

// Barrier returns once every rank has called it.
func (c *Communicator) Barrier(ctx context.Context) error {
	if c.takeAlone(ctx, barrierProbe) {
		return c.runTaken(ctx, "Barrier", algo.OpBarrier, 0, 0, 0, 0, directBarrierOp)
	}
	return wait(c.postBarrier(ctx))
}

// barrierProbe is the message size a Barrier asks direct (and takeAlone)
// about: its messages are empty, and go directly wherever the smallest
// message does.
const barrierProbe = 1

// BarrierAsync is the non-blocking form of Barrier.
func (c *Communicator) BarrierAsync(ctx context.Context) *Request {
	return c.issue(c.postBarrier(ctx))
}

// postBarrier checks Barrier's arguments and makes its request, unissued (see post).
func (c *Communicator) postBarrier(ctx context.Context) *Request {
	return c.postColl(ctx, "Barrier", algo.OpBarrier, 0, 0, 0, 0, barrierOp)
}

func barrierOp(ctx context.Context, p *opPeers, _ *opArgs) error {
	if p.c.direct(barrierProbe) {
		return directBarrierOp(ctx, p)
	}
	return p.c.runSchedule(ctx, algo.OpBarrier, 0, algo.Args{Peers: p})
}

// directBarrierOp runs a Barrier directly (see directBarrier).
func directBarrierOp(ctx context.Context, p *opPeers) error { return p.c.directBarrier(ctx, p) }

// resize returns s with length n, reusing its array if it is long enough.
func resize(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}
