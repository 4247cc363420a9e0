package reconfig

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/bounded"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/reconfig/ocspb"
	"github.com/occl/occl/topo"
)

// Controller switches an optical circuit switch to a complete set of
// cross-connects, in the switch's own port numbers, those of the whole
// fabric (Topology.SwitchCircuits), and returns once the circuits are up,
// with the time the switching took. Applying the same request id twice
// must not switch twice. An error wrapping comm.ErrNotSwitched says that
// nothing was switched; after any other error the outcome is unknown, and
// the previous circuits are applied again under ocs.RollbackRequestID of
// the request id. A controller must then refuse the request id if it
// arrives after that rollback (it may have been delayed on its way), as
// the OCS controller does. Its client (OCS) implements the interface.
//
// Every call is bounded by its context (see WithApplyTimeout). A call that
// has not returned when its context ends is abandoned: it counts as a
// failure whose outcome is unknown, and whatever it returns later is
// dropped. An abandoned call may then still run while the next one (the
// restore) is made, so Apply must be safe for concurrent use, and a
// controller should apply requests in the order they are made. A call
// that panics fails as one whose outcome is unknown, not the process.
type Controller interface {
	Apply(ctx context.Context, requestID string, circuits []topo.Circuit) (time.Duration, error)
}

// Ports returns the NIC indices of a topology's OCS ports, in NIC order
// (Topology.SwitchPorts); Topology.SwitchPort gives each one's number on
// the switch, and Topology.SwitchSize the ports a switch needs for them.
func Ports(t *topo.Topology) []int { return t.SwitchPorts() }

// CrossConnects returns the circuits of t as pairs of switch ports (the
// lower port first, sorted): Topology.SwitchCircuits as pairs, for
// comparing with what a switch reports.
func CrossConnects(t *topo.Topology) ([][2]int, error) {
	cs, err := t.SwitchCircuits()
	if err != nil {
		return nil, err
	}
	out := make([][2]int, len(cs))
	for i, c := range cs {
		out[i] = [2]int{c.A, c.B}
	}
	return out, nil
}

// Result is what a reconfiguration took.
type Result struct {
	// Times are the step times of every communicator, in the order given.
	Times []comm.RewireTimes
	// Switch is the switching time the controller reported (0 in a
	// process that did not call it).
	Switch time.Duration
	// RequestID is the id the switch was applied under.
	RequestID string
	// Joined are the spare's communicators that a Recover with WithSpare
	// made in this process (in-process communicators, on the survivors'
	// rank 0), with their reconfigurations' outcomes.
	Joined []Joined
	// Spare is the plan a Recover with WithSpare carried out, on every
	// survivor (and in JoinSpare), once the spare's ranks joined: which
	// host they replaced and which ranks went on. It is set when the
	// reconfiguration after the grow failed too (the returned
	// communicator includes the spare's ranks), and nil when no spare
	// joined: none was given, no rank was lost, or the plan or the grow
	// failed. Over TCP it is how a survivor learns that the spare came in.
	Spare *SparePlan
}

// Overhead is the runtime's own time for communicator i: the whole
// reconfiguration minus the switching time.
func (r Result) Overhead(i int) time.Duration {
	return max(r.Times[i].Total-r.Switch, 0)
}

// Option configures a reconfiguration.
type Option func(*options)

type options struct {
	ctl          Controller
	id           string
	applyTimeout time.Duration
	spare        *Spare // Recover only
}

// WithController sets the controller that switches the circuits. Without
// one the fabric is assumed to be switched already (or emulated only), and
// only the communicators are rewired.
func WithController(c Controller) Option { return func(o *options) { o.ctl = c } }

