package comm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

const rewireBase = "hosts=4x2,nics=host,ocs_ports=2,hbd=8GB/s,eps=1GB/s,ocs=1GB/s"

func mustTopo(t *testing.T, spec string) *topo.Topology {
	t.Helper()
	top, err := topo.FromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// TestRewire rewires live communicators back and forth between circuit
// layouts, with collectives checked before, between and after, and the
// schedules following the new topology.
func TestRewire(t *testing.T) {
	for _, emulate := range []bool{false, true} {
		t.Run(fmt.Sprintf("emulate=%v", emulate), func(t *testing.T) {
			base := mustTopo(t, rewireBase)
			targets := []*topo.Topology{
				mustTopo(t, rewireBase+",circuits=0-1/0-1/2-3/2-3"),
				mustTopo(t, rewireBase+",circuits=0-1/1-2/2-3/0-3"),
				base,
			}
			var applies, links atomic.Int32
			requireOK(t, runLocal(t, 8, func(ctx context.Context, c *comm.Communicator) error {
				k := checker{ctx: ctx, c: c}
				for i, target := range targets {
					// Queued before the rewire: must complete first.
					x := []float32{float32(c.Rank())}
					req := c.AllReduceAsync(ctx, comm.Slice(x), comm.Slice(x), comm.Sum)
					times, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: func(context.Context) error {
						applies.Add(1)
						return nil
					}})
					if err != nil {
						return err
					}
					if err := req.Wait(ctx); err != nil || x[0] != 28 {
						return fmt.Errorf("allreduce queued before the rewire: %v %v", x, err)
					}
					if c.Epoch() != uint32(i+1) {
						return fmt.Errorf("epoch %d after %d rewires", c.Epoch(), i+1)
					}
					if len(c.Topology().Circuits) != len(target.Circuits) {
						return fmt.Errorf("topology has %d circuits, want %d", len(c.Topology().Circuits), len(target.Circuits))
					}
					want := algo.AlgoDelegated
					if len(target.Circuits) == 0 {
						want = algo.AlgoPairwise
					}
					if err := allToAllChecks(ctx, c, want); err != nil {
						return fmt.Errorf("after rewire %d: %w", i, err)
					}
					if err := k.allReduce(comm.Float32, comm.Sum, 1031, false); err != nil {
						return err
					}
					if times.Total <= 0 || times.Total < times.Apply || times.Links < 0 {
						return fmt.Errorf("times %+v", times)
					}
					links.Add(int32(times.Links))
				}
				return nil
			}, comm.WithTopology(base), comm.WithEmulation(emulate)))
			if applies.Load() != 3 {
				t.Fatalf("Apply called %d times, want once per rewire", applies.Load())
			}
			// Circuits appear and go: links change in every step (each
			// replaced link is counted by both of its ranks).
			if n := links.Load(); n == 0 || n%2 != 0 {
				t.Fatalf("%d links replaced", n)
			}
		})
	}
}

// TestRewireFailures checks that a failed switch or an impossible target
// gives every rank the same error and leaves the communicator working on
// its previous topology, and that a successful switch is rolled back when
// a later step fails.
func TestRewireFailures(t *testing.T) {
	base := mustTopo(t, rewireBase)
	target := mustTopo(t, rewireBase+",circuits=0-1/2-3")
	var mu sync.Mutex
	msgs := map[string]int{}
	requireOK(t, runLocal(t, 8, func(ctx context.Context, c *comm.Communicator) error {
		_, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: func(context.Context) error {
			return errors.New("switch port 3 failed")
		}})
		var re *comm.RewireError
		if !errors.As(err, &re) || !errors.Is(err, comm.ErrRewire) || re.Step != "apply" || re.Rank != 0 || re.RolledBack {
			return fmt.Errorf("failed apply: %v", err)
		}
		mu.Lock()
		msgs[re.Error()]++
		mu.Unlock()
		if c.Epoch() != 0 || len(c.Topology().Circuits) != 0 || c.Err() != nil {
			return fmt.Errorf("after a failed rewire: epoch %d, %d circuits, %v", c.Epoch(), len(c.Topology().Circuits), c.Err())
		}
		if err := allToAllChecks(ctx, c, algo.AlgoPairwise); err != nil {
			return err
		}
		// A target that does not fit: every rank rejects it in the plan.
		bad := mustTopo(t, "hosts=2x4,nics=host,ocs_ports=2,circuits=0-1")
		if _, err := c.Rewire(ctx, comm.Rewire{Target: bad}); !errors.Is(err, comm.ErrRewire) {
			return fmt.Errorf("mismatched target: %v", err)
		}
		// A controller slower than its deadline.
		_, err = c.Rewire(ctx, comm.Rewire{Target: target, ApplyTimeout: 20e6, Apply: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}})
		if !errors.As(err, &re) || re.Step != "apply" {
			return fmt.Errorf("slow controller: %v", err)
		}
		if c.Err() != nil {
			return c.Err()
		}
		return c.Barrier(ctx)
	}, comm.WithTopology(base)))
	if len(msgs) != 1 {
		t.Fatalf("ranks saw different errors: %v", msgs)
	}
}
