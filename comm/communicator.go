// Package comm is occl's public API: communicators created by rendezvous,
// and every collective and point-to-point operation on them.
//
// A Communicator is a group of ranks, usually one per process. Create one
// with Init (a UniqueID shared by all ranks, like ncclCommInitRank),
// InitFromEnv (under torchrun, mpirun or Slurm) or NewLocal (all ranks in
// this process, for tests). Operations are queued in issue order and run one
// at a time, like work on a CUDA stream; every blocking method has an Async
// form that returns a Request. Split makes sub-communicators.
//
// Failures are shared: when a rank dies, hangs, aborts, times out or calls a
// collective that does not match the others', every rank's pending and later
// operations fail with the same *PeerError, within a few seconds and never
// by hanging. A failed communicator cannot be used again; close it and make
// a new one.
//
// Deadlines hold wherever an operation waits. An operation whose context
// ends while it is still queued is withdrawn: it never starts, touches
// neither its buffers nor the wire, returns its context's error, and the
// communicator stays usable, as if the operation had never been issued (the
// collectives queued after it take its sequence number). Ranks must then
// agree, as for any collective: a rank that ran it meanwhile sees this rank
// as not calling it (a mismatch or a timeout). An operation whose context
// ends while it runs may have exchanged part of its data with its peers, so
// it fails the communicator with ErrTimeout (or ErrAborted if the context
// was cancelled).
package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/emu"
)

// Communicator is one rank's handle on a group of ranks. Its methods are
// safe for concurrent use; operations run in the order they were issued.
type Communicator struct {
	id    uint64
	nonce [16]byte // the job nonce rank 0 chose
	rank  int
	size  int
	cfg   config
	log   *slog.Logger
	// tune logs the choice of schedules (subsystem TUNE).
	tune  *slog.Logger
	epoch atomic.Uint32
	// linkGen counts rewire attempts; it names their new connections.
	linkGen uint32

	hosts     []int    // host index of every rank
	hostIDs   []string // host identity of every host index
	localRank int
	localSize int

	conns []transport.Conn // by peer rank; nil at c.rank
	// fabricRanks maps this communicator's ranks to those of the one
	// Init or NewLocal made, whose topology is the whole fabric's (nil:
	// this is that communicator).
	fabricRanks []int
	// retired are the connections the last rewire replaced. They are
	// closed by the next rewire, while the switch runs, or at shutdown:
	// closing them as the rewire ends would wake their peers just when
	// the ranks resume.
	retired []transport.Conn

	emu    *emu.Fabric            // shapes the connections, if emulating
	layout atomic.Pointer[layout] // topology, cost model and host groups
	ctrl   controlPlane
	fabric fabric

	// Operation queue. seq counts collectives issued; the worker runs
	// requests in order.
	mu      sync.Mutex
	seq     uint64
	pending []*Request
	wake    chan struct{}
	closing bool
	out     sync.WaitGroup // requests issued and not finished

	// Worker-only state.
	op     opContext
	ws     algo.Workspace
	peers  opPeers
	p2pTx  []uint64
	p2pRx  []uint64
	splits uint64

	hist    opHistory // recent operations: mismatch probes, flight record
	obs     observer  // timeline and flight-record settings
	watch   watchdog
	traffic monitor

	failOnce sync.Once
	failErr  atomic.Pointer[PeerError]
	failed   chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
	stopped  chan struct{}
}

