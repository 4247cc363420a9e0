package comm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/plain"
	"github.com/occl/occl/transport"
)

// opQueue is a communicator's queue of issued operations, and the life of
// the worker that runs them.
//
// Contract:
//   - any goroutine may push a request (issue an operation); collectives
//     are numbered in the order they start, from 1 (see started);
//   - requests run in the order they were pushed, one at a time, each to
//     its end before the next starts, by whoever holds exec: the worker,
//     or a caller about to block on the request at the head of the queue,
//     which runs it itself (help) and saves the worker's wake-up; a
//     blocking call that finds nothing queued or running runs its request
//     without queuing it at all (runAlone); the worker is woken for a
//     request an Async call queued only after issueGrace, unless someone
//     waits for it (Wait, Test) first, so that a caller that waits at
//     once runs it itself; after lateGrace instead once the caller has
//     waited within promptWait promptCalls times in a row (see prompt);
//   - a request whose context ends while it is queued is withdrawn:
//     removed and completed with its context's error; it never took a
//     sequence number, so the collectives after it number as if it had
//     never been issued. This happens as
//     soon as someone looks (a blocking call or Wait waiting for it, Test)
//     or when it reaches the head of the queue, whichever comes first: no
//     callback is armed on the context, which would cost every operation
//     an allocation and a registration with its parent context;
//   - close refuses every later push (the request completes at once with
//     ErrClosed); idle waits for the requests already pushed to finish;
//     stop makes the worker return once the queue is empty (what is
//     queued still runs, and fails at once if the communicator has
//     failed) and waits for it; drain then hands the shutdown anything
//     left, to complete with ErrClosed.
//
// Every request pushed, refused or made complete without running
// (failedRequest) is counted in out until it finishes, so that idle sees
// it; one run alone is not, and idle waits for exec instead.
type opQueue struct {
	mu sync.Mutex
	// started is the sequence number of the last collective started:
	// the holder of exec numbers a request as it takes it (take,
	// takeHead, runAlone), with a plain store, which FlightRecord and
	// drain read under mu to number the queued ones.
	started atomic.Uint64
	pending []*Request
	// length is len(pending), stored under mu whenever it changes, so
	// that asking whether anything is queued takes no lock.
	length atomic.Int32
	// slots is the array pending starts at when the queue is empty again,
	// so that a queue that empties after every operation (blocking calls)
	// reuses its array instead of growing a new one as its head advances.
	slots []*Request
	// closing is set under mu by close; push reads it under mu,
	// runAlone without.
	closing atomic.Bool
	wake    chan struct{} // a request was pushed
	// grace wakes the worker issueGrace after an Async call queued a
	// request without waking it (see kickSoon); graceArmed is set while
	// it is pending.
	grace      *time.Timer
	graceArmed atomic.Bool
	// graceFor is issueGrace; tests lengthen it.
	graceFor time.Duration
	// prompt counts, up to promptCalls, the Async requests in a row
	// that their callers waited for within promptWait of issuing them
	// (see waited). late is the wake-up such callers' requests get
	// instead of grace: armed if not armed already, never stopped, so
	// that it fires at most once per lateFor whatever the rate of calls.
	prompt    atomic.Int32
	late      *time.Timer
	lateArmed atomic.Bool
	lateFor   time.Duration
	// promptFor is promptWait; tests lengthen it (a call and its wait
	// can be further apart under the race detector on a busy machine).
	promptFor time.Duration
	// exec is held by whoever runs requests: the worker, a caller
	// about to block on the request at the head of the queue (see
	// help), or a blocking call running alone (see runAlone), which
	// takes it as alone.
	exec execLock
	// alone is the kind runAlone takes exec as (see aloneKind).
	alone uint32
	out   outstanding // requests issued and not finished

	quit     chan struct{} // stop was called
	quitOnce sync.Once
	stopped  chan struct{} // closed by the worker when it returns
	shut     chan struct{} // closed once the communicator's shutdown has finished
}

// init makes q ready for use; the communicator calls it before it starts
// the worker.
func (q *opQueue) init() {
	q.wake = make(chan struct{}, 1)
	q.quit = make(chan struct{})
	q.stopped = make(chan struct{})
	q.shut = make(chan struct{})
	q.graceFor, q.grace = issueGrace, q.wakeTimer(&q.graceArmed)
	q.lateFor, q.late = lateGrace, q.wakeTimer(&q.lateArmed)
	q.promptFor = promptWait
	q.alone = aloneKind()
}

