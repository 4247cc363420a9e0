// Package comm is occl's public API: communicators created by rendezvous,
// and every collective and point-to-point operation on them.
//
// A Communicator is a group of ranks, usually one per process. Create one
// with Init (a UniqueID shared by all ranks, like ncclCommInitRank),
// InitFromEnv (under torchrun, mpirun or Slurm) or NewLocal (all ranks in
// this process, for tests). Operations are queued in issue order and run one
// at a time, like work on a CUDA stream; every blocking method has an Async
// form that returns a Request. Split makes sub-communicators; Grow makes a
// communicator of c's ranks and processes that Join it (a spare replacing
// a failed rank, or more ranks for a running job).
//
// Failures are shared: when a rank dies, hangs, aborts, times out or calls a
// collective that does not match the others', every rank's pending and later
// operations fail with the same *PeerError, within a few seconds and never
// by hanging. A failed communicator cannot be used again: close it and make
// a new one, or let the survivors Shrink it into one without the failed
// ranks.
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
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/shm"
)

// Communicator is one rank's handle on a group of ranks. Its methods are
// safe for concurrent use; operations run in the order they were issued.
type Communicator struct {
	placement // who and where; never changes
	cfg       config
	log       *slog.Logger
	// tune logs the choice of schedules (subsystem TUNE); tuneNever
	// says it never logs them (logx.Never).
	tune      *slog.Logger
	tuneNever bool
	epoch     atomic.Uint32 // topology epoch, bumped by every rewire
	// shrinks counts the Shrinks that led to this communicator;
	// shrinking says Shrink was called on it.
	shrinks   int32
	shrinking atomic.Bool

	links  linkSet                // connections to the peers (links.go)
	linker linker                 // opens new links: rewire, Split (bootstrap.go, local.go)
	layout atomic.Pointer[layout] // topology, cost model, host groups, routes (topology.go)

	queue  opQueue     // operations issued, and the worker's life (queue.go)
	worker workerState // what only the worker touches (worker.go)

	ctrl    controlPlane // failures agreed by every rank (control.go)
	failure *failure     // healthy, or failed for good (failure.go)
	hist    opHistory    // recent operations: probes, flight record (flight.go)
	obs     observer     // timeline and flight-record settings (observe.go)
	watch   watchdog     // asks for a probe when a collective stalls (probe.go)
	traffic monitor      // all-to-all bytes by tag (traffic.go)
}

// newCommunicator assembles a communicator from what a bootstrap produced
// and starts its worker.
func newCommunicator(pl placement, conns []transport.Conn, ctrl controlPlane, lk linker, cfg config) *Communicator {
	c := &Communicator{
		placement: pl,
		cfg:       cfg,
		log:       cfg.log.With("rank", pl.rank, "size", pl.size, "comm", pl.logID()),
		ctrl:      ctrl,
		linker:    lk,
	}
	if c.cfg.cpus == 0 {
		c.cfg.cpus = runtime.GOMAXPROCS(0)
	}
	c.links.set(conns)
	c.failure = newFailure(c.dumpOnFail, c.onFail)
	c.tune = logx.For(c.log, logx.Tune)
	c.tuneNever = logx.Never(c.tune, slog.LevelDebug)
	c.queue.init()
	c.worker.p2pTx = make([]uint64, pl.size)
	c.worker.p2pRx = make([]uint64, pl.size)
	c.worker.peers.c = c
	c.setupModel()
	c.setupObserver()
	if pl.rank == 0 {
		c.logSettings()
	}
	go c.serve()
	return c
}

// Epoch returns the current topology epoch.
func (c *Communicator) Epoch() uint32 { return c.epoch.Load() }

// Err returns the error that failed the communicator, or nil while it is
// healthy (like ncclCommGetAsyncError).
func (c *Communicator) Err() error {
	if pe := c.failure.err(); pe != nil {
		return pe
	}
	return nil
}

// Abort fails the communicator at once: pending and later operations on
// every rank return an error saying this rank aborted. It does not wait
// for anything and is safe to call from any goroutine, repeatedly.
func (c *Communicator) Abort() {
	pe := &PeerError{Peer: c.rank, Reporter: c.rank, Kind: ErrAborted, Reason: "aborted the communicator"}
	if c.failure.err() == nil {
		c.ctrl.report(pe)
	}
	c.fail(pe)
	c.shutdown(context.Background(), false)
}

// closedErr is the error of a call refused because the communicator is
// closed: ErrClosed, and the failure that ended it if one did (an Abort,
// a dead peer), so that errors.Is finds ErrAborted or ErrPeerFailed as on
// the other ranks.
func (c *Communicator) closedErr() error {
	if pe := c.failure.err(); pe != nil {
		return fmt.Errorf("%w: %w", ErrClosed, pe)
	}
	return ErrClosed
}

