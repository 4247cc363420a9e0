package reconfig_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/topo"
)

// fakeController records what it is asked to switch.
type fakeController struct {
	mu    sync.Mutex
	calls []string
	sets  [][]topo.Circuit
	err   error
	delay time.Duration
}

func (f *fakeController) Apply(ctx context.Context, id string, connects []topo.Circuit) (time.Duration, error) {
	f.mu.Lock()
	f.calls = append(f.calls, id)
	f.sets = append(f.sets, connects)
	err, d := f.err, f.delay
	f.mu.Unlock()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return d, err
}

const base = "hosts=4x2,nics=host,ocs_ports=2,hbd=8GB/s,eps=1GB/s,ocs=1GB/s"

func spec(t *testing.T, s string) *topo.Topology {
	t.Helper()
	top, err := topo.FromSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func TestCrossConnects(t *testing.T) {
	top := spec(t, base+",circuits=0-1/2-3")
	// Ports: host h has switch ports 2h and 2h+1.
	got, err := reconfig.CrossConnects(top)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][2]int{{0, 2}, {4, 6}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cross-connects %v, want %v", got, want)
	}
	if p := reconfig.Ports(top); len(p) != 8 || p[0] != 4 {
		t.Fatalf("ports %v", p)
	}
}

// TestReconfigure switches the circuits through a controller while
// computation overlaps, then checks the communicators run on them.
func TestReconfigure(t *testing.T) {
	comms := commtest.Local(t, 8, comm.WithTopology(spec(t, base)), comm.WithEmulation(true))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl := &fakeController{delay: 5 * time.Millisecond}
	target := spec(t, base+",circuits=0-1/0-1/2-3/2-3")
	h := reconfig.ReconfigureAsync(ctx, comms, target, reconfig.WithController(ctl))
	res, err := h.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ctl.calls) != 1 || len(ctl.sets[0]) != 4 || res.Switch != 5*time.Millisecond || res.RequestID != ctl.calls[0] {
		t.Fatalf("controller calls %v %v, result %+v", ctl.calls, ctl.sets, res)
	}
	for i, c := range comms {
		if c.Epoch() != 1 || c.AllToAllAlgorithm(algo.UniformBytes(8, 1<<20)) != algo.AlgoDelegated {
			t.Fatalf("rank %d: epoch %d, all-to-all %s", i, c.Epoch(), c.AllToAllAlgorithm(algo.UniformBytes(8, 1<<20)))
		}
		// Ranks called one after another may start after rank 0 began
		// switching: only rank 0's total surely spans the switch.
		if (i == 0 && res.Times[i].Total < res.Switch) || res.Overhead(i) != max(res.Times[i].Total-res.Switch, 0) {
			t.Fatalf("rank %d times %+v", i, res.Times[i])
		}
	}

	// A controller refusing the target: every rank gets the same error,
	// nothing moves and nothing is restored.
	ctl.err = fmt.Errorf("port 5 failed: %w", comm.ErrNotSwitched)
	back := spec(t, base)
	_, err = reconfig.Reconfigure(ctx, comms, back, reconfig.WithController(ctl))
	var re *comm.RewireError
	if !errors.As(err, &re) || re.Step != "apply" || !errors.Is(err, comm.ErrRewire) {
		t.Fatalf("failing controller: %v", err)
	}
	for _, c := range comms {
		if c.Epoch() != 1 || len(c.Topology().Circuits) != 4 || c.Err() != nil {
			t.Fatalf("after a failed switch: epoch %d, %d circuits, %v", c.Epoch(), len(c.Topology().Circuits), c.Err())
		}
	}
	if len(ctl.calls) != 2 || ctl.calls[1] == ctl.calls[0] {
		t.Fatalf("request ids %v", ctl.calls)
	}
}

