package reconfig_test

import (
	"context"
	"errors"
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
		if res.Times[i].Total < res.Switch || res.Overhead(i) < 0 {
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
