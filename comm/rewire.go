package comm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/occl/occl/algo"
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
//  2. apply and connect, at the same time: rank 0 switches the fabric
//     (Rewire.Apply, typically a call to the OCS controller) while every
//     rank opens new connections, of the next epoch, to the peers whose
//     path changes; rank 0 then broadcasts the outcome of the switch;
//  3. verify: once the circuits are up, a small exchange on every new
//     link; then the ranks agree on the outcome of every step over the
//     old connections (gathered at rank 0, which sends the verdict back),
//     so that every rank sees the same first failure (skipped when the
//     switch failed: its broadcast already told everyone);
//  4. resume: install the new connections, bump the epoch and swap the
//     topology (and the emulated fabric's); the replaced connections are
//     closed by the next rewire, during its switch, or when the
//     communicator closes, so that their peers are not woken as the
//     ranks resume.
//
// If the switch, a connection or a verification fails, every rank returns
// the same *RewireError, rank 0 restores the previous circuits
// (Rewire.Rollback) if the switch had happened, the new connections are
// closed and the communicator keeps working on the previous topology. A
// rank that dies meanwhile, or ranks given different targets, fail the
// communicator as in any operation; rank 0 still restores the previous
// circuits if it had switched.

// ErrRewire is wrapped by every error of a rewire that left the
// communicator working on its previous topology.
var ErrRewire = errors.New("rewire failed; the communicator keeps its previous topology")

// Rewire describes one change of the fabric under a communicator.
type Rewire struct {
	// Target is the topology after the change: the same hosts, ranks and
	// NICs as the current one, other circuits.
	Target *topo.Topology
	// Apply switches the fabric and returns once the new circuits are up.
	// Only rank 0 calls it, while every rank is paused; its error reaches
	// every rank. Nil if there is nothing to switch.
	Apply func(ctx context.Context) error
	// Rollback restores the previous circuits when a step after a
	// successful Apply fails. Only rank 0 calls it. Nil: nothing to undo.
	Rollback func(ctx context.Context) error
	// ApplyTimeout bounds Apply (default: half of what remains of the
	// operation's deadline), so that the ranks still have time to agree
	// on the outcome and keep the communicator when the switch is slow.
	ApplyTimeout time.Duration
	// Switched, if set, waits until another communicator's rewire has
	// switched the fabric (Apply is then nil): a sub-communicator runs
	// its rewire on circuits its parent switched. It runs on the worker,
	// so operations issued after RewireAsync still wait. An error means
	// the switch did not happen: every rank returns a *RewireError of
	// step "switch" carrying it, and nothing changes.
	Switched func(ctx context.Context) error
}

