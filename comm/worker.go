package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/transport"
)

// workerState is what only the worker goroutine touches: the running
// operation's view of the peers, the shared default-timeout context, the
// schedules' workspace and the point-to-point message counters.
type workerState struct {
	op    opContext
	ws    algo.Workspace
	peers opPeers
	p2pTx []uint64 // messages sent, by peer
	p2pRx []uint64 // messages received, by peer
	// offs and lens are the last layout blocks made.
	offs, lens []int
	// counts is the last byte matrix an AllToAllV exchanged.
	counts [][]int
	// choice is the schedule runSchedule chose last.
	choice choiceMemo
	// args are the running schedule's arguments: the schedules take them
	// by pointer, through the table's layers of adapters, and a pointer
	// to the worker's copy costs no allocation.
	args algo.Args
}

// choiceMemo is the last choice of a schedule, with what it was made
// for. A loop of operations asks again for the same collective and size on
// the same layout (a rewire installs a new one), and the memo answers
// without the size rules' scan or the cost model's cache and its lock.
type choiceMemo struct {
	l     *layout
	op    algo.Collective
	bytes int
	a     algo.Algorithm
}

// get returns the schedule for op on bytes bytes on layout l: the memo's
// if it was made for them, else choose's, which the memo keeps.
func (m *choiceMemo) get(l *layout, op algo.Collective, bytes int, choose func(*layout, algo.Collective, int) algo.Algorithm) algo.Algorithm {
	if m.l != l || m.op != op || m.bytes != bytes {
		*m = choiceMemo{l: l, op: op, bytes: bytes, a: choose(l, op, bytes)}
	}
	return m.a
}

// run runs schedule a of collective op on args (see algo.Run), from the
// worker's copy of them, which it clears afterwards so that it keeps no
// caller's buffer alive.
func (w *workerState) run(ctx context.Context, op algo.Collective, a algo.Algorithm, args *algo.Args) error {
	w.args = *args
	err := algo.Run(ctx, op, a, &w.args)
	w.args = algo.Args{}
	return err
}

// matrix returns an n x n matrix of ints, the worker's: an operation uses
// it until it ends, and the next one that asks gets it again.
func (w *workerState) matrix(n int) [][]int {
	if len(w.counts) != n {
		flat := make([]int, n*n)
		w.counts = make([][]int, n)
		for i := range w.counts {
			w.counts[i] = flat[i*n : (i+1)*n : (i+1)*n]
		}
	}
	return w.counts
}

// blocks returns per-rank byte offsets and lengths for n equal blocks of
// blockBytes. The slices are the worker's, made again only when the layout
// changes: the caller only reads them, until its operation ends.
func (w *workerState) blocks(n, blockBytes int) (offs, lens []int) {
	if len(w.offs) != n || n > 0 && w.lens[0] != blockBytes {
		w.offs, w.lens = make([]int, n), make([]int, n)
		for i := range w.offs {
			w.offs[i], w.lens[i] = i*blockBytes, blockBytes
		}
	}
	return w.offs, w.lens
}

// serve is the worker: it runs the queued requests one at a time, in
// order, until the queue is stopped. A caller running its own request
// (help) holds exec meanwhile, and wakes the worker again when it is done
// if more is queued.
func (c *Communicator) serve() {
	q := &c.queue
	defer close(q.stopped)
	for {
		if q.exec.tryLock(execHeld) {
			for r := q.take(); r != nil; r = q.take() {
				r.finish(c.run(r))
			}
			q.exec.unlock()
		} else if q.missed() {
			continue
		}
		select {
		case <-q.wake:
		case <-q.quit:
			return
		}
	}
}

