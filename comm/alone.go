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
func (c *Communicator) runTaken(ctx context.Context, name string, op algo.Collective, dt DType, red Op, root, count int, body func(ctx context.Context, p *opPeers) error) (err error) {
	q := &c.queue
	o := opName{name, q.nextSeq()}
	p := &c.worker.peers
	p.hdr = transport.Header{Comm: c.id, Epoch: c.epoch.Load(), Seq: o.seq}
	setCollHeader(&p.hdr, op, dt, red, root, count)
	start := c.now()
	c.hist.beginEntry(o, &p.hdr, 0, nil, start)
	defer func() {
		if v := recover(); v != nil {
			err = c.panicked(o, v, debug.Stack())
		}
		c.endOp(err)
		q.releaseAlone()
	}()
	c.armWatchdog()
	ctx = c.worker.op.get(ctx, c.cfg.timeout, start)
	if err = body(ctx, p); err == nil && c.failure.err() == nil {
		return nil
	}
	return c.outcome(ctx, o, start, err)
}
