package reconfig_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/comm"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/topo"
)

// fakeController records what it is asked to switch.
type fakeController struct {
	mu    sync.Mutex
	calls []string
	sets  [][][2]int
	err   error
	delay time.Duration
}

func (f *fakeController) Apply(ctx context.Context, id string, connects [][2]int) (time.Duration, error) {
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
	comms, err := comm.NewLocal(8, comm.WithTopology(spec(t, base)), comm.WithEmulation(true))
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

	// A failing controller: every rank gets the same error, nothing moves.
	ctl.err = errors.New("port 5 failed")
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
	comms, err := comm.NewLocal(8, comm.WithTopology(spec(t, base)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctl := &fakeController{}
	var wg sync.WaitGroup
	errs := make([]error, len(comms))
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = soakRank(ctx, c, n, targets, ctl)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
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
