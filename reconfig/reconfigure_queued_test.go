package reconfig_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/topo"
)

// failingController switches every request but the one named fail, whose
// outcome it leaves unknown; it records the circuits of every request.
type failingController struct {
	fail string
	mu   sync.Mutex
	sets map[string][]topo.Circuit
}

func (f *failingController) Apply(ctx context.Context, id string, circuits []topo.Circuit) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sets == nil {
		f.sets = map[string][]topo.Circuit{}
	}
	f.sets[id] = circuits
	if id == f.fail {
		return 0, errors.New("controller unreachable")
	}
	return time.Millisecond, nil
}

// TestReconfigureQueuedRollback shows that a reconfiguration queued behind
// another one (two ReconfigureAsync in a row) restores, when its switch
// fails, the circuits the first one installed, which the communicator
// then runs on, not those of the time it was queued.
func TestReconfigureQueuedRollback(t *testing.T) {
	world, err := comm.NewLocal(8, comm.WithTopology(spec(t, base)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range world {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := spec(t, base+",circuits=0-1/0-1/2-3/2-3")
	second := spec(t, base+",circuits=0-1/1-2/2-3/0-3")
	ctl := &failingController{fail: "second"}
	commtest.OnEach(t, world, func(r int, c *comm.Communicator) error {
		h1 := reconfig.ReconfigureAsync(ctx, []*comm.Communicator{c}, first, reconfig.WithController(ctl), reconfig.WithRequestID("first"))
		h2 := reconfig.ReconfigureAsync(ctx, []*comm.Communicator{c}, second, reconfig.WithController(ctl), reconfig.WithRequestID("second"))
		if _, err := h1.Wait(ctx); err != nil {
			return err
		}
		_, err := h2.Wait(ctx)
		var re *comm.RewireError
		if !errors.As(err, &re) || !re.RolledBack {
			return fmt.Errorf("second reconfiguration: %v", err)
		}
		if !reflect.DeepEqual(c.Topology().Circuits, first.Circuits) {
			return fmt.Errorf("runs on circuits %v, want %v", c.Topology().Circuits, first.Circuits)
		}
		return nil
	})
	want, err := first.SwitchCircuits()
	if err != nil {
		t.Fatal(err)
	}
	if got := ctl.sets["second/rollback"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("the failed switch was undone to circuits %v; the communicator runs on %v", got, want)
	}
}
