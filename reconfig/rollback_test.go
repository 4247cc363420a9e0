package reconfig_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/reconfig"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lateController forwards to a real controller but, for the first request,
// answers only after the caller's deadline, as a controller that switched
// and then became slow or unreachable would. Restores (request ids ending
// in "/rollback") fail with Unavailable when failRestore is set.
type lateController struct {
	next        reconfig.Controller
	failRestore bool
	restores    int
}

func (l *lateController) Apply(ctx context.Context, id string, connects []topo.Circuit) (time.Duration, error) {
	if strings.HasSuffix(id, ocs.RollbackSuffix) {
		l.restores++
		if l.failRestore {
			return 0, status.Error(codes.Unavailable, "controller unreachable")
		}
		return l.next.Apply(ctx, id, connects)
	}
	if _, err := l.next.Apply(context.WithoutCancel(ctx), id, connects); err != nil {
		return 0, err
	}
	<-ctx.Done()
	return 0, status.FromContextError(ctx.Err()).Err()
}

// startSwitch serves an emulated switch of 8 ports, closed when t ends.
func startSwitch(t *testing.T, ctx context.Context) *reconfig.Emulated {
	t.Helper()
	em, err := reconfig.StartEmulated(ctx, 8, time.Millisecond, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	return em
}

// TestReconfigureUnknownOutcome: the emulated OCS controller switches,
// but its answer comes after the deadline. The outcome is unknown to the
// ranks, so the previous circuits are restored and the error says so; when
// the restore fails too, the error says the circuits were not restored, and
// the switch indeed still holds the target's.
func TestReconfigureUnknownOutcome(t *testing.T) {
	for _, failRestore := range []bool{false, true} {
		t.Run(fmt.Sprintf("failRestore=%v", failRestore), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			em := startSwitch(t, ctx)
			comms := commtest.Local(t, 8, comm.WithTopology(spec(t, base)), comm.WithEmulation(true))
			ctl := &lateController{next: em.OCS, failRestore: failRestore}
			target := spec(t, base+",circuits=0-1/2-3")
			_, err := reconfig.Reconfigure(ctx, comms, target, reconfig.WithController(ctl),
				reconfig.WithApplyTimeout(200*time.Millisecond))
			var re *comm.RewireError
			if !errors.As(err, &re) || re.Step != "apply" || !errors.Is(err, comm.ErrRewire) {
				t.Fatalf("late controller: %v, want a RewireError of the apply step", err)
			}
			if re.RolledBack == failRestore {
				t.Fatalf("RolledBack %v with failRestore %v: %v", re.RolledBack, failRestore, err)
			}
			if ctl.restores != 1 {
				t.Fatalf("%d restores, want 1", ctl.restores)
			}
			installed, err := em.Switch.Connections(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want, err := reconfig.CrossConnects(target)
			if err != nil {
				t.Fatal(err)
			}
			if !failRestore {
				want = nil
			}
			if !sameConnects(installed, want) {
				t.Fatalf("switch holds %v, want %v", installed, want)
			}
			for r, c := range comms {
				if c.Epoch() != 0 || c.Err() != nil {
					t.Fatalf("rank %d: epoch %d, %v", r, c.Epoch(), c.Err())
				}
			}
		})
	}
}

// delayedController holds the first request back until its restore has
// been applied, then delivers it, as a request delayed on its way to the
// controller would arrive, and reports the controller's answer on late.
type delayedController struct {
	next     reconfig.Controller
	restored chan struct{}
	late     chan error
}

func (d *delayedController) Apply(ctx context.Context, id string, connects []topo.Circuit) (time.Duration, error) {
	if strings.HasSuffix(id, ocs.RollbackSuffix) {
		took, err := d.next.Apply(ctx, id, connects)
		close(d.restored)
		return took, err
	}
	go func() {
		<-d.restored
		actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := d.next.Apply(actx, id, connects)
		d.late <- err
	}()
	<-ctx.Done()
	return 0, status.FromContextError(ctx.Err()).Err()
}

// TestReconfigureLateRequestAfterRestore: the switch request reaches the
// controller only after the ranks gave up on it and restored the previous
// circuits. The controller refuses it, so the switch keeps the restored
// circuits the ranks run on.
func TestReconfigureLateRequestAfterRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	em := startSwitch(t, ctx)
	comms := commtest.Local(t, 8, comm.WithTopology(spec(t, base)), comm.WithEmulation(true))
	ctl := &delayedController{next: em.OCS, restored: make(chan struct{}), late: make(chan error, 1)}
	_, err := reconfig.Reconfigure(ctx, comms, spec(t, base+",circuits=0-1/2-3"), reconfig.WithController(ctl),
		reconfig.WithApplyTimeout(200*time.Millisecond))
	var re *comm.RewireError
	if !errors.As(err, &re) || re.Step != "apply" || !re.RolledBack {
		t.Fatalf("delayed request: %v, want a RewireError of the apply step, rolled back", err)
	}
	select {
	case err = <-ctl.late:
	case <-ctx.Done():
		t.Fatal("the delayed request was never answered")
	}
	if !errors.Is(err, comm.ErrNotSwitched) || status.Code(err) != codes.Aborted {
		t.Fatalf("delayed request after the restore: %v, want a refusal (nothing switched)", err)
	}
	installed, err := em.Switch.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sameConnects(installed, nil) {
		t.Fatalf("switch holds %v after the delayed request, want the restored circuits (none)", installed)
	}
	for r, c := range comms {
		if c.Epoch() != 0 || c.Err() != nil {
			t.Fatalf("rank %d: epoch %d, %v", r, c.Epoch(), c.Err())
		}
	}
}

func sameConnects(got []topo.Circuit, want [][2]int) bool {
	g := make([][2]int, 0, len(got))
	for _, c := range got {
		c = c.Normalize()
		g = append(g, [2]int{c.A, c.B})
	}
	if want == nil {
		want = [][2]int{}
	}
	return reflect.DeepEqual(g, want)
}

// TestRefusalNotUndone: a controller's definite refusal (the target uses a
// failed port) says nothing was switched, so there is nothing to restore.
func TestRefusalNotUndone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	em := startSwitch(t, ctx)
	if err := em.Switch.FailPort(0); err != nil {
		t.Fatal(err)
	}
	comms := commtest.Local(t, 8, comm.WithTopology(spec(t, base)))
	ctl := &lateController{next: em.OCS}
	_, err := reconfig.Reconfigure(ctx, comms, spec(t, base+",circuits=0-1/2-3"), reconfig.WithController(ctl))
	var re *comm.RewireError
	if !errors.As(err, &re) || re.RolledBack || !errors.Is(err, comm.ErrNotSwitched) {
		t.Fatalf("refused target: %v, want a RewireError wrapping ErrNotSwitched, not rolled back", err)
	}
	if ctl.restores != 0 {
		t.Fatal("restored after a refusal")
	}
}
