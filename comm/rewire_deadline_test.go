package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
)

// A rewire of 3 ranks, one per host, whose target puts a circuit between
// hosts 0 and 1.
const rewireSmall = "hosts=3x1,nics=host,ocs_ports=2,hbd=8GB/s,eps=1GB/s,ocs=1GB/s"

// rewireSlack is how long past the caller's deadline a rank may take to
// return: generous, so that a slow machine does not fail the tests; a
// rank that waits for an Apply or Rollback ignoring its context takes
// for ever, or ApplyTimeout.
const rewireSlack = 5 * time.Second

// ignoringContext returns a func that ignores its context and blocks
// until the test ends (then it returns an error nobody may see), and
// counts its calls in n.
func ignoringContext(t *testing.T, n *atomic.Int32) func(context.Context) error {
	release := make(chan struct{})
	// Registered after the communicators' Close (commtest.Local), so it
	// runs before it: nothing is left blocked on this.
	t.Cleanup(func() { close(release) })
	return func(context.Context) error {
		n.Add(1)
		<-release
		return errors.New("late answer, to be dropped")
	}
}

// rewireByDeadline calls Rewire on every rank of comms at once with a
// context whose deadline is d from now, rw(rank) giving each rank's
// Rewire, and returns every rank's error. It fails t at once unless every
// rank has returned within d plus rewireSlack.
func rewireByDeadline(t *testing.T, comms []*comm.Communicator, d time.Duration, rw func(rank int) comm.Rewire) (time.Time, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	type result struct {
		rank int
		err  error
	}
	results := make(chan result, len(comms)) // never blocks a late rank
	for r, c := range comms {
		go func() {
			_, err := c.Rewire(ctx, rw(r))
			results <- result{r, err}
		}()
	}
	errs := make([]error, len(comms))
	returned := make([]bool, len(comms))
	timer := time.NewTimer(d + rewireSlack)
	defer timer.Stop()
	for range comms {
		select {
		case res := <-results:
			errs[res.rank], returned[res.rank] = res.err, true
		case <-timer.C:
			var late []int
			for r, ok := range returned {
				if !ok {
					late = append(late, r)
				}
			}
			t.Fatalf("ranks %v have not returned from Rewire %v after its deadline of %v (errors so far: %v)", late, rewireSlack, d, errs)
		}
	}
	return deadline, errs
}

// requireRewireErrors checks that every rank returned the same
// *RewireError of rank 0's step "apply", saying what did not return by its
// deadline, and that the communicators still work on their previous
// topology.
func requireRewireErrors(t *testing.T, comms []*comm.Communicator, errs []error, what string, rolledBack bool) {
	t.Helper()
	var seen errorTexts
	for r, err := range errs {
		var re *comm.RewireError
		if !errors.As(err, &re) || !errors.Is(err, comm.ErrRewire) {
			t.Fatalf("rank %d: %v, want a *RewireError", r, err)
		}
		if re.Step != "apply" || re.Rank != 0 || re.RolledBack != rolledBack {
			t.Fatalf("rank %d: step %q on rank %d, RolledBack %v; want apply on rank 0, %v: %v", r, re.Step, re.Rank, re.RolledBack, rolledBack, err)
		}
		if !strings.Contains(re.Reason, what) || !strings.Contains(re.Reason, "did not return by its deadline") ||
			!strings.Contains(re.Reason, "unknown") {
			t.Fatalf("rank %d: the reason does not say %s did not return by its deadline, outcome unknown: %v", r, what, err)
		}
		seen.add(re)
	}
	seen.requireOne(t)
	requireKeptAndUsable(t, comms)
}

// TestRewireAbandonsApplyIgnoringContext: an Apply that ignores its
// context is abandoned at the deadline of that context (half of what is
// left of the caller's, or ApplyTimeout) instead of holding rank 0, and
// with it every rank, for ever: every rank returns the same *RewireError,
// saying Apply did not return by its deadline, in time; since the switch
// may have happened, rank 0 restores the previous circuits, and the
// communicator keeps working.
func TestRewireAbandonsApplyIgnoringContext(t *testing.T) {
	base := mustTopo(t, rewireSmall)
	target := mustTopo(t, rewireSmall+",circuits=0-1")
	for _, applyTimeout := range []time.Duration{0, 200 * time.Millisecond} {
		t.Run(fmt.Sprintf("ApplyTimeout=%v", applyTimeout), func(t *testing.T) {
			comms := commtest.Local(t, 3, comm.WithTopology(base))
			var applies, restores atomic.Int32
			apply := ignoringContext(t, &applies)
			_, errs := rewireByDeadline(t, comms, time.Second, func(rank int) comm.Rewire {
				rw := comm.Rewire{Target: target, ApplyTimeout: applyTimeout}
				if rank == 0 {
					rw.Apply = apply
					rw.Rollback = func(context.Context) error { restores.Add(1); return nil }
				}
				return rw
			})
			requireRewireErrors(t, comms, errs, "Rewire.Apply", true)
			if !errors.Is(errs[0], context.DeadlineExceeded) || errors.Is(errs[0], comm.ErrNotSwitched) {
				t.Fatalf("rank 0: %v, want the cause, Apply's deadline, whose outcome is unknown", errs[0])
			}
			if applies.Load() != 1 || restores.Load() != 1 {
				t.Fatalf("switched %d times, restored %d times; want 1 and 1", applies.Load(), restores.Load())
			}
		})
	}
}

