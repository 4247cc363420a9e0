package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
)

// TestRewireRollbackWhenOutcomeUnknown: a controller that switches but
// answers after the switch's deadline may have switched, so rank 0 restores
// the previous circuits, and RolledBack says whether that restore
// succeeded; a definite refusal (ErrNotSwitched) is not undone. Every rank
// gets the same error and keeps the previous topology.
func TestRewireRollbackWhenOutcomeUnknown(t *testing.T) {
	base := mustTopo(t, rewireBase)
	target := mustTopo(t, rewireBase+",circuits=0-1/2-3")
	// lateSwitch switches, then answers only after its deadline.
	lateSwitch := func(switched *atomic.Int32) func(context.Context) error {
		return func(ctx context.Context) error {
			switched.Add(1)
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond)
			return ctx.Err()
		}
	}
	cases := []struct {
		name        string
		apply       func(*atomic.Int32) func(context.Context) error
		restoreErr  error
		linkFailure bool
		restores    int32
		rolledBack  bool
	}{
		{name: "late answer, restored", apply: lateSwitch, restores: 1, rolledBack: true},
		{name: "late answer, restore fails", apply: lateSwitch, restoreErr: errors.New("controller unreachable"), restores: 1},
		{name: "link fails, restore fails", linkFailure: true, restoreErr: errors.New("controller unreachable"), restores: 1,
			apply: func(s *atomic.Int32) func(context.Context) error {
				return func(context.Context) error { s.Add(1); return nil }
			}},
		{name: "definite refusal", restores: 0,
			apply: func(s *atomic.Int32) func(context.Context) error {
				return func(context.Context) error { return fmt.Errorf("port 3 is drained: %w", comm.ErrNotSwitched) }
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var switched, restores atomic.Int32
			var seen errorTexts
			requireOK(t, runLocal(t, 8, func(ctx context.Context, c *comm.Communicator) error {
				rw := comm.Rewire{Target: target, ApplyTimeout: 200 * time.Millisecond}
				if tc.linkFailure {
					rw = comm.WithLinkFailure(rw, func(rank int, s string) error {
						if rank == 2 && s == "verify" {
							return errors.New("injected: no light on the new circuit")
						}
						return nil
					})
				}
				if c.Rank() == 0 {
					rw.Apply = tc.apply(&switched)
					rw.Rollback = func(context.Context) error { restores.Add(1); return tc.restoreErr }
				}
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				_, err := c.Rewire(rctx, rw)
				var re *comm.RewireError
				if !errors.As(err, &re) || !errors.Is(err, comm.ErrRewire) {
					return fmt.Errorf("rewire: %v, want a RewireError", err)
				}
				if re.RolledBack != tc.rolledBack {
					return fmt.Errorf("RolledBack %v, want %v: %v", re.RolledBack, tc.rolledBack, err)
				}
				if tc.restoreErr != nil && !strings.Contains(re.Reason, "unreachable") {
					return fmt.Errorf("the failed restore is not in the shared reason: %v", err)
				}
				seen.add(re)
				if err := keptTopology(c); err != nil {
					return err
				}
				return allToAllChecks(ctx, c, algo.AlgoPairwise)
			}, comm.WithTopology(base)))
			seen.requireOne(t)
			if restores.Load() != tc.restores {
				t.Fatalf("restored %d times, want %d", restores.Load(), tc.restores)
			}
		})
	}
}
