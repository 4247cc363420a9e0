package comm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/internal/bounded"
	"github.com/occl/occl/internal/logx"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
)

// Pause, rewire, resume
//
// A rewire is an operation in the communicator's ordered queue, so it runs
// at an operation boundary: everything issued before it completes first,
// everything issued after it waits (nothing is dropped). Every rank calls
// it with the same target. On each rank:
//
//  1. plan: check the target against the current topology and find the
//     peers whose direct path changes (class, NICs or speed); build the
//     cost model, schedules and delegation tables of the target;
//  2. switch, connect and verify, at the same time: rank 0 switches the
//     fabric (Rewire.Apply, typically a call to the OCS controller) while
//     every rank opens new connections, of this attempt, to the peers whose
//     path changes and checks each with a small exchange in which both ends
//     name their rank and the new epoch. A link is checked as the fabric
//     carries it during the switch: on circuits that carry traffic only
//     once they are up, the check ends after the switch; on the emulated
//     fabric, the target's paths apply from the resume on;
//  3. agree: each rank sends its outcome to rank 0, which sends back one
//     verdict once its switch has returned (see rewire_verdict.go), so
//     that every rank sees the same failure, or success. When the links
//     are ready before the switch returns, the verdict is the only
//     message after it;
//  4. resume: install the new connections, bump the epoch and swap the
//     topology (and the emulated fabric's); the replaced connections are
//     closed by the next rewire, during its switch, or when the
//     communicator closes, so that their peers are not woken as the
//     ranks resume.
//
// If the switch, a connection or a verification fails, every rank returns
// the same *RewireError, the new connections are closed and the
// communicator keeps working on the previous topology. Unless the switch
// definitely did not happen (Apply succeeded, or failed with an error that
// does not wrap ErrNotSwitched: a controller that timed out or became
// unreachable may have switched), rank 0 restores the previous circuits
// (Rewire.Rollback) before it sends the verdict, and the verdict says
// whether the restore succeeded. Neither Apply nor Rollback is waited for
// past its deadline (half of what remains of the caller's, or a shorter
// ApplyTimeout): one that ignores
// its context is abandoned then, as a switch or restore whose outcome is
// unknown, and its late answer is dropped. A rank that dies meanwhile, or
// ranks given different targets, fail the communicator as in any
// operation; rank 0 still restores the previous circuits unless nothing
// was switched.

// ErrRewire is wrapped by every error of a rewire that left the
// communicator working on its previous topology.
var ErrRewire = errors.New("rewire failed; the communicator keeps its previous topology")

// ErrNotSwitched is wrapped by an error of Rewire.Apply that is a definite
// answer that nothing was switched (the controller refused the target, or
// undid a partial switch itself). Any other error of Apply leaves the
// outcome unknown, and rank 0 restores the previous circuits.
var ErrNotSwitched = errors.New("the fabric was not switched")