// TestSoak runs 200 reconfigurations between three circuit layouts,
// each followed by collectives checked element by element.
func TestSoak(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 40
	}
	targets := []*topo.Topology{
		spec(t, base+",circuits=0-1/0-1/2-3/2-3"),
		spec(t, base+",circuits=0-1/1-2/2-3/0-3"),
		spec(t, base),
	}
	comms := commtest.Local(t, 8, comm.WithTopology(spec(t, base)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctl := &fakeController{}
	commtest.OnEach(t, comms, func(_ int, c *comm.Communicator) error {
		return soakRank(ctx, c, n, targets, ctl)
	})
	if len(ctl.calls) != n {
		t.Fatalf("%d switch requests for %d reconfigurations", len(ctl.calls), n)
	}
}

func soakRank(ctx context.Context, c *comm.Communicator, n int, targets []*topo.Topology, ctl reconfig.Controller) error {
	size, rank := c.Size(), c.Rank()
	for i := 0; i < n; i++ {
		target := targets[i%len(targets)]
		h := reconfig.ReconfigureAsync(ctx, []*comm.Communicator{c}, target, reconfig.WithController(ctl), reconfig.WithRequestID(fmt.Sprintf("soak-%d", i)))
		// Issued while the reconfiguration is queued or running: runs
		// after it, on the new links.
		send := make([]int32, size*3)
		for j := range send {
			send[j] = int32(rank*1000 + j)
		}
		recv := make([]int32, len(send))
		if err := comm.AllToAll(ctx, c, send, recv); err != nil {
			return fmt.Errorf("reconfiguration %d: alltoall: %w", i, err)
		}
		if _, err := h.Wait(ctx); err != nil {
			return fmt.Errorf("reconfiguration %d: %w", i, err)
		}
		for src := 0; src < size; src++ {
			for j := 0; j < 3; j++ {
				if got, want := recv[src*3+j], int32(src*1000+rank*3+j); got != want {
					return fmt.Errorf("reconfiguration %d: element %d from rank %d is %d, want %d", i, j, src, got, want)
				}
			}
		}
		x := []float64{float64(rank + i)}
		if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
			return err
		}
		if want := float64(size*(size-1)/2 + size*i); x[0] != want {
			return fmt.Errorf("reconfiguration %d: allreduce %v, want %v", i, x[0], want)
		}
		if c.Epoch() != uint32(i+1) {
			return fmt.Errorf("epoch %d after %d reconfigurations", c.Epoch(), i+1)
		}
	}
	return nil
}