// help runs r on the calling goroutine if it is at the head of the queue
// and nothing is running: a caller about to block on r does the worker's
// job instead of waking it and sleeping, which saves two thread switches
// per operation (and, for a caller from C, the hand-off of its thread to
// the Go scheduler). A request queued behind others is left to the
// worker, so that a blocking call never runs (and waits on) an operation
// issued before it, and its deadline holds while it is queued. Whatever
// help leaves queued, r included (a blocking call queues it without
// waking the worker), it wakes the worker for.
func (c *Communicator) help(r *Request) {
	if r.finished.Load() {
		return
	}
	q := &c.queue
	if q.exec.tryLock(execHeld) {
		if q.takeHead(r) {
			if !q.queued() {
				// Nothing is left for the worker: stop its wake-up
				// now, or it fires while r runs, if r takes longer
				// than issueGrace, and wakes a thread for nothing.
				q.cancelGrace()
			}
			r.finish(c.run(r))
		}
		q.exec.unlock()
	}
	if q.queued() {
		// Left to the worker, which holds exec or was not woken for
		// them.
		q.kick()
	} else {
		q.cancelGrace()
	}
}

// run executes one request; the caller holds exec.
func (c *Communicator) run(r *Request) (err error) {
	// One clock reading serves the history, the deadline and the
	// watchdog: on a virtual machine each costs tens of nanoseconds.
	start := c.now()
	c.hist.begin(r, start)
	o := opName{r.name, r.seq}
	c.worker.op.running.Store(r)
	defer func() {
		c.worker.op.running.Store(nil)
		if v := recover(); v != nil {
			err = c.panicked(o, v, debug.Stack())
		}
		c.endOp(err)
	}()
	if pe := c.failure.err(); pe != nil {
		return &OpError{Rank: c.rank, Op: r.name, Seq: r.seq, Err: pe}
	}
	ctx := c.worker.op.get(r.ctx, c.cfg.timeout, start)
	p := &c.worker.peers
	p.hdr = r.hdr
	p.hdr.Comm = c.id
	p.hdr.Epoch = c.epoch.Load()
	p.hdr.Seq = r.seq
	if r.hdr.Kind == transport.KindCollective {
		c.armWatchdog()
	}
	if err = r.fn(ctx, p, &r.args); err == nil && c.failure.err() == nil {
		return nil
	}
	return c.outcome(ctx, o, start, err)
}

// opName names an operation in its errors and records: its name and its
// sequence number (see Request.seq).
type opName struct {
	name string
	seq  uint64
}

// outcome returns the error of operation o, which started at start and
// whose function returned err: nil, or an *OpError whose cause is the
// communicator's failure, with err classified as one (classify) where it
// is not the caller's own.
func (c *Communicator) outcome(ctx context.Context, o opName, start stamp, err error) error {
	if err == nil {
		if pe := c.failure.err(); pe != nil {
			// The operation completed locally, but the communicator
			// failed while it ran: it was pending when the failure came,
			// and pending operations fail, on every rank alike (a peer
			// may not have completed it).
			return &OpError{Rank: c.rank, Op: o.name, Seq: o.seq, Err: pe}
		}
		return nil
	}
	if pe := (*algo.PanicError)(nil); errors.As(err, &pe) {
		return c.panicked(o, pe.Value, pe.Stack)
	}
	if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrRewire) || errors.Is(err, ErrGrow) {
		// Discovered while running (e.g. a group's self send/recv pairing),
		// or a failure that left the communicator's links idle (a rewire
		// rolled back, a grow whose joiners did not come): the
		// communicator is fine.
		return &OpError{Rank: c.rank, Op: o.name, Seq: o.seq, Err: err}
	}
	return &OpError{Rank: c.rank, Op: o.name, Seq: o.seq, Err: c.classify(ctx, o, err, time.Duration(now()-start))}
}

