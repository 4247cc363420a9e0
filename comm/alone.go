package comm

import (
	"context"
	"runtime/debug"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/transport"
)

// A small blocking collective runs on the calling goroutine without a
// Request when nothing is queued or running: takeAlone, then runTaken.
// It is runAlone and run with what a request would carry passed in. An
// operation on a scalar or two (a loss, a counter, the counts before an
// AllToAllV) is where an operation's time is its layers, and the
// request's (taking it from its pool, filling it, clearing it, calling
// the operation through a pointer) were 5-8% of them (BenchmarkMachinery;
// docs/performance.md, "Small blocking collectives without a request").
// Everything else is the request path's: the exec lock, the sequence
// number, the flight record, the deadline, the watchdog, the failure of
// the communicator and the classification of errors.

// takeAlone takes exec for a blocking collective of n bytes whose caller
// has checked its arguments (and, first, that n is small, so that larger
// calls check and lock once, on the request path), and reports whether it
// did: if the collective may run alone (nothing queued or running, the
// communicator neither closed nor failed, ctx not ended) and goes
// directly (see direct, which reads what a rewire replaces, and so only
// under exec). If it did not, the request path takes the call.
func (c *Communicator) takeAlone(ctx context.Context, n int) bool {
	q := &c.queue
	if !q.exec.tryLock(q.alone) {
		return false
	}
	if !q.mayRunAlone(ctx) || c.failure.err() != nil || !c.direct(n) {
		q.unlockExec()
		return false
	}
	return true
}

// runTaken runs collective op, named name, under the header collHeader
// makes of dt, red, root and count, as body, after takeAlone, and releases
// exec. body, a closure over the caller's arguments that does not outlive
// the call, costs no allocation.
func (c *Communicator) runTaken(ctx context.Context, name string, op algo.Collective, dt DType, red Op, root, count int, body func(ctx context.Context, p *opPeers) error) error {
	h := &c.worker.peers.hdr
	*h = transport.Header{}
	setCollHeader(h, op, dt, red, root, count)
	return c.runTakenAs(ctx, name, nil, body)
}

// runTakenP2P is runTaken for a group whose operations are ops (see
// Group.runTaken).
func (c *Communicator) runTakenP2P(ctx context.Context, name string, ops *p2pOps, body func(ctx context.Context, p *opPeers) error) error {
	c.worker.peers.hdr = p2pHeader
	return c.runTakenAs(ctx, name, ops, body)
}

// runTakenAs is runTaken and runTakenP2P after either has set the kind and
// shape of the operation's header: a collective (p2p nil) takes the next
// sequence number and arms the watchdog, a group neither, as on the
// request path (opQueue.number, Communicator.run).
func (c *Communicator) runTakenAs(ctx context.Context, name string, p2p *p2pOps, body func(ctx context.Context, p *opPeers) error) (err error) {
	q := &c.queue
	o := opName{name, 0}
	if p2p == nil {
		o.seq = q.nextSeq()
	}
	p := &c.worker.peers
	p.hdr.Comm, p.hdr.Epoch, p.hdr.Seq = c.id, c.epoch.Load(), o.seq
	start := c.now()
	c.hist.beginEntry(o, &p.hdr, 0, p2p, start)
	defer func() {
		if v := recover(); v != nil {
			err = c.panicked(o, v, debug.Stack())
		}
		c.endOp(err)
		q.releaseAlone()
	}()
	if p2p == nil {
		c.armWatchdog()
	}
	ctx = c.worker.op.get(ctx, c.cfg.timeout, start)
	if err = body(ctx, p); err == nil && c.failure.err() == nil {
		return nil
	}
	return c.outcome(ctx, o, start, err)
}