// newCommunicator assembles a communicator from what a bootstrap produced
// and starts its worker.
func newCommunicator(id uint64, nonce [16]byte, rank int, hostIDs []string, conns []transport.Conn, ctrl controlPlane, fab fabric, cfg config) *Communicator {
	size := len(hostIDs)
	c := &Communicator{
		id:      id,
		nonce:   nonce,
		rank:    rank,
		size:    size,
		cfg:     cfg,
		log:     cfg.log.With("rank", rank, "size", size, "comm", fmt.Sprintf("%016x", id)),
		conns:   conns,
		ctrl:    ctrl,
		fabric:  fab,
		wake:    make(chan struct{}, 1),
		p2pTx:   make([]uint64, size),
		p2pRx:   make([]uint64, size),
		failed:  make(chan struct{}),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	c.hosts = make([]int, size)
	index := map[string]int{}
	for r, h := range hostIDs {
		i, ok := index[h]
		if !ok {
			i = len(c.hostIDs)
			index[h] = i
			c.hostIDs = append(c.hostIDs, h)
		}
		c.hosts[r] = i
	}
	c.localRank, c.localSize = localPosition(rank, hostIDs)
	c.fabricRanks = cfg.fabricRanks
	c.tune = logx.For(c.log, logx.Tune)
	c.peers.c = c
	c.setupModel()
	c.setupObserver()
	if rank == 0 {
		c.logSettings()
	}
	go c.worker()
	return c
}

// Rank returns this rank, in [0, Size()).
func (c *Communicator) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Communicator) Size() int { return c.size }

// ID returns the communicator id carried in every frame.
func (c *Communicator) ID() uint64 { return c.id }

// JobNonce returns a random value that rank 0 chose when the communicator
// was created and gave every rank: the same on every rank, different for
// every job (and every Init, NewLocal or Split) even when the communicator
// id repeats, as it does for jobs given the same secret. It names this job's
// requests to services that outlive jobs, such as the OCS controller.
func (c *Communicator) JobNonce() [16]byte { return c.nonce }

// Epoch returns the current topology epoch.
func (c *Communicator) Epoch() uint32 { return c.epoch.Load() }

// LocalRank returns this rank's index among the ranks on its host.
func (c *Communicator) LocalRank() int { return c.localRank }

// LocalSize returns the number of ranks on this rank's host.
func (c *Communicator) LocalSize() int { return c.localSize }

// NumHosts returns the number of distinct hosts.
func (c *Communicator) NumHosts() int { return len(c.hostIDs) }

// Host returns the host index of rank r (hosts are numbered in order of
// their lowest rank).
func (c *Communicator) Host(r int) int { return c.hosts[r] }

// HostID returns the identity string of host index h.
func (c *Communicator) HostID(h int) string { return c.hostIDs[h] }

// Err returns the error that failed the communicator, or nil while it is
// healthy (like ncclCommGetAsyncError).
func (c *Communicator) Err() error {
	if pe := c.failErr.Load(); pe != nil {
		return pe
	}
	return nil
}

// Request is an operation issued with an Async method. The buffers it was
// given belong to it until it completes.
type Request struct {
	c    *Communicator
	name string
	seq  uint64
	hdr  transport.Header
	// target is a rewire's target digest, part of its fingerprint.
	target uint64
	ctx    context.Context
	fn     func(ctx context.Context, p *opPeers) error
	// stop cancels the withdrawal armed on ctx while r is queued.
	stop func() bool
	done chan struct{}
	err  error
}

// Wait blocks until the operation completes and returns its error. If ctx
// ends first, Wait returns ctx's error and the operation goes on.
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("occl: rank %d: waiting for %s: %w", r.c.rank, r.name, ctx.Err())
	}
}

// Test reports whether the operation has completed, and its error if so.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// Done returns a channel closed when the operation completes.
func (r *Request) Done() <-chan struct{} { return r.done }

func (r *Request) finish(err error) {
	if r.stop != nil {
		r.stop()
	}
	r.err = err
	r.fn = nil
	close(r.done)
	r.c.out.Done()
}

// submit queues an operation. hdr is the frame header template: Kind, Op,
// DType, RedOp, Root and Count; the worker fills in communicator, epoch and
// sequence.
func (c *Communicator) submit(ctx context.Context, name string, hdr transport.Header, fn func(ctx context.Context, p *opPeers) error) *Request {
	return c.enqueue(&Request{c: c, name: name, hdr: hdr, ctx: ctx, fn: fn, done: make(chan struct{})})
}