// RewireTimes records how long each step of a rewire took on this rank.
type RewireTimes struct {
	// Pause is the wait from the call to the start: the operations issued
	// before it complete first.
	Pause time.Duration `json:"pause_ns"`
	// Plan is the check of the target and the new schedules.
	Plan time.Duration `json:"plan_ns"`
	// Apply is the switch (rank 0's Apply) and the broadcast of its
	// outcome, as this rank saw it.
	Apply time.Duration `json:"apply_ns"`
	// Connect is the opening of new connections (during Apply).
	Connect time.Duration `json:"connect_ns"`
	// Verify is the exchange on every new link and the agreement on the
	// outcome of every step.
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
	// RolledBack says whether the previous circuits were restored
	// (always false when the failure came before the switch).
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
	// The target's digest is in every message of the rewire, so ranks given
	// different targets fail with ErrMismatch instead of waiting for links
	// their peers will not open.
	req := c.submit(ctx, name, collHeader(algo.OpRewire, 0, 0, 0, int(digest>>1)), func(ctx context.Context, p *opPeers) error {
		times.Pause = time.Since(called)
		err := c.rewire(ctx, p, rw, times)
		times.Total = time.Since(called)
		return err
	})
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

// status is one rank's outcome of a rewire step, exchanged among ranks.
type status struct {
	ok       bool
	rank     int // where it failed
	step     string
	reason   string
	applied  bool // rank 0: the switch happened
	rollback bool // rank 0: and it restores the previous circuits if a later step fails
}

// A status on the wire: ok (byte 0), applied (1), the length of the step
// (2), rollback (3), the length of the reason (4-5), the step (8-23), the
// reason (24 up to the last 4 bytes, truncated) and the failing rank (last
// 4 bytes).
const statusSize = 512

func (s status) encode(b []byte) {
	clear(b)
	if s.ok {
		b[0] = 1
	}
	if s.applied {
		b[1] = 1
	}
	if s.rollback {
		b[3] = 1
	}
	b[2] = byte(copy(b[8:24], s.step))
	binary.LittleEndian.PutUint16(b[4:], uint16(copy(b[24:statusSize-4], s.reason)))
	binary.LittleEndian.PutUint32(b[statusSize-4:], uint32(s.rank))
}

func decodeStatus(b []byte) status {
	n := min(int(b[2]), 16)
	m := min(int(binary.LittleEndian.Uint16(b[4:])), statusSize-28)
	return status{ok: b[0] == 1, applied: b[1] == 1, rollback: b[3] == 1, rank: int(binary.LittleEndian.Uint32(b[statusSize-4:])),
		step: string(b[8 : 8+n]), reason: string(b[24 : 24+m])}
}

// agree gathers every rank's status at rank 0, which sends back the first
// failure in rank order (or success) to every rank: two message hops,
// whatever the number of ranks, so that the pause stays short.
func (c *Communicator) agree(ctx context.Context, p *opPeers, mine status) (*RewireError, error) {
	buf := make([]byte, statusSize)
	mine.encode(buf)
	if c.rank != 0 {
		if err := p.Send(ctx, 0, stepAgree, buf); err != nil {
			return nil, err
		}
	} else {
		all := make([]byte, statusSize*c.size)
		copy(all, buf)
		err := fanIn(ctx, p, stepAgree, func(r int) []byte { return all[r*statusSize : (r+1)*statusSize] })
		if err != nil {
			return nil, err
		}
		verdict := status{ok: true}
		for r := 0; r < c.size; r++ {
			if s := decodeStatus(all[r*statusSize : (r+1)*statusSize]); !s.ok {
				verdict = s
				verdict.rank = r
				break
			}
		}
		verdict.encode(buf)
	}
	if err := starBroadcast(ctx, p, stepVerdict, buf); err != nil {
		return nil, err
	}
	if v := decodeStatus(buf); !v.ok {
		return &RewireError{Rank: v.rank, Step: v.step, Reason: v.reason}, nil
	}
	return nil, nil
}

// Step labels of the rewire's own messages.
const (
	stepSwitched = 1
	stepAgree    = 2
	stepVerdict  = 3
)

// starBroadcast sends buf from rank 0 to every rank directly, all at once.
func starBroadcast(ctx context.Context, p *opPeers, step uint32, buf []byte) error {
	c := p.c
	if c.rank != 0 {
		return p.Recv(ctx, 0, step, buf)
	}
	errs := make(chan error, c.size)
	for r := 1; r < c.size; r++ {
		go func() { errs <- p.Send(ctx, r, step, buf) }()
	}
	var first error
	for r := 1; r < c.size; r++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// fanIn receives one message from every other rank at rank 0, all at once,
// into into(rank).
func fanIn(ctx context.Context, p *opPeers, step uint32, into func(int) []byte) error {
	c := p.c
	errs := make(chan error, c.size)
	for r := 1; r < c.size; r++ {
		go func() { errs <- p.Recv(ctx, r, step, into(r)) }()
	}
	var first error
	for r := 1; r < c.size; r++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// rewire runs the steps on the worker.
func (c *Communicator) rewire(ctx context.Context, p *opPeers, rw Rewire, times *RewireTimes) (err error) {
	// The new links, and another communicator's switch, are not among
	// the things a failure closes: stop waiting on them when the
	// communicator fails.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.failed:
			cancel()
		case <-ctx.Done():
		}
	}()
	if rw.Switched != nil {
		if err := rw.Switched(ctx); err != nil {
			if pe := c.failErr.Load(); pe != nil {
				return pe
			}
			return &RewireError{Rank: -1, Step: "switch", Reason: err.Error(), err: err}
		}
	}
	start := time.Now()
	cur := c.lay()
	epoch := c.epoch.Load() + 1
	// New connections are named by the attempt, not the epoch: a failed
	// attempt's late connections must not be taken for the next one's.
	c.linkGen++
	gen := c.linkGen
	changed, planErr := c.rewirePlan(cur.topo, rw.Target)
	next := newLayout(rw.Target)
	times.Plan = time.Since(start)
	times.Links = len(changed)

	// Apply on rank 0 while every rank connects.
	step := time.Now()
	c.closeRetired()
	var (
		wg       sync.WaitGroup
		applyErr error
		applied  bool
	)
	if c.rank == 0 && planErr == nil && rw.Apply != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := applyContext(ctx, rw.ApplyTimeout)
			defer cancel()
			if applyErr = rw.Apply(actx); applyErr == nil {
				applied = true
			}
		}()
	}
	var conns map[int]transport.Conn
	var connErr, verr error
	if planErr == nil && len(changed) > 0 {
		conns, connErr = c.fabric.connect(ctx, c, gen, changed)
	}
	times.Connect = time.Since(step)
	wg.Wait()
	closeNew := func() {
		for _, conn := range conns {
			conn.Close()
		}
	}
	// Rank 0 tells everyone how the switch went: the new links exist only
	// once it has moved.
	root := status{ok: true, applied: applied, rollback: applied && rw.Rollback != nil}
	switch {
	case planErr != nil:
		root = status{step: "plan", reason: planErr.Error()}
	case applyErr != nil:
		root = status{step: "apply", reason: applyErr.Error()}
	}
	buf := make([]byte, statusSize)
	if c.rank == 0 {
		root.encode(buf)
	}
	if err := starBroadcast(ctx, p, stepSwitched, buf); err != nil {
		// A dead or stuck peer, or ranks given different targets: the
		// communicator fails, and the switch goes back to what it held.
		closeNew()
		if applied {
			c.rollback(rw)
		}
		return err
	}
	root = decodeStatus(buf)
	if root.ok {
		if f := c.fabric.emulator(c); f != nil {
			if e := f.SetTopology(rw.Target); e != nil {
				c.log.Warn("occl: rewire: emulated fabric kept its topology", "err", e)
			}
		}
	}
	times.Apply = time.Since(step)
	if !root.ok {
		// Every rank has rank 0's verdict already: nothing to agree on,
		// and the switch did not happen.
		closeNew()
		f := &RewireError{Rank: 0, Step: root.step, Reason: root.reason}
		if c.rank == 0 {
			f.err = errors.Join(planErr, applyErr)
		}
		return f
	}

	// Verify every new link, then agree on the outcome of every step.
	step = time.Now()
	if connErr == nil && planErr == nil {
		verr = c.verifyLinks(ctx, epoch, conns)
	}
	mine := status{ok: true}
	switch {
	case planErr != nil:
		mine = status{step: "plan", reason: planErr.Error()}
	case connErr != nil:
		mine = status{step: "connect", reason: connErr.Error()}
	case verr != nil:
		mine = status{step: "verify", reason: verr.Error()}
	}
	failed, err := c.agree(ctx, p, mine)
	times.Verify = time.Since(step)
	if err != nil {
		closeNew()
		if applied {
			c.rollback(rw)
		}
		return err
	}
	if failed != nil {
		closeNew()
		if root.applied {
			if f := c.fabric.emulator(c); f != nil {
				f.SetTopology(cur.topo)
			}
			if c.rank == 0 {
				c.rollback(rw)
			}
			// Rank 0's word: only its process may hold the controller.
			failed.RolledBack = root.rollback
		}
		if failed.Rank == c.rank {
			failed.err = errors.Join(planErr, connErr, verr)
		}
		return failed
	}

	// Resume on the new topology.
	step = time.Now()
	c.mu.Lock()
	for r, conn := range conns {
		c.retired = append(c.retired, c.conns[r])
		c.conns[r] = conn
	}
	c.mu.Unlock()
	c.cfg.topology = rw.Target
	c.layout.Store(next)
	c.epoch.Store(epoch)
	times.Resume = time.Since(step)
	c.log.Info("occl: rewired", "epoch", epoch, "links", len(conns), "apply", times.Apply, "verify", times.Verify)
	return nil
}