// panicked turns a panic in operation o (on the operation's goroutine, or
// on one its schedule started: an *algo.PanicError), which can only come
// from a bug in occl, into the failure of the communicator, shared with
// every rank as an abort of this one, so that the caller gets an error
// and the other ranks stop waiting for this one, instead of the process
// crashing (or hanging in a Close deferred by the caller, since the panic
// left the queue's exec held). The stack goes to the log.
func (c *Communicator) panicked(o opName, v any, stack []byte) error {
	logx.For(c.log, logx.Coll).Error("occl: internal error", "op", o.name, "seq", o.seq, "panic", v, "stack", string(stack))
	pe := &PeerError{Peer: c.rank, Reporter: c.rank, Kind: ErrAborted,
		Reason: fmt.Sprintf("internal error in %s (seq %d): %v", o.name, o.seq, v)}
	if c.failure.err() == nil {
		c.ctrl.report(pe)
	}
	c.fail(pe)
	c.worker.args = algo.Args{} // not cleared by a schedule that panicked
	return &OpError{Rank: c.rank, Op: o.name, Seq: o.seq, Err: c.failure.err()}
}

// opContext gives operations whose context has no deadline the
// communicator's default timeout. Deriving a new context for every
// operation would make every connection re-arm its cancellation hook each
// time, so one derived context is shared by the operations that start
// within a short window: each still gets at least the full timeout, and at
// most timeout/64 more.
//
// The shared context has twins for schedules, one per kind of wait
// (waits): the same context, telling polling transports not to let other
// goroutines run while they wait, since the schedule's calling goroutine is
// the only one of the operation (a schedule that starts more goroutines
// undoes it for them, see transport.WithYield); for small operations, which
// also lets waits give the core to the other processes when the processes
// outnumber the cores (transport.WithCoreYield); and for all-to-alls whose
// large blocks are lent, whose waits give the core away while peers copy
// (transport.WithCopyWait). Made once per window, they cost operations no
// allocation.
//
// A caller's own context (one with a deadline) gets the same twins, made
// when it first runs an operation and kept while the next operations come
// with the same context, as a loop of calls passes them: a polling wait
// that let other goroutines run would hand the processor away at every
// poll (from four processes on two cores, a fifth of a 1 MiB all-reduce's
// time went to the scheduler). The twins of the last caller context keep it
// alive until an operation comes with another one, or the communicator
// closes.
type opContext struct {
	ctx      context.Context
	twins    [numWaits]context.Context
	cancel   context.CancelFunc
	parent   <-chan struct{}
	deadline stamp

	caller      context.Context
	callerTwins [numWaits]context.Context

	// running is the request running, nil while none does or a blocking
	// call runs without one: the twins' transport.Overlap (see
	// Overlapping).
	running atomic.Pointer[Request]
}

// Overlapping implements transport.Overlap for the twins: the running
// request's caller computes meanwhile (Request.Overlap), which it may say
// after the request has started.
func (o *opContext) Overlapping() bool {
	r := o.running.Load()
	return r != nil && r.overlap.Load()
}

// waits is how a schedule's waits on a polling transport behave (see
// opContext).
type waits uint8

const (
	waitAlone waits = iota // nothing else of the operation needs the processor
	waitShort              // and give the core away: a small operation's peers answer at once
	waitCopy               // and give it away while peers copy large lent blocks
	numWaits
)

// twins returns the twins of ctx, one per kind of wait, whose operations
// overlap their caller's computation while o says so.
func twins(ctx context.Context, o transport.Overlap) [numWaits]context.Context {
	alone := transport.WithoutYield(transport.WithOverlap(ctx, o))
	return [numWaits]context.Context{waitAlone: alone, waitShort: transport.WithCoreYield(alone), waitCopy: transport.WithCopyWait(alone)}
}

// get returns the context an operation that starts at now runs under.
func (o *opContext) get(user context.Context, timeout time.Duration, now stamp) context.Context {
	if _, ok := user.Deadline(); ok {
		return user
	}
	if o.ctx != nil && o.parent == user.Done() && o.ctx.Err() == nil && o.deadline >= now.add(timeout) {
		return o.ctx
	}
	o.release()
	// Saturating: a timeout of hundreds of years means none.
	o.deadline = now.addSat(timeout + min(timeout/64, math.MaxInt64-timeout))
	o.ctx, o.cancel = context.WithDeadline(user, o.deadline.time())
	o.twins = twins(o.ctx, o)
	o.parent = user.Done()
	return o.ctx
}