// Rewire describes one change of the fabric under a communicator.
type Rewire struct {
	// Target is the topology after the change: the same hosts, ranks and
	// NICs as the current one (OCS ports with the same numbers on the
	// switch, topo.Topology.SwitchPort), other circuits.
	Target *topo.Topology
	// Apply switches the fabric and returns once the new circuits are up.
	// Only rank 0 calls it, while every rank is paused; its error reaches
	// every rank. An error wrapping ErrNotSwitched says nothing changed;
	// any other error may have left the fabric switched. Nil if there is
	// nothing to switch.
	//
	// Apply must honour ctx, whose deadline is half of what remains of
	// the caller's, or ApplyTimeout if that is shorter (see
	// ApplyTimeout). An Apply that has not returned by then is
	// abandoned, never waited for: the rewire fails
	// as if Apply had returned an error saying it did not return by its
	// deadline, whose outcome is unknown (the fabric's state is unknown:
	// rank 0 restores the previous circuits), and its late answer is
	// dropped. When ctx has ended before the switch, Apply is not called
	// and the error wraps ErrNotSwitched.
	Apply func(ctx context.Context) error
	// Rollback restores the previous circuits when a step after Apply
	// fails, or Apply failed without saying nothing was switched. It must
	// be idempotent. Only rank 0 calls it, bounded like Apply (by half of
	// what remains of the caller's deadline, or a shorter ApplyTimeout),
	// even when the communicator has failed meanwhile. Like Apply, it
	// must honour ctx: one that has not
	// returned by ctx's deadline is abandoned, its late answer dropped,
	// and the rewire reports the restore as failed (RolledBack false: the
	// fabric's state is unknown). When no time is left, it is not called.
	// Nil: nothing to undo.
	Rollback func(ctx context.Context) error
	// ApplyTimeout bounds Apply, and Rollback, below half of what remains
	// of the operation's deadline (which bounds them where ApplyTimeout is
	// 0 or longer), so that the ranks keep the other half to agree on the
	// outcome and keep the communicator when the switch is slow. Without a
	// deadline on the operation's context, ApplyTimeout alone bounds them
	// (Rollback: the communicator's timeout if it is 0).
	ApplyTimeout time.Duration
	// Switched, if set, waits until another communicator's rewire has
	// switched the fabric (Apply is then nil): a sub-communicator runs
	// its rewire on circuits its parent switched. It runs on the worker,
	// so operations issued after RewireAsync still wait. An error means
	// the switch did not happen: every rank returns a *RewireError of
	// step "switch" carrying it, and nothing changes. It must honour ctx:
	// one that has not returned by the operation's deadline is abandoned
	// with such an error.
	Switched func(ctx context.Context) error

	// linkFailure, set only by tests, makes step ("connect" or "verify")
	// of a rank with new links fail with the error it returns: a failed
	// connect opens nothing (its peers are left waiting for it), a failed
	// verify happens after its exchanges, as a wrong answer would.
	linkFailure func(rank int, step string) error
}

// RewireTimes records how long each step of a rewire took on this rank.
type RewireTimes struct {
	// Pause is the wait from the call to the start: the operations issued
	// before it complete first.
	Pause time.Duration `json:"pause_ns"`
	// Plan is the check of the target and the new schedules.
	Plan time.Duration `json:"plan_ns"`
	// Apply is the switch (rank 0's Apply) until this rank has the
	// verdict: it includes Connect and Verify, which run during the
	// switch, and the agreement on the outcome.
	Apply time.Duration `json:"apply_ns"`
	// Connect is the opening of new connections (during Apply).
	Connect time.Duration `json:"connect_ns"`
	// Verify is the exchange on every new link (during Apply, after
	// Connect).
	Verify time.Duration `json:"verify_ns"`
	// Resume is the swap of connections, epoch and topology.
	Resume time.Duration `json:"resume_ns"`
	// Total is the time from the call to the end.
	Total time.Duration `json:"total_ns"`
	// Links is the number of connections this rank replaced.
	Links int `json:"links"`
}

// RewireError is the error every rank returns when a rewire fails without
// failing the communicator. It wraps ErrRewire and, on the rank where it
// happened, the cause.
type RewireError struct {
	// Rank is the rank where the step failed.
	Rank int
	// Step is "plan", "apply", "connect" or "verify"; "switch" when the
	// fabric was to be switched by another communicator (Rewire.Switched)
	// and was not, Rank being then -1.
	Step string
	// Reason describes the failure, the same text on every rank.
	Reason string
	// RolledBack says whether rank 0 restored the previous circuits and
	// the restore succeeded. It is false when nothing was switched, and
	// false when the restore failed (the fabric may then hold the target's
	// circuits, or a mix).
	RolledBack bool
	err        error
}

func (e *RewireError) Error() string {
	s := fmt.Sprintf("occl: rewire: %s failed on rank %d: %s", e.Step, e.Rank, e.Reason)
	if e.Rank < 0 {
		s = fmt.Sprintf("occl: rewire: %s failed: %s", e.Step, e.Reason)
	}
	if e.RolledBack {
		s += " (previous circuits restored)"
	}
	return s
}

// Unwrap returns ErrRewire and the cause, if this rank saw it.
func (e *RewireError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrRewire, e.err}
	}
	return []error{ErrRewire}
}

// RewireRequest is a rewire in progress.
type RewireRequest struct {
	req   *Request
	times *RewireTimes
}