// wakeTimer returns a stopped timer that, when it fires, clears armed and
// then wakes the worker if anything is queued (see kickSoon, kickLate).
func (q *opQueue) wakeTimer(armed *atomic.Bool) *time.Timer {
	t := time.AfterFunc(time.Hour, func() {
		armed.Store(false)
		if q.queued() {
			q.kick()
		}
	})
	t.Stop()
	return t
}

// issueGrace is how long a request issued by an Async call waits in the
// queue for its caller before the worker is woken for it. A caller that
// waits for the request within it (a blocking call's pattern: issue, then
// wait at once, as torch.distributed's calls without async_op and most C
// callers do) runs it itself (help), and nothing wakes the worker: waking
// it at once made it take the request from under its caller, who then
// slept until the worker was done, and on a machine with as many ranks as
// CPUs the woken threads took the CPUs the ranks needed (torch.distributed
// at 2 processes on 2 CPUs, not bound, 8 B all_reduce: 5.8-7.2 us per
// call, 2.9-3.8 with the grace). A request its caller does not wait for
// starts at most this much later, while the caller computes.
const issueGrace = 20 * time.Microsecond

// promptCalls is how many Async requests in a row their callers must wait
// for within promptWait of issuing them (torch.distributed's calls without
// async_op, C callers of the blocking functions) before the next one is
// given lateGrace instead of issueGrace.
//
// Arming a timer costs a thread's wake-up whenever it becomes the
// earliest timer of the process (the Go runtime makes sure a thread
// watches it), and each Async call armed issueGrace anew. The caller pays
// for waking that thread (on a virtual machine, waking an idle CPU is an
// exit to the hypervisor), and where the ranks fill the machine's CPUs the
// woken thread takes one from a rank. Through torch.distributed, on a
// one-rank group with 200 us of Python between calls, a call took 23-27
// us with the grace armed per call and 9-11 us without; at 2 processes on
// 2 CPUs, with 60 us between calls, 21-28% of 32 B all_to_all_single
// calls took over 20 us with it and 7-10% without.
const promptCalls = 8

// promptWait is how soon after an Async call its caller must wait for the
// request to count as waiting at once.
const promptWait = 200 * time.Microsecond

// lateGrace is the longest a request of a prompt caller waits in the queue
// before the worker is woken for it, if its caller neither waits, tests
// nor issues another (which wake the worker at once): once per lateGrace
// at most, the wake-up is paid for nothing. A prompt caller that issues a
// request to overlap with computation loses that overlap for this one
// request (it starts at the wait, or lateGrace after the call); its wait
// ends the streak, and the requests after it get issueGrace again.
const lateGrace = 20 * time.Millisecond

// isRewire reports whether r is a rewire.
func isRewire(r *Request) bool {
	return r.hdr.Kind == transport.KindCollective && r.hdr.Op == uint8(algo.OpRewire)
}

// kickLate wakes the worker within lateFor if anything is queued then,
// unless such a wake-up is pending already; it never re-arms a pending
// one (see prompt).
func (q *opQueue) kickLate() {
	if !q.lateArmed.Load() && !q.lateArmed.Swap(true) {
		q.late.Reset(q.lateFor)
	}
}

// waited records how soon after issuing r its caller waits for it (see
// prompt): within promptWait counts towards the streak, later ends it.
// Whether the caller then runs r itself does not matter.
func (q *opQueue) waited(r *Request) {
	if r.issued == 0 {
		// A blocking call's, or released.
		return
	}
	n := q.prompt.Load()
	if now()-r.issued > stamp(q.promptFor) {
		if n != 0 {
			q.prompt.Store(0)
		}
	} else if n < promptCalls {
		q.prompt.Add(1)
	}
}

// cancelGrace stops the pending wake-up of kickSoon, once a caller ran
// what was queued itself: a loop of Async calls each waited for at once
// would otherwise have a timer fire, and a thread woken for it, every
// issueGrace. A request queued meanwhile gets a wake-up of its own: the
// look at the queue comes after graceArmed is cleared (see kickSoon).
func (q *opQueue) cancelGrace() {
	if q.graceArmed.Load() && q.grace.Stop() {
		q.graceArmed.Store(false)
		if q.queued() {
			q.kickSoon()
		}
	}
}

// kickSoon wakes the worker issueGrace from now if anything is queued
// then (what its callers ran themselves is not), unless a wake-up is
// pending already. The callback clears graceArmed before it looks at the
// queue, so a request queued before a caller found graceArmed set is seen
// by that look.
func (q *opQueue) kickSoon() {
	if !q.graceArmed.Swap(true) {
		q.grace.Reset(q.graceFor)
	}
}