// WithRequestID sets the request id the switch is applied under. By
// default it is made of the job nonce of the communicator that spans the
// fabric (random, agreed at bootstrap), how many reconfigurations this
// process has started on it and the target's circuits: all processes of a
// job agree on it, and no other job or reconfiguration uses it, so the
// controller's replay of a repeated request never returns another job's
// result. An id given here must be just as unique, and short enough for
// its rollback's (ocs.RollbackRequestID) to be a valid request id.
func WithRequestID(id string) Option { return func(o *options) { o.id = id } }

// WithApplyTimeout bounds each controller call below half of what remains
// of the context's deadline, the bound without it: a call gets the smaller
// of d and that half, and rank 0 goes on by then even if the controller
// does not answer (Controller), keeping the other half for the restore
// of the previous circuits after a failure and for the ranks to agree on
// the outcome (comm.Rewire.ApplyTimeout). Without a deadline on the
// context, d alone bounds the calls.
func WithApplyTimeout(d time.Duration) Option { return func(o *options) { o.applyTimeout = d } }

// Handle is a reconfiguration in progress.
type Handle struct {
	reqs []*comm.RewireRequest
	done chan struct{}
	res  Result
	err  error
	sw   *switchTime
}

type switchTime struct {
	mu sync.Mutex
	d  time.Duration
}

// Done is closed when every communicator has finished.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait waits for the reconfiguration and returns its result. The error is
// the first communicator's failure; every rank of a communicator gets the
// same one.
func (h *Handle) Wait(ctx context.Context) (Result, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		select {
		case <-h.done: // finished as ctx ended: its outcome is known
		default:
			return Result{}, fmt.Errorf("reconfig: wait: %w", ctx.Err())
		}
	}
	return h.res, h.err
}

// Reconfigure rewires the communicators to target and returns when they
// run on it. It is collective: every rank of every communicator calls it
// with the same target. comms are this process's communicators that use
// the fabric (all ranks of them for in-process communicators): the ones
// Init or NewLocal made, whose topology is the fabric's and whose rewire
// switches it, and any sub-communicators made from them by Split, which
// are rewired onto their part of target once the switch is done. A
// communicator made by Shrink spans the survivors' fabric: given a target
// of as many ranks as it has (rank i of the target being its rank i, as in
// topo.Topology.Without's survivors' topology), it switches it like one
// made by Init, and the communicators split from it are rewired onto
// their part of that target. Such a target has only the survivors' OCS
// ports, which keep the whole fabric's switch ports (topo.NIC.SwitchPort):
// the controller is asked for those.
func Reconfigure(ctx context.Context, comms []*comm.Communicator, target *topo.Topology, opts ...Option) (Result, error) {
	return ReconfigureAsync(ctx, comms, target, opts...).Wait(ctx)
}