// Wait waits for the rewire and returns its step times.
func (r *RewireRequest) Wait(ctx context.Context) (RewireTimes, error) {
	err := r.req.Wait(ctx)
	if err != nil {
		return RewireTimes{}, err
	}
	return *r.times, nil
}

// Done is closed when the rewire has finished.
func (r *RewireRequest) Done() <-chan struct{} { return r.req.Done() }

// Rewire pauses the communicator at an operation boundary, switches the
// fabric to rw.Target and resumes on it. Every rank calls it with the same
// target: ranks given different ones fail with ErrMismatch, which fails the
// communicator as any mismatched collective does. See RewireAsync.
func (c *Communicator) Rewire(ctx context.Context, rw Rewire) (RewireTimes, error) {
	return c.RewireAsync(ctx, rw).Wait(ctx)
}

// RewireAsync queues a rewire and returns at once: it runs once the
// operations issued before it have completed, and operations issued after
// it wait for it. The caller can compute meanwhile (an MoE layer's expert
// computation hides the switching time).
func (c *Communicator) RewireAsync(ctx context.Context, rw Rewire) *RewireRequest {
	const name = "Rewire"
	times := &RewireTimes{}
	if rw.Target == nil {
		return &RewireRequest{req: c.failedRequest(name, invalidf("rewire without a target topology")), times: times}
	}
	if err := rw.Target.Validate(); err != nil {
		return &RewireRequest{req: c.failedRequest(name, invalidf("rewire target: %v", err)), times: times}
	}
	digest, err := targetDigest(rw.Target)
	if err != nil {
		return &RewireRequest{req: c.failedRequest(name, invalidf("rewire target: %v", err)), times: times}
	}
	called := time.Now()
	// The target's digest is in the rewire's fingerprint and in its
	// statuses and verdict, so ranks given different targets fail with
	// ErrMismatch (from a probe, if they wait for links their peers will
	// not open) instead of timing out.
	req := c.issue(&Request{c: c, name: name, hdr: collHeader(algo.OpRewire, 0, 0, 0, 0), target: digest, ctx: ctx,
		fn: callOp, args: opArgs{call: func(ctx context.Context, p *opPeers) error {
			times.Pause = time.Since(called)
			err := c.rewire(ctx, p, rw, digest, times)
			times.Total = time.Since(called)
			c.traceRewire(called, times)
			return err
		}}})
	return &RewireRequest{req: req, times: times}
}

// targetDigest is a 64-bit FNV-1a hash of the target's JSON form.
func targetDigest(t *topo.Topology) (uint64, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64(), nil
}

// rewire runs the steps on the worker.
func (c *Communicator) rewire(ctx context.Context, p *opPeers, rw Rewire, digest uint64, times *RewireTimes) error {
	// The new links, and another communicator's switch, are not among
	// the things a failure closes: stop waiting on them when the
	// communicator fails.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.failure.done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if rw.Switched != nil {
		if err := bounded.Err(ctx, "Rewire.Switched", rw.Switched); err != nil {
			if pe := c.failure.err(); pe != nil {
				return pe
			}
			return &RewireError{Rank: -1, Step: "switch", Reason: err.Error(), err: err}
		}
	}
	start := time.Now()
	cur := c.lay()
	epoch := c.epoch.Load() + 1
	gen := c.links.nextGen()
	changed, planErr := c.rewirePlan(cur.topo, rw.Target)
	next := newLayout(rw.Target)
	times.Plan = time.Since(start)
	times.Links = len(changed)

	// Switch on rank 0 while every rank opens and checks its new links,
	// then agree on the outcome.
	step := time.Now()
	c.links.closeRetired()
	var sw *switchRun
	if c.rank == 0 && planErr == nil && rw.Apply != nil {
		sw = startSwitch(ctx, rw)
	}
	linkCtx, stopLinks := context.WithCancel(ctx)
	defer stopLinks()
	links := make(chan newLinks, 1)
	go func() { links <- c.openLinks(linkCtx, epoch, gen, changed, planErr, rw.linkFailure) }()
	var (
		mine    newLinks
		verdict outcome
		err     error
	)
	if c.rank == 0 {
		mine, verdict, err = c.decide(ctx, p, rw, digest, sw, planErr, links, stopLinks)
	} else {
		mine, verdict, err = c.awaitVerdict(ctx, p, digest, links, stopLinks)
	}
	times.Apply = time.Since(step)
	times.Connect, times.Verify = mine.connect, mine.verify
	if err != nil {
		// A dead or stuck peer, or ranks given different targets: the
		// communicator fails, and the switch goes back to what it held.
		// Rank 0's verdictRoot waited for the switch and restored the
		// previous circuits unless nothing was switched.
		mine.close()
		return err
	}
	if !verdict.ok {
		mine.close()
		// Rank 0's word for RolledBack: only its process may hold the
		// controller, and it restored the circuits before the verdict.
		f := &RewireError{Rank: verdict.rank, Step: verdict.step, Reason: verdict.reason, RolledBack: verdict.rollback}
		switch {
		case verdict.rank != c.rank:
		case verdict.step == "apply":
			f.err = sw.err
		default:
			f.err = mine.err
		}
		return f
	}

	// Resume on the new topology.
	step = time.Now()
	if f := c.linker.emulator(); f != nil {
		if e := f.SetTopology(rw.Target); e != nil {
			logx.For(c.log, logx.Rewire).Warn("occl: rewire: emulated fabric kept its topology", "err", e)
		}
	}
	c.links.replace(mine.conns)
	c.cfg.topology = rw.Target
	c.layout.Store(next)
	c.epoch.Store(epoch)
	times.Resume = time.Since(step)
	logx.For(c.log, logx.Rewire).Info("occl: rewired", "epoch", epoch, "links", len(mine.conns), "apply", times.Apply, "verify", times.Verify)
	return nil
}

