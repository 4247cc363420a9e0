package comm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/bench/launch"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
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
					if times.Total < times.Pause+times.Plan+times.Apply+times.Resume || times.Apply < times.Connect+times.Verify {
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
	var seen errorTexts
	requireOK(t, runLocal(t, 8, func(ctx context.Context, c *comm.Communicator) error {
		_, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: func(context.Context) error {
			return errors.New("switch port 3 failed")
		}})
		var re *comm.RewireError
		if !errors.As(err, &re) || !errors.Is(err, comm.ErrRewire) || re.Step != "apply" || re.Rank != 0 || re.RolledBack {
			return fmt.Errorf("failed apply: %v", err)
		}
		seen.add(re)
		if err := keptTopology(c); err != nil {
			return err
		}
		if err := allToAllChecks(ctx, c, algo.AlgoPairwise); err != nil {
			return err
		}
		// A target that does not fit: every rank rejects it in the plan.
		bad := mustTopo(t, "hosts=2x4,nics=host,ocs_ports=2,circuits=0-1")
		if _, err := c.Rewire(ctx, comm.Rewire{Target: bad}); !errors.Is(err, comm.ErrRewire) {
			return fmt.Errorf("mismatched target: %v", err)
		}
		// A target whose OCS ports are other ports of the switch: the
		// controller would switch ports the fabric does not have here.
		renumbered := mustTopo(t, rewireBase+",circuits=0-1/2-3,switch_ports=8-15")
		_, err = c.Rewire(ctx, comm.Rewire{Target: renumbered, Apply: func(context.Context) error {
			return errors.New("switched a renumbered target")
		}})
		if !errors.Is(err, comm.ErrRewire) || !strings.Contains(err.Error(), "switch port 8, the fabric as 0") {
			return fmt.Errorf("target with other switch ports: %v", err)
		}
		if err := keptTopology(c); err != nil {
			return err
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
	seen.requireOne(t)
}

// errorTexts collects the text of the error every rank returned.
type errorTexts struct {
	mu sync.Mutex
	m  map[string]int
}

func (e *errorTexts) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	e.m[err.Error()]++
}

// requireOne fails t unless every rank returned the same error.
func (e *errorTexts) requireOne(t *testing.T) {
	t.Helper()
	if len(e.m) != 1 {
		t.Fatalf("ranks saw different errors: %v", e.m)
	}
}

// keptTopology checks that c still runs on its first topology after a
// failed rewire.
func keptTopology(c *comm.Communicator) error {
	if c.Epoch() != 0 || len(c.Topology().Circuits) != 0 || c.Err() != nil {
		return fmt.Errorf("after a failed rewire: epoch %d, %d circuits, %v", c.Epoch(), len(c.Topology().Circuits), c.Err())
	}
	return nil
}

// TestRewireLinkFailure: a rank failing to open or check its new links
// gives every rank the same error, naming that rank and step and saying the
// circuits were restored, although only rank 0 holds the controller; rank 0
// restores them once, and the communicator keeps its previous topology. A
// rank that fails to connect opens nothing: its peer on the new link waits
// for it until the verdict stops the wait, well before the deadline.
func TestRewireLinkFailure(t *testing.T) {
	base := mustTopo(t, rewireBase)
	target := mustTopo(t, rewireBase+",circuits=0-1/2-3")
	for _, step := range []string{"connect", "verify"} {
		t.Run(step, func(t *testing.T) {
			inject := func(rank int, s string) error {
				if rank == 2 && s == step { // rank 2 has a new link to rank 0
					return errors.New("injected: no light on the new circuit")
				}
				return nil
			}
			var switched, restored atomic.Int32
			var seen errorTexts
			requireOK(t, runLocal(t, 8, func(ctx context.Context, c *comm.Communicator) error {
				rw := comm.WithLinkFailure(comm.Rewire{Target: target}, inject)
				if c.Rank() == 0 {
					rw.Apply = func(context.Context) error { switched.Add(1); return nil }
					rw.Rollback = func(context.Context) error { restored.Add(1); return nil }
				}
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				_, err := c.Rewire(rctx, rw)
				var re *comm.RewireError
				if !errors.As(err, &re) || re.Step != step || re.Rank != 2 || !re.RolledBack {
					return fmt.Errorf("failed %s: %v", step, err)
				}
				if c.Rank() == 2 && !strings.Contains(err.Error(), "no light") {
					return fmt.Errorf("rank 2 lost the cause: %v", err)
				}
				seen.add(re)
				if err := keptTopology(c); err != nil {
					return err
				}
				return allToAllChecks(ctx, c, algo.AlgoPairwise)
			}, comm.WithTopology(base)))
			seen.requireOne(t)
			if switched.Load() != 1 || restored.Load() != 1 {
				t.Fatalf("switched %d times, restored %d times; want 1 and 1", switched.Load(), restored.Load())
			}
		})
	}
}

// the mismatch was found is undone.
func TestRewireMismatchedTargets(t *testing.T) {
	base := mustTopo(t, rewireBase)
	target := mustTopo(t, rewireBase+",circuits=0-1/2-3")
	other := mustTopo(t, rewireBase+",circuits=0-2/1-3")
	var applied, rolledBack atomic.Int32
	errs := runLocal(t, 8, func(ctx context.Context, c *comm.Communicator) error {
		tg := target
		if c.Rank() == 3 {
			tg = other
		}
		_, err := c.Rewire(ctx, comm.Rewire{Target: tg,
			Apply:    func(context.Context) error { applied.Add(1); return nil },
			Rollback: func(context.Context) error { rolledBack.Add(1); return nil }})
		return err
	}, comm.WithTopology(base))
	for r, err := range errs {
		if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "Rewire(target digest") {
			t.Errorf("rank %d: %v, want ErrMismatch naming the rewire", r, err)
		}
	}
	// Rank 0 switches before any message of the rewire can reveal the
	// mismatch.
	if applied.Load() != 1 || rolledBack.Load() != 1 {
		t.Errorf("switched %d times, restored %d times; want once each", applied.Load(), rolledBack.Load())
	}
}