// TestRewireAbandonsRollbackIgnoringContext: a Rollback that ignores its
// context does not hold rank 0 past the caller's deadline either: it is
// abandoned, the verdict says the restore failed (the fabric's state is
// unknown), and every rank returns it in time.
func TestRewireAbandonsRollbackIgnoringContext(t *testing.T) {
	base := mustTopo(t, rewireSmall)
	target := mustTopo(t, rewireSmall+",circuits=0-1")
	comms := commtest.Local(t, 3, comm.WithTopology(base))
	var restores atomic.Int32
	rollback := ignoringContext(t, &restores)
	_, errs := rewireByDeadline(t, comms, time.Second, func(rank int) comm.Rewire {
		rw := comm.Rewire{Target: target}
		if rank == 0 {
			// Unknown outcome: rank 0 restores the previous circuits.
			rw.Apply = func(context.Context) error { return errors.New("controller unreachable") }
			rw.Rollback = rollback
		}
		return rw
	})
	requireRewireErrors(t, comms, errs, "Rewire.Rollback", false)
	if restores.Load() != 1 {
		t.Fatalf("restored %d times, want once", restores.Load())
	}
}

// TestRewireSwitchLeavesHalfTheDeadline: Apply and Rollback get at most
// half of what remains of the caller's deadline, however long ApplyTimeout
// is, so that a slow switch or restore that honours its context still
// leaves the ranks time to agree: every rank returns the same
// *RewireError, before the deadline, and the communicator keeps working.
func TestRewireSwitchLeavesHalfTheDeadline(t *testing.T) {
	base := mustTopo(t, rewireSmall)
	target := mustTopo(t, rewireSmall+",circuits=0-1")
	// slow blocks until ctx ends and records ctx's deadline.
	slow := func(dl *time.Time, n *atomic.Int32) func(context.Context) error {
		return func(ctx context.Context) error {
			*dl, _ = ctx.Deadline()
			n.Add(1)
			<-ctx.Done()
			return ctx.Err()
		}
	}
	for _, tc := range []struct {
		name       string
		slowApply  bool
		rolledBack bool
	}{
		{"slow Apply", true, true},
		{"slow Rollback", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := commtest.Local(t, 3, comm.WithTopology(base))
			var (
				dl       time.Time // of the slow call
				applies  atomic.Int32
				restores atomic.Int32
			)
			const d = 2 * time.Second
			callerDL, errs := rewireByDeadline(t, comms, d, func(rank int) comm.Rewire {
				rw := comm.Rewire{Target: target, ApplyTimeout: 30 * time.Second}
				if rank != 0 {
					return rw
				}
				if tc.slowApply {
					rw.Apply = slow(&dl, &applies)
					rw.Rollback = func(context.Context) error { restores.Add(1); return nil }
				} else {
					// Unknown outcome: rank 0 restores the previous circuits.
					rw.Apply = func(context.Context) error { applies.Add(1); return errors.New("controller unreachable") }
					rw.Rollback = slow(&dl, &restores)
				}
				return rw
			})
			if applies.Load() != 1 || restores.Load() != 1 {
				t.Fatalf("switched %d times, restored %d times; want 1 and 1", applies.Load(), restores.Load())
			}
			// Called at most a few milliseconds after the start, the slow
			// call had about half of the 2 s.
			if left := callerDL.Sub(dl); left < d/4 {
				t.Fatalf("the slow call's deadline left %v of the caller's, want about %v", left, d/2)
			}
			var seen errorTexts
			for r, err := range errs {
				var re *comm.RewireError
				if !errors.As(err, &re) || !errors.Is(err, comm.ErrRewire) {
					t.Fatalf("rank %d: %v, want a *RewireError", r, err)
				}
				if re.Step != "apply" || re.Rank != 0 || re.RolledBack != tc.rolledBack {
					t.Fatalf("rank %d: step %q on rank %d, RolledBack %v; want apply on rank 0, %v: %v", r, re.Step, re.Rank, re.RolledBack, tc.rolledBack, err)
				}
				seen.add(re)
			}
			seen.requireOne(t)
			requireKeptAndUsable(t, comms)
		})
	}
}

// requireKeptAndUsable checks that every communicator of comms still runs
// on its first topology and that they run a collective together.
func requireKeptAndUsable(t *testing.T, comms []*comm.Communicator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	commtest.OnEach(t, comms, func(_ int, c *comm.Communicator) error {
		if err := keptTopology(c); err != nil {
			return err
		}
		return c.Barrier(ctx)
	})
}
