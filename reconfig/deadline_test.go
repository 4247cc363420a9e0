package reconfig_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
)

// stuckController never answers a request before the test ends. With
// ignoreContext it does not look at its context either (as a controller
// blocked in a call without a deadline would); otherwise it returns the
// context's error once the context ends, as an unreachable controller
// does. It records the request ids it was given.
type stuckController struct {
	ignoreContext bool
	release       chan struct{}
	mu            sync.Mutex
	calls         []string
}

// newStuckController returns a stuckController that answers once the
// test ends. Made after the communicators, it is released before they
// are closed, so that a communicator still waiting for it can close.
func newStuckController(t *testing.T, ignoreContext bool) *stuckController {
	s := &stuckController{ignoreContext: ignoreContext, release: make(chan struct{})}
	t.Cleanup(func() { close(s.release) })
	return s
}

func (s *stuckController) Apply(ctx context.Context, id string, _ []topo.Circuit) (time.Duration, error) {
	s.mu.Lock()
	s.calls = append(s.calls, id)
	s.mu.Unlock()
	if s.ignoreContext {
		<-s.release
		return 0, errors.New("released as the test ends")
	}
	select {
	case <-s.release:
		return 0, errors.New("released as the test ends")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (s *stuckController) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// checkAbandoned checks rank r's error from a reconfiguration whose
// controller never answered: a *comm.RewireError of the apply step on
// rank 0, wrapping comm.ErrRewire, whose previous circuits were not
// restored (the restore did not answer either); on rank 0 the cause is
// there and says the outcome is unknown (it does not wrap
// comm.ErrNotSwitched).
func checkAbandoned(r int, err error) error {
	var re *comm.RewireError
	if !errors.As(err, &re) || re.Step != "apply" || re.Rank != 0 || !errors.Is(err, comm.ErrRewire) || re.RolledBack {
		return fmt.Errorf("%v, want a RewireError of rank 0's apply step, not rolled back", err)
	}
	if r == 0 && (errors.Is(err, comm.ErrNotSwitched) || !strings.Contains(err.Error(), "outcome is unknown")) {
		return fmt.Errorf("%v, want an unknown outcome", err)
	}
	return nil
}

// TestReconfigureControllerIgnoresContext: the controller's Apply never
// returns and ignores its context. Rank 0 stops waiting for it once the
// call's time is up (ApplyTimeout, or by default half of what is left of
// the context's deadline), takes the outcome as unknown and tries to
// restore the previous circuits (which does not answer either), and every
// rank returns the same RewireError before the context's deadline. The
// communicators keep working on their topology, and an AllReduce adds up.
func TestReconfigureControllerIgnoresContext(t *testing.T) {
	for _, tc := range []struct {
		name         string
		applyTimeout time.Duration
		deadline     time.Duration
	}{
		{"apply_timeout", 300 * time.Millisecond, 15 * time.Second},
		{"default_timeout", 0, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := commtest.Local(t, 8, comm.WithTopology(spec(t, base)), comm.WithEmulation(true))
			ctl := newStuckController(t, true)
			target := spec(t, base+",circuits=0-1/2-3")
			opts := []reconfig.Option{reconfig.WithController(ctl)}
			if tc.applyTimeout > 0 {
				opts = append(opts, reconfig.WithApplyTimeout(tc.applyTimeout))
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			commtest.OnEach(t, comms, func(r int, c *comm.Communicator) error {
				_, err := reconfig.Reconfigure(ctx, []*comm.Communicator{c}, target, opts...)
				if took := time.Since(start); took >= tc.deadline {
					return fmt.Errorf("returned after %v, past the deadline of %v: %v", took, tc.deadline, err)
				}
				return checkAbandoned(r, err)
			})
			if calls := ctl.requests(); len(calls) != 2 || calls[1] != ocs.RollbackRequestID(calls[0]) {
				t.Fatalf("controller asked for %v, want the switch then its restore", calls)
			}
			actx, acancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer acancel()
			commtest.OnEach(t, comms, func(r int, c *comm.Communicator) error {
				if c.Epoch() != 0 || c.Err() != nil {
					return fmt.Errorf("epoch %d, %v", c.Epoch(), c.Err())
				}
				return sumIs(actx, c, int64(r), 28)
			})
		})
	}
}

// TestRecoverControllerIgnoresContext: the same controller under Recover
// after host 1 failed. Every survivor returns before the deadline with a
// communicator of the six survivors, still on its part of the old fabric,
// and the same RewireError; an AllReduce on it adds up.
func TestRecoverControllerIgnoresContext(t *testing.T) {
	_, comms, surv := hostOneFailed(t)
	kept := surv.Ranks
	recovered := make([]*comm.Communicator, len(kept))
	// Before the controller's release, so that it runs after it.
	t.Cleanup(func() {
		for _, c := range recovered {
			if c != nil {
				c.Close()
			}
		}
	})
	ctl := newStuckController(t, true)
	const deadline = 20 * time.Second
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	commtest.OnEach(t, recovered, func(i int, _ *comm.Communicator) error {
		var err error
		recovered[i], _, err = reconfig.Recover(ctx, comms[kept[i]], nil, reconfig.WithController(ctl), reconfig.WithApplyTimeout(300*time.Millisecond))
		if took := time.Since(start); took >= deadline {
			return fmt.Errorf("returned after %v, past the deadline of %v: %v", took, deadline, err)
		}
		if recovered[i] == nil {
			return fmt.Errorf("no communicator: %v", err)
		}
		return checkAbandoned(i, err)
	})
	actx, acancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer acancel()
	commtest.OnEach(t, recovered, func(r int, c *comm.Communicator) error {
		return sumsSurvivors(actx, c, kept[r], len(kept))
	})
}

// TestApplyTimeoutPastDeadline: an ApplyTimeout of a minute under a
// context of two seconds, with a controller that answers neither the
// switch nor the restore before its context ends. No controller call
// outlives the context's deadline, so every rank's reconfiguration is
// over, with an error, within a few seconds of it, rank 0's included.
func TestApplyTimeoutPastDeadline(t *testing.T) {
	comms := commtest.Local(t, 8, comm.WithTopology(spec(t, base)), comm.WithEmulation(true))
	ctl := newStuckController(t, false)
	target := spec(t, base+",circuits=0-1/2-3")
	const deadline = 2 * time.Second
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	handles := make([]*reconfig.Handle, len(comms))
	for r, c := range comms {
		handles[r] = reconfig.ReconfigureAsync(ctx, []*comm.Communicator{c}, target,
			reconfig.WithController(ctl), reconfig.WithApplyTimeout(time.Minute))
	}
	const slack = 5 * time.Second
	late := time.After(deadline + slack)
	for r, h := range handles {
		select {
		case <-h.Done():
		case <-late:
			t.Fatalf("rank %d is still reconfiguring %v after the context's deadline of %v (controller asked for %v)", r, slack, deadline, ctl.requests())
		}
		if _, err := h.Wait(context.Background()); err == nil {
			t.Errorf("rank %d: no error", r)
		}
	}
	t.Logf("all done %v after the start; controller asked for %v", time.Since(start), ctl.requests())
}