// openLinks opens this rank's new connections and checks each with a small
// exchange; its outcome says which step failed (plan if planErr is set).
// On failure the connections are still open: the caller closes them once
// the verdict is known, so that a peer's check fails for its own reason.
// injected, if set, makes a step fail (see Rewire.linkFailure).
func (c *Communicator) openLinks(ctx context.Context, epoch, gen uint32, changed []int, planErr error,
	injected func(rank int, step string) error) newLinks {
	l := newLinks{outcome: outcome{ok: true}}
	if planErr != nil {
		l.outcome, l.err = failedOutcome("plan", planErr), planErr
		return l
	}
	if len(changed) == 0 {
		return l
	}
	step := time.Now()
	var conns map[int]transport.Conn
	var err error
	if injected != nil {
		err = injected(c.rank, "connect")
	}
	if err == nil {
		conns, err = c.linker.connect(ctx, c, gen, changed)
	}
	l.connect = time.Since(step)
	if err != nil {
		l.outcome, l.err = failedOutcome("connect", err), err
		return l
	}
	l.conns = conns
	step = time.Now()
	err = c.verifyLinks(ctx, epoch, conns, injected)
	l.verify = time.Since(step)
	if err != nil {
		l.outcome, l.err = failedOutcome("verify", err), err
	}
	return l
}

// rollback restores the circuits the fabric held before rw's switch, on
// rank 0 (the only rank that switched). It is bounded like Apply (see
// switchTimeout), by ctx's deadline, the caller's: it runs even when ctx
// has been cancelled (the communicator failed), but a Rollback that has not
// returned by then is abandoned (see bounded.Call), and none is called when
// no time is left. Without a deadline on ctx, it is bounded by
// rw.ApplyTimeout or the communicator's timeout.
func (c *Communicator) rollback(ctx context.Context, rw Rewire) error {
	if rw.Rollback == nil {
		return errors.New("no way to restore the previous circuits")
	}
	d, ok := switchTimeout(ctx, rw.ApplyTimeout)
	if !ok {
		d = c.cfg.timeout
	}
	end := time.Now().Add(d)
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(end) {
		end = deadline
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end)
	defer cancel()
	if err := rctx.Err(); err != nil {
		return fmt.Errorf("restore the previous circuits: Rewire.Rollback not called, no time was left before the deadline (%w)", err)
	}
	if err := bounded.Err(rctx, "Rewire.Rollback", rw.Rollback); err != nil {
		return fmt.Errorf("restore the previous circuits: %w", err)
	}
	return nil
}