// enqueue queues r, built by submit or by an operation that sets more of
// it.
func (c *Communicator) enqueue(r *Request) *Request {
	c.out.Add(1)
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		r.finish(&OpError{Rank: c.rank, Op: r.name, Err: ErrClosed})
		return r
	}
	if r.hdr.Kind == transport.KindCollective {
		c.seq++
		r.seq = c.seq
	}
	c.pending = append(c.pending, r)
	if r.ctx.Done() != nil {
		// A request whose context ends while it is queued is withdrawn
		// without starting; once the worker has taken it, withdraw finds
		// nothing to do and the running operation honours ctx itself.
		r.stop = context.AfterFunc(r.ctx, func() { c.withdraw(r) })
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return r
}

// withdraw removes r from the queue if it has not started and completes it
// with its context's error. The collectives queued after it take the
// sequence numbers down by one, so this rank's sequence is the one it would
// have had if r had never been issued.
func (c *Communicator) withdraw(r *Request) {
	c.mu.Lock()
	ok := c.unqueue(r)
	c.mu.Unlock()
	if ok {
		r.finish(r.withdrawn())
	}
}

// unqueue removes r from the pending queue and renumbers the collectives
// after it. It reports whether r was queued. c.mu is held.
func (c *Communicator) unqueue(r *Request) bool {
	i := 0
	for i < len(c.pending) && c.pending[i] != r {
		i++
	}
	if i == len(c.pending) {
		return false
	}
	rest := c.pending[i+1:]
	copy(c.pending[i:], rest)
	c.pending[len(c.pending)-1] = nil
	c.pending = c.pending[:len(c.pending)-1]
	if r.hdr.Kind == transport.KindCollective {
		for _, q := range c.pending[i:] {
			if q.hdr.Kind == transport.KindCollective {
				q.seq--
			}
		}
		c.seq--
	}
	return true
}

// withdrawn is the error of a request whose context ended before it
// started.
func (r *Request) withdrawn() error {
	return &OpError{Rank: r.c.rank, Op: r.name, Err: fmt.Errorf("withdrawn before it started: %w", r.ctx.Err())}
}

// failedRequest returns a completed request carrying err, for arguments
// rejected before anything was queued.
func (c *Communicator) failedRequest(name string, err error) *Request {
	r := &Request{c: c, name: name, done: make(chan struct{})}
	c.out.Add(1)
	r.finish(&OpError{Rank: c.rank, Op: name, Err: err})
	return r
}

func (c *Communicator) worker() {
	defer close(c.stopped)
	for {
		c.mu.Lock()
		var r *Request
		if len(c.pending) > 0 {
			r = c.pending[0]
			if r.ctx.Err() != nil {
				// Its context ended before the withdrawal ran.
				c.unqueue(r)
				c.mu.Unlock()
				r.finish(r.withdrawn())
				continue
			}
			c.pending[0] = nil
			c.pending = c.pending[1:]
		}
		c.mu.Unlock()
		if r == nil {
			select {
			case <-c.wake:
				continue
			case <-c.quit:
				return
			}
		}
		r.finish(c.run(r))
	}
}