// testVerifyFailure, set by tests, makes the link check of a rank with new
// links fail after its exchanges, as a wrong answer would.
var testVerifyFailure func(rank int) error

// closeRetired closes the connections the previous rewire replaced.
func (c *Communicator) closeRetired() {
	c.mu.Lock()
	old := c.retired
	c.retired = nil
	c.mu.Unlock()
	for _, conn := range old {
		conn.Close()
	}
}

// rollback restores the circuits the fabric held before rw's switch, on
// rank 0 (the only rank that switched), with a deadline of its own: the
// operation's may be spent.
func (c *Communicator) rollback(rw Rewire) {
	if rw.Rollback == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	if err := rw.Rollback(ctx); err != nil {
		c.log.Warn("occl: rewire: restoring the previous circuits failed", "err", err)
	}
}

// applyContext bounds the switch: by timeout if set, else by half of what
// remains of ctx's deadline.
func applyContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		if d, ok := ctx.Deadline(); ok {
			timeout = time.Until(d) / 2
		}
	}
	if timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
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
	var changed []int
	for r := 0; r < c.size; r++ {
		if r == c.rank || c.hosts[r] == c.hosts[c.rank] {
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
func (c *Communicator) verifyLinks(ctx context.Context, epoch uint32, conns map[int]transport.Conn) error {
	if len(conns) == 0 {
		return nil
	}
	h := transport.Header{Kind: transport.KindCollective, Op: uint8(algo.OpRewire), Comm: c.id, Epoch: epoch, Step: 1}
	errs := make(chan error, len(conns))
	for r, conn := range conns {
		go func() {
			var out, in [8]byte
			binary.LittleEndian.PutUint32(out[:], uint32(c.rank))
			binary.LittleEndian.PutUint32(out[4:], epoch)
			if err := transport.Exchange(ctx, conn, h, out[:], h, in[:]); err != nil {
				errs <- fmt.Errorf("link to rank %d: %w", r, err)
				return
			}
			if got, e := binary.LittleEndian.Uint32(in[:]), binary.LittleEndian.Uint32(in[4:]); int(got) != r || e != epoch {
				errs <- fmt.Errorf("link to rank %d answered as rank %d of epoch %d", r, got, e)
				return
			}
			errs <- nil
		}()
	}
	var msgs []string
	for range conns {
		if err := <-errs; err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if testVerifyFailure != nil {
		if err := testVerifyFailure(c.rank); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) > 0 {
		sort.Strings(msgs)
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}