// shortOp is the most bytes an operation may move for its waits to give
// the core away (transport.WithCoreYield): up to it an operation's time is
// its peers' answers; above it, copies. Where every connection of the
// communicator is shared memory the bound is shortOpShm: when processes
// outnumber the cores, a rank waiting for a peer that shares its core
// there has nothing to do until that peer has run, and giving the core
// away (sched_yield) lets it run at once, where a wait that sleeps or
// hands its processor to another thread of its own process (the Go
// scheduler's way, two thread switches) delays it. Measured on 2 cores, 4
// processes, 8 interleaved rounds, medians, 64 KiB against 256 KiB:
// AllReduce 128 KiB 101 / 67 us, AllGather 256 KiB 84 / 66, ReduceScatter
// 256 KiB 112 / 90, Broadcast 256 KiB 80 / 71 (1 MiB unchanged); the
// bound at 1 MiB made 512 KiB and 1 MiB AllReduce slower and bimodal (366
// / 437 us, 688 / 1063 us, 10 rounds), where the ring's sender goroutine
// shares the processor with the waits. Over TCP a 256 KiB AllToAll was
// slower (252 / 298 us, 6 rounds; likely its socket reads of 64 KiB
// blocks taking the core from the peers' writes, not measured).
//
// An all-to-all on shared memory whose blocks are at most shortBlockShm
// (algo.PairwisePiece) runs on its calling goroutine alone, its blocks
// inline or lent, so nothing of its own process needs the processor while
// it waits: its waits give the core away whatever its buffer. Measured on
// 2 cores, 4 processes, 8 interleaved rounds, medians, against the bound
// of shortOpShm on the buffer: 1 MiB AllToAll (256 KiB blocks) 311 -> 270
// us, 2 MiB 502 -> 508 (Open MPI's vader 251 and 591; with the bound at 1
// MiB blocks, in another 8 rounds, 311 -> 279 and 555 -> 525). Larger
// blocks go in pieces from a sender goroutine unless lent, and there the
// waits giving the core away made a 4 MiB AllToAll through the rings
// slower (1368 -> 1603 us; lent, 978 -> 962).
const (
	shortOp       = 64 << 10
	shortOpShm    = 256 << 10
	shortBlockShm = algo.PairwisePiece
)

// opWaits returns how the waits of an operation that moves bytes bytes
// behave: they give the core away up to shortOp. shm tells whether every
// connection of the communicator is shared memory.
func opWaits(bytes int, shm bool) waits {
	if bytes <= shortOp || (shm && bytes <= shortOpShm) {
		return waitShort
	}
	return waitAlone
}

// allToAllWaits returns how the waits of an all-to-all of a buffer of
// bytes bytes behave: they give the core away if its blocks are at most
// shortBlockShm (see there), looked at only where the buffer is not short
// (its blocks as largestBlock takes them), or, larger, if they are lent
// (lends: the connections lend blocks, see transport.WithCopyWait).
func allToAllWaits(bytes int, shm, lends bool, uniform int, slens, rlens []int) waits {
	switch {
	case opWaits(bytes, shm) == waitShort || (shm && largestBlock(uniform, slens, rlens) <= shortBlockShm):
		return waitShort
	case shm && lends:
		return waitCopy
	}
	return waitAlone
}

// schedule returns the context a schedule runs under for an operation
// that runs under ctx: the twin of the shared context or of the caller's
// own (see opContext) whose waits behave as w.
func (o *opContext) schedule(ctx context.Context, w waits) context.Context {
	switch {
	case ctx == nil:
		return ctx
	case ctx != o.ctx:
		if !o.sameCaller(ctx) {
			o.caller, o.callerTwins = ctx, twins(ctx, o)
		}
		return o.callerTwins[w]
	}
	return o.twins[w]
}