// run executes one request on the worker.
func (c *Communicator) run(r *Request) (err error) {
	fp := fingerprint(&r.hdr)
	fp.Target = r.target
	c.hist.begin(r, fp)
	defer func() { c.endOp(err) }()
	if pe := c.failErr.Load(); pe != nil {
		return &OpError{Rank: c.rank, Op: r.name, Seq: r.seq, Err: pe}
	}
	ctx := c.op.get(r.ctx, c.cfg.timeout)
	p := &c.peers
	p.hdr = r.hdr
	p.hdr.Comm = c.id
	p.hdr.Epoch = c.epoch.Load()
	p.hdr.Seq = r.seq
	if r.hdr.Kind == transport.KindCollective {
		c.armWatchdog(r.seq)
		defer c.disarmWatchdog()
	}
	start := time.Now()
	err = r.fn(ctx, p)
	if err == nil {
		if pe := c.failErr.Load(); pe != nil {
			// The operation completed locally, but the communicator
			// failed while it ran: it was pending when the failure came,
			// and pending operations fail, on every rank alike (a peer
			// may not have completed it).
			return &OpError{Rank: c.rank, Op: r.name, Seq: r.seq, Err: pe}
		}
		return nil
	}
	if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrRewire) {
		// Discovered while running (e.g. a group's self send/recv pairing):
		// nothing was sent, the communicator is fine.
		return &OpError{Rank: c.rank, Op: r.name, Seq: r.seq, Err: err}
	}
	return &OpError{Rank: c.rank, Op: r.name, Seq: r.seq, Err: c.classify(ctx, r, err, time.Since(start))}
}

// opContext gives operations whose context has no deadline the
// communicator's default timeout. Deriving a new context for every
// operation would make every connection re-arm its cancellation hook each
// time, so one derived context is shared by the operations that start
// within a short window: each still gets at least the full timeout, and at
// most timeout/64 more.
type opContext struct {
	ctx      context.Context
	cancel   context.CancelFunc
	parent   <-chan struct{}
	deadline time.Time
}

func (o *opContext) get(user context.Context, timeout time.Duration) context.Context {
	if _, ok := user.Deadline(); ok {
		return user
	}
	now := time.Now()
	if o.ctx != nil && o.parent == user.Done() && o.ctx.Err() == nil && !o.deadline.Before(now.Add(timeout)) {
		return o.ctx
	}
	o.release()
	o.deadline = now.Add(timeout + timeout/64)
	o.ctx, o.cancel = context.WithDeadline(user, o.deadline)
	o.parent = user.Done()
	return o.ctx
}

func (o *opContext) release() {
	if o.cancel != nil {
		o.cancel()
		o.ctx, o.cancel = nil, nil
	}
}

// Lost-link grace: how long a rank that lost a connection waits for the
// control plane to say which rank actually failed before it blames the peer
// at the other end of the link.
const lostGrace = 2 * time.Second

// classify turns the error of a failed operation into the communicator's
// failure, shares it with every rank and returns it.
func (c *Communicator) classify(ctx context.Context, r *Request, err error, elapsed time.Duration) *PeerError {
	if pe := c.failErr.Load(); pe != nil {
		return pe
	}
	var le *linkError
	peer := -1
	if errors.As(err, &le) {
		peer = le.peer
	}
	var me *transport.MismatchError
	var fe *transport.FrameError
	var pe *PeerError
	known, isPeerErr := err.(*PeerError)
	switch {
	case isPeerErr:
		// The operation itself found who failed (a rewire's agreement).
		pe = known
	case errors.As(err, &me):
		pe = &PeerError{Peer: -1, Reporter: c.rank, Kind: ErrMismatch, Reason: describeMismatch(c.rank, peer, me)}
	case errors.As(err, &fe):
		pe = &PeerError{Peer: peer, Reporter: c.rank, Kind: ErrPeerFailed, Reason: fmt.Sprintf("sent a %v", fe)}
	case errors.Is(err, context.DeadlineExceeded):
		what := "while"
		if peer >= 0 {
			what = fmt.Sprintf("waiting for rank %d in", peer)
		}
		pe = &PeerError{Peer: -1, Reporter: c.rank, Kind: ErrTimeout,
			Reason: fmt.Sprintf("rank %d timed out after %v %s %s (seq %d)", c.rank, elapsed.Round(time.Millisecond), what, r.name, r.seq)}
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// The caller's context was cancelled. A cancellation with the
		// caller's context alive is a schedule stopping its other halves
		// after a failure, and is classified below by the link it names.
		pe = &PeerError{Peer: c.rank, Reporter: c.rank, Kind: ErrAborted,
			Reason: fmt.Sprintf("cancelled %s (seq %d) while it was running", r.name, r.seq)}
	case peer >= 0:
		// A broken link. The rank at the other end may have died, or may
		// have closed its connections because it learnt of a failure we
		// have not heard of yet: ask the control plane and wait briefly
		// for its verdict before blaming the peer.
		c.ctrl.lost(peer, err)
		t := time.NewTimer(lostGrace)
		defer t.Stop()
		select {
		case <-c.failed:
			return c.failErr.Load()
		case <-t.C:
		}
		pe = &PeerError{Peer: peer, Reporter: c.rank, Kind: ErrPeerFailed, Reason: err.Error()}
	default:
		pe = &PeerError{Peer: -1, Reporter: c.rank, Kind: ErrPeerFailed, Reason: err.Error()}
	}
	c.ctrl.report(pe)
	c.fail(pe)
	return c.failErr.Load()
}