// applyContext bounds the switch (see switchTimeout).
func applyContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := switchTimeout(ctx, timeout); ok {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// switchTimeout returns how long Apply, or Rollback, may take: half of
// what remains of ctx's deadline, or timeout (Rewire.ApplyTimeout) if it
// is set and shorter, so that the ranks keep the other half to agree on
// the outcome; timeout alone where ctx has no deadline. ok is false where
// neither bounds it.
func switchTimeout(ctx context.Context, timeout time.Duration) (d time.Duration, ok bool) {
	if deadline, has := ctx.Deadline(); has {
		half := max(time.Until(deadline)/2, 0)
		if timeout > 0 && timeout < half {
			return timeout, true
		}
		return half, true
	}
	return timeout, timeout > 0
}

// rewirePlan checks the target against the current topology and returns
// the peers of this rank whose direct path changes.
func (c *Communicator) rewirePlan(cur, next *topo.Topology) ([]int, error) {
	if cur == nil {
		return nil, fmt.Errorf("the communicator has no topology to rewire (set OCCL_TOPO or WithTopology)")
	}
	if len(next.Ranks) != len(cur.Ranks) || len(next.Hosts) != len(cur.Hosts) || len(next.NICs) != len(cur.NICs) {
		return nil, fmt.Errorf("target has %d hosts, %d ranks and %d NICs; the fabric has %d, %d and %d",
			len(next.Hosts), len(next.Ranks), len(next.NICs), len(cur.Hosts), len(cur.Ranks), len(cur.NICs))
	}
	for r := range next.Ranks {
		if next.Ranks[r].Host != cur.Ranks[r].Host {
			return nil, fmt.Errorf("target puts rank %d on host %d, the fabric on host %d", r, next.Ranks[r].Host, cur.Ranks[r].Host)
		}
	}
	// The controller switches the target's circuits by their ports'
	// numbers on the switch: a target that numbers them otherwise would
	// switch other ports than the ones its circuits name here.
	for i := range next.NICs {
		if p, q := next.SwitchPort(i), cur.SwitchPort(i); p != q {
			return nil, fmt.Errorf("target numbers NIC %d as switch port %d, the fabric as %d", i, p, q)
		}
	}
	var changed []int
	for r := 0; r < c.size; r++ {
		if r == c.rank || c.sameHost(r) {
			continue
		}
		if cur.Path(c.rank, r) != next.Path(c.rank, r) || cur.Path(r, c.rank) != next.Path(r, c.rank) {
			changed = append(changed, r)
		}
	}
	sort.Ints(changed)
	return changed, nil
}

// verifyLinks sends a small frame on every new link and checks the peer's.
func (c *Communicator) verifyLinks(ctx context.Context, epoch uint32, conns map[int]transport.Conn,
	injected func(rank int, step string) error) error {
	if len(conns) == 0 {
		return nil
	}
	h := transport.Header{Kind: transport.KindCollective, Op: uint8(algo.OpRewire), Comm: c.id, Epoch: epoch, Step: 1}
	errs := make(chan error, len(conns))
	out := (&wire.Msg{Type: wire.LinkCheck, Rank: c.rank, Epoch: epoch}).AppendFrame(nil, linkCheckSize)
	for r, conn := range conns {
		go func() {
			in := make([]byte, linkCheckSize)
			if err := transport.Exchange(ctx, conn, h, out, h, in); err != nil {
				errs <- fmt.Errorf("link to rank %d: %w", r, err)
				return
			}
			m, err := wire.DecodeFrame(in)
			switch {
			case err != nil:
				errs <- fmt.Errorf("link to rank %d answered with %w", r, err)
			case m.Type != wire.LinkCheck:
				errs <- fmt.Errorf("link to rank %d answered with a message of type %d", r, m.Type)
			case m.Rank != r || m.Epoch != epoch:
				errs <- fmt.Errorf("link to rank %d answered as rank %d of epoch %d", r, m.Rank, m.Epoch)
			default:
				errs <- nil
			}
		}()
	}
	var msgs []string
	for range conns {
		if err := <-errs; err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if injected != nil {
		if err := injected(c.rank, "verify"); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) > 0 {
		sort.Strings(msgs)
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}