// sameCaller reports whether ctx is the caller context whose twins o
// holds. A context whose type cannot be compared is never the same.
func (o *opContext) sameCaller(ctx context.Context) (same bool) {
	if o.caller == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return ctx == o.caller
}

func (o *opContext) release() {
	if o.cancel != nil {
		o.cancel()
		o.ctx, o.twins, o.cancel = nil, [numWaits]context.Context{}, nil
	}
	o.caller, o.callerTwins = nil, [numWaits]context.Context{}
}

// opPeers is the algo.Peers view of the communicator for the running
// operation. The worker owns it; it stamps every frame with the operation's
// header.
type opPeers struct {
	c   *Communicator
	hdr transport.Header
}

// step labels the frames of a direct exchange (see directSend) as message
// step, in p.hdr itself, which a direct exchange alone uses while it runs
// (its one goroutine is the operation's only one): the schedules' Send and
// Recv copy the header and set the step in the copy, but a header passed
// on right after a field of it was stored is read back, 16 bytes at a
// time, from a store it only partly covers, which the processor cannot
// forward (a stall of tens of cycles). The store is skipped when the step
// is the one the header has: a direct Broadcast labels every message 0, as
// the request's header does, and pays it never; the others pay it once
// per step (a 2-rank AllReduce or AllToAll, once per operation: labelling
// the first message earlier in the operation measured no faster).
func (p *opPeers) step(step uint32) {
	if p.hdr.Step != step {
		p.hdr.Step = step
	}
}

var (
	_ algo.EagerPeers = (*opPeers)(nil)
	_ algo.CPUPeers   = (*opPeers)(nil)
	_ algo.ViewPeers  = (*opPeers)(nil)
)

// CPUs implements algo.CPUPeers: the rank's share of its machine's CPUs
// (see rankCPUs).
func (p *opPeers) CPUs() int { return p.c.cfg.cpus }

func (p *opPeers) Rank() int { return p.c.rank }
func (p *opPeers) Size() int { return p.c.size }

func (p *opPeers) EagerLimit(peer int) int { return p.c.links.to(peer).EagerLimit() }

func (p *opPeers) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	h := p.hdr
	h.Step = step
	p.c.hist.wait(int32(peer))
	if p.c.obs.tr != nil {
		defer p.c.obs.transfer(peer, true, step, len(buf), time.Now())
	}
	if err := p.c.links.to(peer).Send(ctx, h, buf); err != nil {
		return &linkError{peer: peer, dir: "send", step: step, err: err}
	}
	return nil
}

// LendMin returns the smallest message the connection to peer lends, 0
// if it lends none (see algo.LendPeers).
func (p *opPeers) LendMin(peer int) int {
	if l, ok := p.c.links.to(peer).(transport.Lender); ok {
		return l.LendMin()
	}
	return 0
}

// LentMin returns the smallest message peer lends to this rank, 0 if it
// lends none (see algo.LendPeers).
func (p *opPeers) LentMin(peer int) int {
	if l, ok := p.c.links.to(peer).(transport.Lender); ok {
		return l.LentMin()
	}
	return 0
}

// LendsWhole reports whether the connection to peer lends buf, which peer
// takes whole (see algo.WholeLendPeers): as its transport's rule for such
// messages says, or by size where it has none.
func (p *opPeers) LendsWhole(peer int, buf []byte) bool {
	switch l := p.c.links.to(peer).(type) {
	case transport.WholeLender:
		return l.LendsWhole(buf)
	case transport.Lender:
		m := l.LendMin()
		return m > 0 && len(buf) >= m
	}
	return false
}