// TestReconfigureSubCommunicators reconfigures a communicator together with
// sub-communicators split from it, each rank as its own process would: the
// fabric is switched once, every sub-communicator runs on its part of the
// target, operations issued meanwhile run after the rewire, and a failed
// switch leaves all of them where they were.
func TestReconfigureSubCommunicators(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	world, children := splitWorld(t, ctx, comm.WithEmulation(true))
	ctl := &fakeController{delay: 2 * time.Millisecond}
	target := spec(t, base+",circuits=0-1/0-1/2-3/2-3")
	commtest.OnEach(t, world, func(r int, c *comm.Communicator) error {
		child := children[r]
		if fr := child.FabricRanks(); len(fr) != 4 || fr[child.Rank()] != r {
			return fmt.Errorf("child fabric ranks %v", fr)
		}
		h := reconfig.ReconfigureAsync(ctx, []*comm.Communicator{c, child}, target,
			reconfig.WithController(ctl), reconfig.WithRequestID("sub-1"))
		// Issued while the reconfiguration runs: waits for the child's
		// rewire and runs on its new links.
		if err := checkedAllToAll(ctx, child); err != nil {
			return err
		}
		res, err := h.Wait(ctx)
		if err != nil {
			return err
		}
		want := target.Subset(child.FabricRanks())
		if len(res.Times) != 2 || res.Times[1].Links == 0 || c.Epoch() != 1 || child.Epoch() != 1 || len(want.Circuits) == 0 ||
			!reflect.DeepEqual(child.Topology().Circuits, want.Circuits) {
			return fmt.Errorf("after the reconfiguration: epochs %d/%d, child circuits %v, want %v",
				c.Epoch(), child.Epoch(), child.Topology().Circuits, want.Circuits)
		}
		return checkedAllToAll(ctx, c)
	})
	if len(ctl.calls) != 1 {
		t.Fatalf("%d switch requests, want 1", len(ctl.calls))
	}

	ctl.err = errors.New("port 3 failed")
	commtest.OnEach(t, world, func(r int, c *comm.Communicator) error {
		child := children[r]
		before := child.Topology().Circuits
		_, err := reconfig.Reconfigure(ctx, []*comm.Communicator{c, child}, spec(t, base),
			reconfig.WithController(ctl), reconfig.WithRequestID("sub-2"))
		if !errors.Is(err, comm.ErrRewire) || !strings.Contains(err.Error(), "port 3 failed") {
			return fmt.Errorf("failed switch: %v", err)
		}
		if c.Epoch() != 1 || child.Epoch() != 1 || !reflect.DeepEqual(child.Topology().Circuits, before) {
			return fmt.Errorf("after a failed switch: epochs %d/%d", c.Epoch(), child.Epoch())
		}
		// The sub-communicator's own error says the switch did not happen.
		_, err = reconfig.Reconfigure(ctx, []*comm.Communicator{child}, target)
		if err == nil || !strings.Contains(err.Error(), "spans the fabric") {
			return fmt.Errorf("without the spanning communicator: %v", err)
		}
		// Nor twice the same one: it would queue two rewires.
		_, err = reconfig.Reconfigure(ctx, []*comm.Communicator{c, child, c}, target)
		if err == nil || !strings.Contains(err.Error(), "given twice") || c.Epoch() != 1 {
			return fmt.Errorf("a communicator given twice: %v (epoch %d)", err, c.Epoch())
		}
		return checkedAllToAll(ctx, child)
	})
}

// checkedAllToAll runs an AllToAll on c and checks every element.
func checkedAllToAll(ctx context.Context, c *comm.Communicator) error {
	size, rank := c.Size(), c.Rank()
	send, recv := make([]int32, size*5), make([]int32, size*5)
	for j := range send {
		send[j] = int32(rank*1000 + j)
	}
	if err := comm.AllToAll(ctx, c, send, recv); err != nil {
		return err
	}
	for src := 0; src < size; src++ {
		for j := 0; j < 5; j++ {
			if got, want := recv[src*5+j], int32(src*1000+rank*5+j); got != want {
				return fmt.Errorf("alltoall: element %d from rank %d is %d, want %d", j, src, got, want)
			}
		}
	}
	return nil
}

// splitWorld makes 8 in-process ranks on the base topology (with opts) and
// splits them into two children by rank parity: one rank per host in each
// child, whose links between hosts follow the circuits. Everything is
// closed when the test ends.
func splitWorld(t *testing.T, ctx context.Context, opts ...comm.Option) (world, children []*comm.Communicator) {
	t.Helper()
	world, err := comm.NewLocal(8, append([]comm.Option{comm.WithTopology(spec(t, base))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	children = make([]*comm.Communicator, len(world))
	t.Cleanup(func() {
		for i := range world {
			if children[i] != nil {
				children[i].Close()
			}
			world[i].Close()
		}
	})
	commtest.OnEach(t, world, func(r int, c *comm.Communicator) (err error) {
		children[r], err = c.Split(ctx, r%2, r)
		return err
	})
	return world, children
}

// sumIs runs an AllReduce (Sum) of v on c and returns an error unless it
// gives want.
func sumIs(ctx context.Context, c *comm.Communicator, v, want int64) error {
	x := []int64{v}
	if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
		return err
	}
	if x[0] != want {
		return fmt.Errorf("AllReduce of %d gave %d, want %d", v, x[0], want)
	}
	return nil
}