// TestRewireLeavesNoPipes: pipes made for a rewire that failed before both
// ends were taken are closed by the next attempt.
func TestRewireLeavesNoPipes(t *testing.T) {
	base := mustTopo(t, rewireBase)
	target := mustTopo(t, rewireBase+",circuits=0-1/2-3")
	comms, err := comm.NewLocal(8, comm.WithTopology(base))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rewireTo := func(target *topo.Topology, apply func(context.Context) error) []error {
		return commtest.Each(comms, func(_ int, c *comm.Communicator) error {
			_, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: apply})
			return err
		})
	}
	rewireAll := func(apply func(context.Context) error) []error { return rewireTo(target, apply) }
	// The switch fails: every rank has connected, and the pipes of the
	// attempt are closed; none is left waiting for its other end.
	for r, err := range rewireAll(func(context.Context) error { return errors.New("port down") }) {
		if !errors.Is(err, comm.ErrRewire) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	comm.LeavePendingPipe(comms[0], 1, 1) // of the failed attempt
	if n := comm.PendingPipes(comms[0]); n != 1 {
		t.Fatalf("%d pending pipes, want the 1 left", n)
	}
	requireOK(t, rewireAll(nil))
	if n := comm.PendingPipes(comms[0]); n != 0 {
		t.Fatalf("%d pipes still pending after the next rewire", n)
	}
	// The replaced connections stay open until the next rewire closes
	// them, and that one's until Close.
	hdr := transport.Header{Kind: transport.KindCollective}
	old := comm.RetiredConns(comms[0])
	if len(old) == 0 {
		t.Fatal("the rewire replaced no connection of rank 0")
	}
	requireOK(t, rewireTo(base, nil))
	for i, conn := range old {
		if err := conn.Send(ctx, hdr, nil); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("connection %d replaced by the first rewire, after the second: send %v, want closed", i, err)
		}
	}
	last := comm.RetiredConns(comms[0])
	if len(last) == 0 {
		t.Fatal("the second rewire replaced no connection of rank 0")
	}
	comms[0].Close()
	for i, conn := range last {
		if err := conn.Send(ctx, hdr, nil); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("connection %d replaced by the second rewire, after Close: send %v, want closed", i, err)
		}
	}
}