// Request is an operation issued with an Async method. The buffers it was
// given belong to it until it completes.
//
// A request allocates nothing beyond itself: the common operations are
// static functions of their arguments (opFunc, opArgs), and the channel
// Done returns is made only for a caller that blocks on it. The requests
// of blocking calls, which no caller ever sees, are recycled (see wait),
// and so are those their callers release (Release).
type Request struct {
	c    *Communicator
	name string
	// seq is a collective's sequence number, given when it starts (see
	// opQueue.started; a record of the queue numbers the queued ones as
	// they will start, numberQueued); 0 for point-to-point groups.
	seq uint64
	hdr transport.Header
	// target is a rewire's target digest, part of its fingerprint.
	target uint64
	ctx    context.Context
	fn     opFunc
	args   opArgs
	// issued is when an Async call issued it (see opQueue.prompt).
	issued stamp
	// finished is set when the operation has completed, after err; mu
	// orders it with the making of done, which finish closes.
	finished atomic.Bool
	mu       sync.Mutex
	done     chan struct{}
	err      error
	// overlap is set by Overlap: the caller computes while it runs.
	overlap atomic.Bool
}

// opFunc runs an operation on its arguments.
type opFunc func(ctx context.Context, p *opPeers, a *opArgs) error

// opArgs are an operation's arguments, kept in its Request so that issuing
// one of the common operations allocates no closure. The others bind
// theirs in call (see callOp).
type opArgs struct {
	send, recv Buffer
	op         Op
	root       int
	v          *vBlocks // AllToAllV's blocks
	tag        string   // an all-to-all's traffic tag (TrafficTag of its caller's context)
	p2p        *p2pOps  // a Group's operations
	call       func(ctx context.Context, p *opPeers) error
}

// release gives back what the arguments hold for the operation's time.
func (a *opArgs) release() {
	a.putBlocks()
	*a = opArgs{}
}

// putBlocks gives back an AllToAllV's blocks or a group's operations, if
// the arguments hold any.
func (a *opArgs) putBlocks() {
	if a.v != nil {
		vblocks.Put(a.v)
	}
	if a.p2p != nil {
		a.p2p.put()
	}
}

// callOp runs an operation whose arguments are bound in a closure.
func callOp(ctx context.Context, p *opPeers, a *opArgs) error { return a.call(ctx, p) }

// requests recycles the requests of blocking calls and released ones.
var requests = sync.Pool{New: func() any { return new(Request) }}

// closed is a closed channel: the Done channel of a request that completed
// before anyone asked for one, and outstanding's when none is.
var closed = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Wait blocks until the operation completes and returns its error. If ctx
// ends first, Wait returns ctx's error and the operation goes on.
func (r *Request) Wait(ctx context.Context) error {
	r.c.queue.waited(r)
	if ctx.Done() == nil || ctx == r.ctx {
		// Only a wait that cannot end before the operation may run it
		// on this goroutine: one with a shorter deadline must be able
		// to return while the operation goes on.
		r.c.help(r)
	} else if !r.finished.Load() {
		// The worker runs it: now, not after the issue's grace.
		r.c.queue.kick()
	}
	if r.finished.Load() {
		return r.err
	}
	done, own := r.Done(), r.ctxDone()
	for {
		select {
		case <-done:
			return r.err
		case <-ctx.Done():
			return fmt.Errorf("occl: rank %d: waiting for %s: %w", r.c.rank, r.name, ctx.Err())
		case <-own:
			// Its own context ended: withdrawn if still queued; if
			// running, the operation honours that context itself.
			r.c.queue.withdraw(r)
			own = nil
		}
	}
}

// ctxDone is the Done channel of the request's context (nil for a request
// completed before it was queued).
func (r *Request) ctxDone() <-chan struct{} {
	if r.ctx == nil {
		return nil
	}
	return r.ctx.Done()
}

// Test reports whether the operation has completed, and its error if so.
func (r *Request) Test() (bool, error) {
	if r.ctx != nil && r.ctx.Err() != nil {
		r.c.queue.withdraw(r)
	}
	if r.finished.Load() {
		return true, r.err
	}
	// Whoever tests a request waits for it: the worker runs it now, not
	// after the issue's grace.
	r.c.queue.kick()
	return false, nil
}