// fail records the communicator's failure (the first one wins), closes its
// connections so that blocked operations return, and makes every later
// operation fail with the same error.
func (c *Communicator) fail(pe *PeerError) {
	c.failOnce.Do(func() {
		// Before any operation can return the failure (they return it
		// once failErr is set), so that a program exiting on it finds
		// the record written.
		c.dumpOnFail(pe)
		c.failErr.Store(pe)
		close(c.failed)
		logx.For(c.log, logx.Coll).Warn("occl: communicator failed", "err", pe)
		c.mu.Lock()
		conns := append([]transport.Conn(nil), c.conns...)
		c.mu.Unlock()
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
		c.writeTrace()
	})
}

// Abort fails the communicator at once: pending and later operations on
// every rank return an error saying this rank aborted. It does not wait
// for anything and is safe to call from any goroutine, repeatedly.
func (c *Communicator) Abort() {
	pe := &PeerError{Peer: c.rank, Reporter: c.rank, Kind: ErrAborted, Reason: "aborted the communicator"}
	if c.failErr.Load() == nil {
		c.ctrl.report(pe)
	}
	c.fail(pe)
	c.shutdown(context.Background(), false)
}

// Close waits for the operations already issued, then releases the
// communicator, telling the other ranks that this rank left cleanly. It
// waits at most the configured timeout. Closing twice is harmless.
func (c *Communicator) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	return c.Destroy(ctx)
}

// Destroy is Close with a context bounding the wait.
func (c *Communicator) Destroy(ctx context.Context) error {
	return c.shutdown(ctx, true)
}

func (c *Communicator) shutdown(ctx context.Context, drain bool) error {
	c.mu.Lock()
	already := c.closing
	c.closing = true
	c.mu.Unlock()
	if already {
		<-c.stopped
		return nil
	}
	var err error
	if drain {
		done := make(chan struct{})
		go func() { c.out.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("occl: rank %d: close: operations still running: %w", c.rank, ctx.Err())
			c.fail(&PeerError{Peer: c.rank, Reporter: c.rank, Kind: ErrAborted, Reason: "closed the communicator with operations still running"})
		}
	}
	if e := c.ctrl.close(ctx, c.failErr.Load() == nil); e != nil && err == nil {
		err = e
	}
	c.quitOnce.Do(func() { close(c.quit) })
	<-c.stopped
	c.op.release()
	c.closeObserver()
	// Anything issued concurrently with Close fails now.
	c.mu.Lock()
	rest := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, r := range rest {
		r.finish(&OpError{Rank: c.rank, Op: r.name, Seq: r.seq, Err: ErrClosed})
	}
	for _, conn := range c.conns {
		if conn != nil {
			conn.Close()
		}
	}
	c.closeRetired()
	if c.emu != nil {
		c.emu.Close()
	}
	c.fabric.release()
	return err
}

// linkError is an I/O error on the connection to one peer.
type linkError struct {
	peer int
	dir  string
	step uint32
	err  error
}