// ReconfigureAsync starts Reconfigure and returns at once, so that the
// switch overlaps with computation. Operations issued on the communicators
// afterwards run once the reconfiguration is done.
//
// The communicators that span the fabric are rewired together: rank 0 of
// each calls the controller (under one request id, so the switch happens
// once). Every sub-communicator queues its rewire at once, so that its
// later operations wait too, and runs it when this process's spanning
// communicators have switched: it opens the new connections among its own
// ranks, checks them and agrees on the outcome, without calling the
// controller. If the switch fails, every communicator keeps its topology
// and returns an error wrapping comm.ErrRewire. A sub-communicator whose
// own rewire fails after the switch keeps its previous topology (its
// ranks all get the same error, the others do not fail): on a real fabric
// its paths over circuits that are gone then fail like broken links, so
// reconfigure again or split again. A communicator given twice is an
// error, as are sub-communicators without one that spans the fabric.
func ReconfigureAsync(ctx context.Context, comms []*comm.Communicator, target *topo.Topology, opts ...Option) *Handle {
	var o options
	for _, f := range opts {
		f(&o)
	}
	h := &Handle{done: make(chan struct{}), sw: &switchTime{}}
	fail := func(err error) *Handle {
		h.err = err
		close(h.done)
		return h
	}
	if len(comms) == 0 {
		return fail(fmt.Errorf("reconfig: no communicators"))
	}
	if target == nil {
		return fail(fmt.Errorf("reconfig: no target topology"))
	}
	// Before Subset and SwitchCircuits, which index the target as given.
	if err := target.Validate(); err != nil {
		return fail(fmt.Errorf("reconfig: target: %w", err))
	}
	if o.id != "" {
		// The restore's id must be usable too.
		if err := ocspb.ValidateRequestID(ocs.RollbackRequestID(o.id)); err != nil {
			return fail(fmt.Errorf("reconfig: request id %q: with %q appended for its rollback: %w", o.id, ocs.RollbackSuffix, err))
		}
	}
	for i, c := range comms {
		if c == nil {
			return fail(fmt.Errorf("reconfig: communicator %d of %d is nil", i, len(comms)))
		}
		if slices.Index(comms, c) != i {
			return fail(fmt.Errorf("reconfig: communicator %016x is given twice", c.ID()))
		}
	}
	connects, err := target.SwitchCircuits()
	if err != nil {
		return fail(fmt.Errorf("reconfig: target: %w", err))
	}
	// Which communicators switch the fabric, and the others' targets.
	spans := make([]bool, len(comms))
	parts := make([]*topo.Topology, len(comms))
	first := -1
	// A communicator made by Shrink numbers the survivors' fabric: the
	// fabric ranks of those split from it are renumbered so.
	var survivor map[int]int
	for _, c := range comms {
		if fr := c.FabricRanks(); c.Shrinks() > 0 && len(fr) == len(target.Ranks) {
			survivor = make(map[int]int, len(fr))
			for r, f := range fr {
				survivor[f] = r
			}
			break
		}
	}
	for i, c := range comms {
		fr := c.FabricRanks()
		spans[i] = len(fr) == len(target.Ranks)
		if spans[i] && c.Shrinks() > 0 {
			// The survivors' fabric, numbered as the communicator.
			parts[i] = target
			if first < 0 {
				first = i
			}
			continue
		}
		for r, f := range fr {
			if survivor != nil {
				s, ok := survivor[f]
				if !ok {
					return fail(fmt.Errorf("reconfig: communicator %016x: its rank %d is rank %d of the fabric, which the shrunk communicator does not have",
						c.ID(), r, f))
				}
				fr[r], f = s, s
			}
			if f < 0 || f >= len(target.Ranks) {
				return fail(fmt.Errorf("reconfig: communicator %016x: its rank %d is rank %d of the fabric; the target has %d ranks",
					c.ID(), r, f, len(target.Ranks)))
			}
			spans[i] = spans[i] && f == r
		}
		if spans[i] {
			parts[i] = target
			if first < 0 {
				first = i
			}
		} else {
			parts[i] = target.Subset(fr)
		}
	}
	if first < 0 {
		return fail(fmt.Errorf("reconfig: none of the %d communicators spans the fabric's %d ranks: pass the one Init made with its sub-communicators",
			len(comms), len(target.Ranks)))
	}
	id := o.id
	if id == "" {
		id = requestID(comms[first], connects)
	}
	h.res.RequestID = id
	var apply func(context.Context) error
	rollbackOf := func(*comm.Communicator) func(context.Context) error { return nil }
	if o.ctl != nil {
		// Every controller call ends by the reconfiguration's deadline,
		// the restore's too (which the communicator runs even after ctx
		// is cancelled, until that deadline at most).
		deadline, hasDeadline := ctx.Deadline()
		call := func(ctx context.Context, id string, circuits []topo.Circuit) (time.Duration, error) {
			var cancel context.CancelFunc
			if hasDeadline {
				ctx, cancel = context.WithDeadline(ctx, deadline)
			} else {
				ctx, cancel = context.WithCancel(ctx)
			}
			// Also tells an abandoned call to stop.
			defer cancel()
			return callController(ctx, func(ctx context.Context) (time.Duration, error) {
				return o.ctl.Apply(ctx, id, circuits)
			})
		}
		apply = func(ctx context.Context) error {
			d, err := call(ctx, id, connects)
			if err != nil {
				return fmt.Errorf("controller apply %s: %w", id, err)
			}
			h.sw.mu.Lock()
			h.sw.d = d
			h.sw.mu.Unlock()
			return nil
		}
		// The previous circuits are those c runs on when its rewire rolls
		// back (it has not resumed yet), not those of the time of this
		// call: a reconfiguration queued behind another one restores the
		// earlier one's circuits.
		rollbackOf = func(c *comm.Communicator) func(context.Context) error {
			return func(ctx context.Context) error {
				var previous []topo.Circuit
				if prev := c.Topology(); prev != nil {
					var err error
					if previous, err = prev.SwitchCircuits(); err != nil {
						return fmt.Errorf("current topology: %w", err)
					}
				}
				_, err := call(ctx, ocs.RollbackRequestID(id), previous)
				return err
			}
		}
	}
	switched := make(chan struct{})
	var switchErr error
	waitSwitch := func(ctx context.Context) error {
		select {
		case <-switched:
			return switchErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.reqs = make([]*comm.RewireRequest, len(comms))
	for i, c := range comms {
		if spans[i] {
			h.reqs[i] = c.RewireAsync(ctx, comm.Rewire{Target: target, Apply: apply, Rollback: rollbackOf(c), ApplyTimeout: o.applyTimeout})
		}
	}
	for i, c := range comms {
		if !spans[i] {
			h.reqs[i] = c.RewireAsync(ctx, comm.Rewire{Target: parts[i], Switched: waitSwitch})
		}
	}
	go func() {
		defer close(h.done)
		for i, r := range h.reqs {
			if spans[i] {
				if _, err := r.Wait(context.Background()); err != nil && switchErr == nil {
					switchErr = err
				}
			}
		}
		close(switched)
		h.err = switchErr
		for _, r := range h.reqs {
			t, err := r.Wait(context.Background())
			h.res.Times = append(h.res.Times, t)
			if err != nil && h.err == nil {
				h.err = err
			}
		}
		h.sw.mu.Lock()
		h.res.Switch = h.sw.d
		h.sw.mu.Unlock()
	}()
	return h
}

// callController runs call (one request to the controller) under ctx on a
// goroutine of its own and returns its answer, or, once ctx has ended
// without one, an error whose outcome is unknown (bounded.ErrAbandoned,
// not comm.ErrNotSwitched): a call that ignores its context is abandoned
// then, and its late answer is dropped, never written anywhere. When ctx
// has ended already, nothing is asked, and the error wraps
// comm.ErrNotSwitched.
func callController(ctx context.Context, call func(context.Context) (time.Duration, error)) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%w: not asked, no time was left (%w)", comm.ErrNotSwitched, err)
	}
	return bounded.Call(ctx, "the controller call", call)
}

// issued counts the reconfigurations started per communicator in this
// process, by job nonce. Every process of a job starts them in the same
// order, so the count names the same reconfiguration everywhere.
var issued struct {
	mu sync.Mutex
	n  map[[16]byte]uint64
}

// requestID names a switch request after what every process of the job
// agrees on and no other job shares: the communicator's job nonce, how
// many reconfigurations it has started, and the circuits.
func requestID(c *comm.Communicator, connects []topo.Circuit) string {
	nonce := c.JobNonce()
	issued.mu.Lock()
	if issued.n == nil {
		issued.n = map[[16]byte]uint64{}
	}
	issued.n[nonce]++
	n := issued.n[nonce]
	issued.mu.Unlock()
	s := sha256.New()
	for _, cc := range connects {
		binary.Write(s, binary.LittleEndian, [2]int64{int64(cc.A), int64(cc.B)})
	}
	return fmt.Sprintf("%x-%d-%x", nonce, n, s.Sum(nil)[:6])
}