// Lend sends buf to peer without waiting for its copy (see
// algo.LendPeers).
func (p *opPeers) Lend(ctx context.Context, peer int, step uint32, buf []byte) error {
	l, ok := p.c.links.to(peer).(transport.Lender)
	if !ok {
		return &linkError{peer: peer, dir: "send", step: step, err: errors.New("the connection lends nothing")}
	}
	h := p.hdr
	h.Step = step
	p.c.hist.wait(int32(peer))
	if p.c.obs.tr != nil {
		defer p.c.obs.transfer(peer, true, step, len(buf), time.Now())
	}
	if err := l.Lend(ctx, h, buf); err != nil {
		return &linkError{peer: peer, dir: "send", step: step, err: err}
	}
	return nil
}

// Settle waits until peer has copied what was lent to it (see
// algo.LendPeers).
func (p *opPeers) Settle(ctx context.Context, peer int) error {
	l, ok := p.c.links.to(peer).(transport.Lender)
	if !ok {
		return nil
	}
	p.c.hist.wait(int32(peer))
	if err := l.Settle(ctx); err != nil {
		return &linkError{peer: peer, dir: "send", step: p.hdr.Step, err: err}
	}
	return nil
}

// RecvView receives message step from peer and hands it to use where it
// lies if the connection can (transport.Viewer), else received into buf
// and whole (see algo.ViewPeers).
func (p *opPeers) RecvView(ctx context.Context, peer int, step uint32, buf []byte, align int, use transport.Consumer) error {
	v, ok := p.c.links.to(peer).(transport.Viewer)
	if !ok {
		if err := p.Recv(ctx, peer, step, buf); err != nil {
			return err
		}
		use.Consume(0, buf)
		return nil
	}
	h := p.hdr
	h.Step = step
	p.c.hist.wait(int32(peer))
	if p.c.obs.tr != nil {
		defer p.c.obs.transfer(peer, false, step, len(buf), time.Now())
	}
	if err := v.RecvView(ctx, h, buf, align, use); err != nil {
		return &linkError{peer: peer, dir: "recv", step: step, err: err}
	}
	return nil
}

// DuplexMax returns the largest message Exchange moves with peer, 0 if
// its connection cannot send and receive at once (see algo.DuplexPeers).
func (p *opPeers) DuplexMax(peer int) int {
	if d, ok := p.c.links.to(peer).(transport.Duplex); ok {
		return d.DuplexMax()
	}
	return 0
}

// Exchange sends sbuf to peer as message sstep while it receives message
// rstep from peer into rbuf, on the calling goroutine (see
// algo.DuplexPeers).
func (p *opPeers) Exchange(ctx context.Context, peer int, sstep uint32, sbuf []byte, rstep uint32, rbuf []byte) error {
	d, ok := p.c.links.to(peer).(transport.Duplex)
	if !ok {
		return fmt.Errorf("exchange with rank %d: its connection is not duplex", peer)
	}
	sh, rh := p.hdr, p.hdr
	sh.Step, rh.Step = sstep, rstep
	p.c.hist.wait(int32(peer))
	if p.c.obs.tr != nil {
		defer p.c.obs.transfer(peer, true, sstep, len(sbuf), time.Now())
		defer p.c.obs.transfer(peer, false, rstep, len(rbuf), time.Now())
	}
	if err := d.SendRecv(ctx, sh, sbuf, rh, rbuf); err != nil {
		return &linkError{peer: peer, dir: "exchange", step: rstep, err: err}
	}
	return nil
}

func (p *opPeers) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	h := p.hdr
	h.Step = step
	p.c.hist.wait(int32(peer))
	if p.c.obs.tr != nil {
		defer p.c.obs.transfer(peer, false, step, len(buf), time.Now())
	}
	if err := p.c.links.to(peer).Recv(ctx, h, buf); err != nil {
		return &linkError{peer: peer, dir: "recv", step: step, err: err}
	}
	return nil
}