// Close waits for the operations already issued, then releases the
// communicator, telling the other ranks that this rank left cleanly. It
// waits at most the configured timeout. Closing twice is harmless. When
// Close returns, the communicator's connections are closed and the
// staging buffers of its operations released (left to the garbage
// collector), even if the communicator itself is still referenced.
func (c *Communicator) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	return c.Destroy(ctx)
}

// Destroy is Close with a context bounding the wait.
func (c *Communicator) Destroy(ctx context.Context) error {
	return c.shutdown(ctx, true)
}

// shutdown closes the queue, waits for the operations issued (if drain),
// and releases everything. A second call returns nil: at once without
// drain (Abort, Shrink), else (Close or Destroy after an Abort, Close
// twice, from any goroutines) once the first has finished, so that the
// connections are closed when it returns, or with an error when ctx ends
// first.
func (c *Communicator) shutdown(ctx context.Context, drain bool) error {
	if c.queue.close() {
		if !drain {
			return nil // Abort and Shrink wait for nothing; the first call finishes
		}
		select {
		case <-c.queue.shut:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("occl: rank %d: close: waiting for the communicator's first close: %w", c.rank, ctx.Err())
		}
	}
	defer close(c.queue.shut)
	var err error
	if drain {
		if e := c.queue.idle(ctx); e != nil {
			err = fmt.Errorf("occl: rank %d: close: operations still running: %w", c.rank, e)
			c.fail(&PeerError{Peer: c.rank, Reporter: c.rank, Kind: ErrAborted, Reason: "closed the communicator with operations still running"})
		}
	}
	if e := c.ctrl.close(ctx, c.failure.err() == nil); e != nil && err == nil {
		err = e
	}
	c.queue.stop()
	c.worker.op.release()
	// Nothing runs on the worker any more: its staging buffers go now,
	// not when the last reference to the communicator does (an
	// application may keep a closed communicator).
	c.worker.ws = algo.Workspace{}
	c.stopWatchdog()
	c.closeObserver()
	// Anything issued concurrently with Close fails now.
	for _, r := range c.queue.drain() {
		r.finish(&OpError{Rank: c.rank, Op: r.name, Seq: r.seq, Err: c.closedErr()})
	}
	c.links.closeAll()
	c.linker.release()
	return err
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

// choose is Algorithm on the layout l. With a cost model the choice is
// remembered per operation and size: a training step repeats the same
// collectives on the same buffers, and the model's comparison of every
// schedule costs far more than the small operations it chooses for.
func (c *Communicator) choose(l *layout, op algo.Collective, bytes int) algo.Algorithm {
	if l.model == nil {
		return algo.Choose(op, bytes, c.size, l.topo, l.model, c.cfg.algo)
	}
	return l.choices.get(op, bytes, func() algo.Algorithm {
		return algo.Choose(op, bytes, c.size, l.topo, l.model, c.cfg.algo)
	})
}

// SingleCopy reports how many (on) of the communicator's shared-memory
// connections move lent messages with one copy, out of the sender's
// memory, both ways (cross-memory attach: process_vm_readv, or a mapping
// of the sender's buffer from occl's allocator), of how many
// shared-memory connections it has (of). Fewer means single copies were
// turned off (OCCL_SHM_CMA=off) or the system refused them (Yama's
// ptrace_scope 2 or 3, a seccomp filter, peers in another pid namespace):
// those connections pass every message through the rings, two copies.
func (c *Communicator) SingleCopy() (on, of int) {
	for _, conn := range c.links.snapshot() {
		sc, ok := conn.(*shm.Conn)
		if !ok {
			continue
		}
		of++
		if send, recv := sc.CMA(); send && recv {
			on++
		}
	}
	return on, of
}

// singleCopyOff returns why single copies are off with the first peer
// whose shared-memory connection has none (see SingleCopy), naming the
// peer; "" where every one has them.
func (c *Communicator) singleCopyOff() string {
	for peer, conn := range c.links.snapshot() {
		if sc, ok := conn.(*shm.Conn); ok {
			if err := sc.CMAOff(); err != nil {
				return fmt.Sprintf("rank %d: %v", peer, err)
			}
		}
	}
	return ""
}

// TransportName names the transports the communicator's connections use:
// "tcp", "mem", or several joined with "+" when peers differ.
func (c *Communicator) TransportName() string {
	seen := map[string]bool{}
	var names []string
	for _, conn := range c.links.snapshot() {
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