// rewireWorker is the "rewire" scenario of a worker process: rewires
// between circuit layouts with checked collectives in between, and a
// failed switch that must leave the communicator working. With kill, the
// last rank kills itself while rank 0 is switching: the others must fail
// cleanly, naming it. Without, it ends with a failed switch and a rank that
// fails to connect, after which the communicator must still work.
func rewireWorker(ctx context.Context, c *comm.Communicator, kill bool) error {
	base := c.Topology()
	if base == nil {
		return errors.New("no topology")
	}
	layouts := []string{"0-1/0-1/2-3/2-3", "0-1/1-2/2-3/0-3", ""}
	if kill {
		layouts = []string{"0-1"}
	}
	var targets []*topo.Topology
	for _, circuits := range layouts {
		t, err := topo.FromSpec(base.Name + ",circuits=" + circuits)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	if kill {
		victim := c.Size() - 1
		req := c.RewireAsync(ctx, comm.Rewire{Target: targets[0], Apply: func(context.Context) error {
			time.Sleep(500 * time.Millisecond)
			return nil
		}, Rollback: func(context.Context) error {
			fmt.Printf("ROLLBACK\n")
			return nil
		}})
		if c.Rank() == victim {
			time.Sleep(100 * time.Millisecond)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		_, err := req.Wait(ctx)
		var pe *comm.PeerError
		if !errors.As(err, &pe) || pe.Peer != victim || errors.Is(err, comm.ErrRewire) {
			return fmt.Errorf("rewire with rank %d killed: %v", victim, err)
		}
		fmt.Printf("FAILED peer=%d\n", pe.Peer)
		return nil
	}
	k := checker{ctx: ctx, c: c}
	for i := 0; i < 6; i++ {
		target := targets[i%len(targets)]
		if _, err := c.Rewire(ctx, comm.Rewire{Target: target, Apply: func(context.Context) error { return nil }}); err != nil {
			return err
		}
		if err := allToAllChecks(ctx, c, c.AllToAllAlgorithm(algo.UniformBytes(c.Size(), 1<<20))); err != nil {
			return fmt.Errorf("after rewire %d: %w", i, err)
		}
		if err := k.allReduce(comm.BFloat16, comm.Sum, 20000, true); err != nil {
			return err
		}
	}
	_, err := c.Rewire(ctx, comm.Rewire{Target: targets[0], Apply: func(context.Context) error { return errors.New("injected switch failure") }})
	if !errors.Is(err, comm.ErrRewire) {
		return fmt.Errorf("failed switch: %v", err)
	}
	if c.Epoch() != 6 {
		return fmt.Errorf("epoch %d after a failed switch, want 6", c.Epoch())
	}
	// Rank 2 opens none of its new links: ranks 0 and 1, its new peers,
	// wait for it over TCP until rank 0's verdict stops them.
	rw := comm.WithLinkFailure(comm.Rewire{Target: targets[0], Apply: func(context.Context) error { return nil }},
		func(rank int, step string) error {
			if rank == 2 && step == "connect" {
				return errors.New("injected connect failure")
			}
			return nil
		})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = c.Rewire(rctx, rw)
	cancel()
	var re *comm.RewireError
	if !errors.As(err, &re) || re.Step != "connect" || re.Rank != 2 {
		return fmt.Errorf("failed connect: %v", err)
	}
	if c.Epoch() != 6 {
		return fmt.Errorf("epoch %d after a failed connect, want 6", c.Epoch())
	}
	return k.allGather(comm.Float32, 1031, false)
}

// TestProcessRewire rewires communicators of 8 processes on 4 virtual
// hosts (TCP between them) with checked collectives in between.
func TestProcessRewire(t *testing.T) {
	skipUnderRace(t, "TestRewire (in one process) with TestProcessRewireKilled")
	job(t, "rewire", 8, "OCCL_TOPO="+rewireBase)
}

// TestProcessRewireKilled kills a rank while the others are paused for a
// switch: they fail cleanly, naming it, instead of hanging.
func TestProcessRewireKilled(t *testing.T) {
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := launch.Run(ctx, launch.Spec{
		NP: 4, Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env:    []string{"OCCL_TEST_WORKER=rewire-kill", "OCCL_TOPO=hosts=2x2,nics=host,ocs_ports=2", "OCCL_HEARTBEAT_TIMEOUT=30s"},
		Stdout: &out, Stderr: &out,
	})
	if err == nil {
		t.Fatalf("the killed rank's job succeeded:\n%s", out.String())
	}
	for r := 0; r < 3; r++ {
		if !strings.Contains(out.String(), fmt.Sprintf("[%d] FAILED peer=3", r)) {
			t.Errorf("rank %d did not report rank 3:\n%s", r, out.String())
		}
	}
	if n := strings.Count(out.String(), "ROLLBACK"); n != 1 || !strings.Contains(out.String(), "[0] ROLLBACK") {
		t.Errorf("rank 0 switched, then the communicator failed: %d rollbacks, want one by rank 0:\n%s", n, out.String())
	}
}