func (e *linkError) Error() string {
	prep := "from"
	if e.dir == "send" {
		prep = "to"
	}
	return fmt.Sprintf("%s step %d %s rank %d: %v", e.dir, e.step, prep, e.peer, e.err)
}

func (e *linkError) Unwrap() error { return e.err }

// opPeers is the algo.Peers view of the communicator for the running
// operation. The worker owns it; it stamps every frame with the operation's
// header.
type opPeers struct {
	c   *Communicator
	hdr transport.Header
}

var _ algo.EagerPeers = (*opPeers)(nil)

func (p *opPeers) Rank() int { return p.c.rank }
func (p *opPeers) Size() int { return p.c.size }

func (p *opPeers) EagerLimit(peer int) int { return p.c.conns[peer].EagerLimit() }

func (p *opPeers) Send(ctx context.Context, peer int, step uint32, buf []byte) error {
	h := p.hdr
	h.Step = step
	p.c.hist.waiting.Store(int32(peer))
	if err := p.c.conns[peer].Send(ctx, h, buf); err != nil {
		return &linkError{peer: peer, dir: "send", step: step, err: err}
	}
	return nil
}

func (p *opPeers) Recv(ctx context.Context, peer int, step uint32, buf []byte) error {
	h := p.hdr
	h.Step = step
	p.c.hist.waiting.Store(int32(peer))
	if err := p.c.conns[peer].Recv(ctx, h, buf); err != nil {
		return &linkError{peer: peer, dir: "recv", step: step, err: err}
	}
	return nil
}

// describeMismatch explains a frame that did not match what this rank
// expected from peer.
func describeMismatch(rank, peer int, me *transport.MismatchError) string {
	g, w := &me.Got, &me.Want
	who := "a peer"
	if peer >= 0 {
		who = fmt.Sprintf("rank %d", peer)
	}
	switch {
	case g.Kind == transport.KindCollective && w.Kind == transport.KindCollective && g.Seq == w.Seq && g.Epoch == w.Epoch:
		return fmt.Sprintf("at seq %d %s called %s but rank %d called %s", w.Seq, who, describeOp(g), rank, describeOp(w))
	case g.Kind == transport.KindP2P && w.Kind == transport.KindP2P:
		return fmt.Sprintf("%s sent %s but rank %d expected to receive %s", who, describeOp(g), rank, describeOp(w))
	}
	return fmt.Sprintf("rank %d received from %s: %v", rank, who, me)
}

func describeOp(h *transport.Header) string {
	if h.Kind == transport.KindP2P {
		return fmt.Sprintf("%d %s elements (message %d)", h.Count, algo.DType(h.DType), h.Seq)
	}
	return describeFingerprint(fingerprint(h))
}

// Algorithm returns the schedule the communicator runs for collective op
// on a buffer of bytes bytes: the forced one where it applies, else the
// cost model's choice when the communicator has a topology, else the
// size-based choice.
func (c *Communicator) Algorithm(op algo.Collective, bytes int) algo.Algorithm {
	if op == algo.OpAllToAll || op == algo.OpAllToAllV {
		return c.AllToAllAlgorithm(algo.UniformBytes(c.size, bytes/c.size))
	}
	return c.choose(c.lay(), op, bytes)
}

// choose is Algorithm on the layout l.
func (c *Communicator) choose(l *layout, op algo.Collective, bytes int) algo.Algorithm {
	return algo.Choose(op, bytes, c.size, l.topo, l.model, c.cfg.algo)
}

// TransportName names the transports the communicator's connections use:
// "tcp", "mem", or several joined with "+" when peers differ.
func (c *Communicator) TransportName() string {
	seen := map[string]bool{}
	var names []string
	c.mu.Lock()
	conns := append([]transport.Conn(nil), c.conns...)
	c.mu.Unlock()
	for _, conn := range conns {
		if conn == nil {
			continue
		}
		n := transport.Name(conn)
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}