// Release gives a completed request back to the communicator, to serve a
// later operation: an Async call then allocates nothing (a request not
// released is reclaimed by the garbage collector, which costs an
// allocation per Async call). Release a request once its completion has
// been seen (Wait returned, or Test reported it); on a request that has
// not completed it does nothing. A released request must not be used
// after (no Wait, Test, Done or Release; a Done channel taken before
// stays closed).
func (r *Request) Release() {
	if !r.finished.Load() {
		return
	}
	r.recycle()
}

// Overlap tells the communicator that its caller computes on the
// process's cores while the operation runs, as a training step's backward
// pass does while its gradients are reduced (torch's DistributedDataParallel
// asks each reduction for its future and goes on computing). The
// operation's waits on shared memory then wait as where the processes
// outnumber the cores (they poll on only while the peer runs, then give the
// core away and sleep) instead of polling for the spin time (WithSpin), and
// its TCP reads and writes wait in the netpoller instead of polling the
// socket: a core kept polling is taken from that computation, and the peers
// wait for its result. It may be called from any goroutine until the
// request is released, also while the operation runs: a polling wait looks
// again every 16th poll on shared memory, before every poll over TCP.
func (r *Request) Overlap() { r.overlap.Store(true) }

// Done returns a channel closed when the operation completes.
func (r *Request) Done() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done != nil:
	case r.finished.Load():
		return closed
	default:
		r.done = make(chan struct{})
	}
	return r.done
}

// finish completes the request with err. Once it releases mu, the request
// may be recycled (see wait and recycle): finish touches nothing of it
// after that.
func (r *Request) finish(err error) {
	q := &r.c.queue
	r.err = err
	r.fn = nil
	r.args.release()
	r.mu.Lock()
	r.finished.Store(true)
	done := r.done
	r.mu.Unlock()
	if done != nil {
		close(done)
	}
	q.out.done()
}

// recycle returns the request of a blocking call, completed and seen by its
// only caller, to the pool.
func (r *Request) recycle() {
	r.mu.Lock()   // finish may not have released it yet
	r.mu.Unlock() //nolint:staticcheck // only waits for finish
	r.free()
}

// free returns r, which nobody else sees any more, to the pool.
func (r *Request) free() {
	r.args.putBlocks() // *r = Request{} clears the rest
	*r = Request{}
	requests.Put(r)
}

// withdrawn is the error of a request whose context ended before it
// started.
func (r *Request) withdrawn() error {
	return &OpError{Rank: r.c.rank, Op: r.name, Err: fmt.Errorf("withdrawn before it started: %w", r.ctx.Err())}
}

// postCall makes the request of an operation bound in a closure, unissued
// (see post): the form of the operations that are not on a hot path
// (Split, Grow). hdr is the frame header template: Kind, Op, DType, RedOp,
// Root and Count; the worker fills in communicator, epoch and sequence.
func (c *Communicator) postCall(ctx context.Context, name string, hdr transport.Header, fn func(ctx context.Context, p *opPeers) error) *Request {
	return c.post(ctx, name, hdr, callOp, opArgs{call: fn})
}

// post makes the request of operation fn on args and returns it unissued:
// a blocking call passes it to wait, which runs it on the calling
// goroutine when nothing else is queued or running (runAlone) and queues
// it otherwise; an Async form passes it to issue.
func (c *Communicator) post(ctx context.Context, name string, hdr transport.Header, fn opFunc, args opArgs) *Request {
	r := c.request(ctx, name, fn)
	r.hdr, r.args = hdr, args
	return r
}

// postColl is post for collective op (its header as collHeader makes it),
// with the header written into the request in place, field by field, and
// the arguments left to the caller to fill in the same way: a header or
// arguments built apart and copied in are read back, 16 bytes at a time,
// from the narrower stores that just built them, which the processor
// cannot forward (a stall of tens of cycles on every operation).
func (c *Communicator) postColl(ctx context.Context, name string, op algo.Collective, dt DType, red Op, root, count int, fn opFunc) *Request {
	r := c.request(ctx, name, fn)
	setCollHeader(&r.hdr, op, dt, red, root, count)
	return r
}

// request returns a cleared request (see free) of operation fn, with no
// header or arguments yet.
func (c *Communicator) request(ctx context.Context, name string, fn opFunc) *Request {
	r := requests.Get().(*Request)
	r.c, r.name, r.ctx, r.fn = c, name, ctx, fn
	return r
}

// issue queues r, made by post (or built by an operation that sets more
// of it), has the worker woken for it (after issueGrace if r is alone in
// the queue, see kickSoon), and returns r. A request completed already
// (failedRequest) is returned as it is.
func (c *Communicator) issue(r *Request) *Request {
	if r.finished.Load() {
		return r
	}
	r.issued = now()
	c.enqueue(r)
	if q := &c.queue; q.length.Load() > 1 {
		// Behind others: its caller cannot run it (help runs the head
		// only), the worker must.
		q.kick()
	} else if q.prompt.Load() >= promptCalls && !isRewire(r) {
		// A rewire keeps the short grace: it is issued to overlap with
		// computation, and takes milliseconds itself.
		q.kickLate()
	} else {
		q.kickSoon()
	}
	return r
}

// enqueue queues r without waking the worker: its caller waits for it and
// wakes the worker only if it cannot run it itself (see help). A queue
// closed already completes r with ErrClosed.
func (c *Communicator) enqueue(r *Request) {
	if !c.queue.push(r) {
		r.finish(&OpError{Rank: c.rank, Op: r.name, Err: c.closedErr()})
	}
}

// runAlone runs r, a blocking call's request made by post and not yet
// queued, on the calling goroutine if nothing is queued or running and its
// context has not ended, and reports whether it did (r.err is then its
// result). Such a request is never queued and nobody else ever sees it, so
// it costs none of the queue's hand-over: no removal from the queue, no
// completion under the request's lock. It saves the worker's wake-up as
// help does.
func (c *Communicator) runAlone(r *Request) bool {
	q := &c.queue
	if !q.exec.tryLock(q.alone) {
		return false
	}
	if !q.pushAlone(r) {
		q.unlockExec()
		return false
	}
	r.err = c.run(r)
	q.releaseAlone()
	return true
}

// releaseAlone releases exec, held by a call running alone, and wakes the
// worker if anything was pushed while it ran: the worker, if woken
// meanwhile, found exec held (after a plain release this look may miss a
// push that the worker then sees: see execLock).
func (q *opQueue) releaseAlone() {
	q.exec.release(q.alone)
	if q.queued() {
		q.kick()
	}
}

// unlockExec releases exec, taken by a call that then ran nothing, and
// wakes the worker if anything is queued, as every release of exec must:
// the worker, woken meanwhile, found exec held and left the queue to its
// holder (see execLock). The caller may not look again: a call refused
// because the communicator is closing returns without queuing anything.
func (q *opQueue) unlockExec() {
	q.exec.unlock()
	if q.queued() {
		q.kick()
	}
}

// failedRequest returns a completed request carrying err, for arguments
// rejected before anything was queued.
func (c *Communicator) failedRequest(name string, err error) *Request {
	r := &Request{c: c, name: name}
	c.queue.out.add()
	r.finish(&OpError{Rank: c.rank, Op: name, Err: err})
	return r
}

// push queues r, numbering it if it is a collective; the caller wakes the
// worker (kick) unless it waits for r itself (see Communicator.post). It
// reports false, leaving r to be finished by the caller, once the queue is
// closed.
func (q *opQueue) push(r *Request) bool {
	q.out.add()
	q.mu.Lock()
	if q.closing.Load() {
		q.mu.Unlock()
		return false
	}
	if len(q.pending) == 0 {
		q.pending = q.slots[:0]
	}
	q.pending = append(q.pending, r)
	q.length.Store(int32(len(q.pending)))
	if cap(q.pending) > cap(q.slots) {
		q.slots = q.pending[:0]
	}
	q.mu.Unlock()
	return true
}

// pushAlone numbers r, which its caller runs at once holding exec, as if
// it had been pushed and taken from the head of the queue. It reports
// false, leaving r alone, if the queue holds requests or is closed, or r's
// context has ended: r then takes the queue's path, which withdraws it or
// fails it with ErrClosed. It takes no lock: a request pushed meanwhile
// is numbered when it starts, after r.
func (q *opQueue) pushAlone(r *Request) bool {
	if !q.mayRunAlone(r.ctx) {
		return false
	}
	q.number(r)
	return true
}

// mayRunAlone reports whether a call with context ctx, holding exec, may
// run alone: the queue holds no request and is not closed, and ctx has
// not ended.
func (q *opQueue) mayRunAlone(ctx context.Context) bool {
	return !q.closing.Load() && !q.queued() && ctx.Err() == nil
}

// number gives r, a request about to start, its sequence number if it is
// a collective. exec is held.
func (q *opQueue) number(r *Request) {
	if r.hdr.Kind == transport.KindCollective {
		r.seq = q.nextSeq()
	}
}

// nextSeq numbers a collective about to start: the sequence number after
// the last one started. exec is held.
func (q *opQueue) nextSeq() uint64 {
	seq := q.started.Load() + 1
	plain.Store(&q.started, seq)
	return seq
}

// numberQueued gives the queued collectives the sequence numbers they
// will start with, for a record of them or their failure at close. q.mu
// is held. A blocking call running alone meanwhile (from another
// goroutine) may take the first of them.
func (q *opQueue) numberQueued() {
	seq := q.started.Load()
	for _, r := range q.pending {
		if r.hdr.Kind == transport.KindCollective {
			seq++
			r.seq = seq
		}
	}
}

// missed reports whether the worker, which found exec held, must try to
// take it again at once: held by a call running alone, which releases it
// with a plain store, while something is queued, after a private barrier
// shows it released (see execLock). Where the barrier fails, the worker
// tries again issueGrace later (kickSoon).
func (q *opQueue) missed() bool {
	if q.exec.state.Load() != execAlone || !q.queued() {
		return false
	}
	if barrier() != nil {
		q.kickSoon()
		return false
	}
	return q.exec.state.Load() == execFree
}

// kick wakes the worker.
func (q *opQueue) kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// takeHead removes r from the queue if it is at the head and its context
// has not ended, and reports whether it did. exec is held.
func (q *opQueue) takeHead(r *Request) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 || q.pending[0] != r || r.ctx.Err() != nil {
		return false
	}
	q.pending[0] = nil
	q.pending = q.pending[1:]
	q.length.Store(int32(len(q.pending)))
	q.number(r)
	return true
}

// queued reports whether any request is waiting to run.
func (q *opQueue) queued() bool { return q.length.Load() > 0 }

// withdraw removes r from the queue if it has not started and completes it
// with its context's error. Numbered only when they start, the
// collectives after it take the numbers they would have had if r had
// never been issued.
func (q *opQueue) withdraw(r *Request) {
	q.mu.Lock()
	ok := q.unqueue(r)
	q.mu.Unlock()
	if ok {
		r.finish(r.withdrawn())
	}
}

// unqueue removes r from the pending queue. It reports whether r was
// queued. q.mu is held.
func (q *opQueue) unqueue(r *Request) bool {
	i := 0
	for i < len(q.pending) && q.pending[i] != r {
		i++
	}
	if i == len(q.pending) {
		return false
	}
	rest := q.pending[i+1:]
	copy(q.pending[i:], rest)
	q.pending[len(q.pending)-1] = nil
	q.pending = q.pending[:len(q.pending)-1]
	q.length.Store(int32(len(q.pending)))
	return true
}

// take removes and returns the next request to run, or nil if the queue is
// empty (then wait on q.wake). A request at the head whose context has
// ended is withdrawn instead. exec is held.
func (q *opQueue) take() *Request {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.mu.Unlock()
			return nil
		}
		r := q.pending[0]
		if r.ctx.Err() != nil {
			// Its context ended before the withdrawal ran.
			q.unqueue(r)
			q.mu.Unlock()
			r.finish(r.withdrawn())
			continue
		}
		q.pending[0] = nil
		q.pending = q.pending[1:]
		q.length.Store(int32(len(q.pending)))
		q.number(r)
		q.mu.Unlock()
		return r
	}
}

// close refuses every later push. It reports whether the queue was closed
// already.
func (q *opQueue) close() (already bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closing.Swap(true)
}

// closed says whether close was called.
func (q *opQueue) closed() bool { return q.closing.Load() }

// idle waits until every request issued has finished, or ctx ends.
func (q *opQueue) idle(ctx context.Context) error {
	select {
	case <-q.out.none():
	case <-ctx.Done():
		return ctx.Err()
	}
	// A request run alone is not counted in out: it runs holding exec.
	return q.exec.waitFree(ctx)
}

// stop makes the worker return once the queue is empty, and waits for it.
func (q *opQueue) stop() {
	q.grace.Stop()
	q.late.Stop()
	q.quitOnce.Do(func() { close(q.quit) })
	<-q.stopped
	// A caller may still be running its own request.
	_ = q.exec.waitFree(context.Background())
}

// drain empties the queue and returns what it held.
func (q *opQueue) drain() []*Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.numberQueued()
	rest := q.pending
	q.pending = nil
	q.length.Store(0)
	return rest
}
