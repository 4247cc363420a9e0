package ocs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// flaky is an emulated switch whose n-th Apply call (1-based) and next
// Connections calls can be made to fail, to drive the controller into the
// state where it no longer knows what the switch holds.
type flaky struct {
	*ocs.Emulated
	mu        sync.Mutex
	applies   int
	failApply int // the Apply call with this number fails without a change
	failConns int // this many next Connections calls fail
}

func (f *flaky) Apply(ctx context.Context, remove, add []topo.Circuit) (ocs.Progress, error) {
	f.mu.Lock()
	f.applies++
	fail := f.applies == f.failApply
	f.mu.Unlock()
	if fail {
		return ocs.Progress{}, errors.New("flaky switch: apply refused")
	}
	return f.Emulated.Apply(ctx, remove, add)
}

func (f *flaky) Connections(ctx context.Context) ([]topo.Circuit, error) {
	f.mu.Lock()
	fail := f.failConns > 0
	if fail {
		f.failConns--
	}
	f.mu.Unlock()
	if fail {
		return nil, errors.New("flaky switch: cannot read cross-connects")
	}
	return f.Emulated.Connections(ctx)
}

// TestForcedDrainAfterLostStateTearsDownOnlyItsCircuit shows that a forced
// Drain, when the controller must first re-read the switch (a rollback and
// the re-read after it failed), tears down only the drained port's circuit:
// it computes its target from what the switch was found to hold, not from
// the stale installed set, which would tear down circuits the re-read found.
func TestForcedDrainAfterLostStateTearsDownOnlyItsCircuit(t *testing.T) {
	fl := &flaky{Emulated: newSwitch(t, 16, 0)}
	addr, _ := startServer(t, fl, ocs.ServerConfig{})
	c := dial(t, addr)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, "base", mustParse(t, "0-1,2-3")); err != nil {
		t.Fatal(err)
	}
	// Apply #2 makes 4-5 and then fails; the rollback (Apply #3) fails and
	// so does the re-read: the switch holds 0-1,2-3,4-5, unknown to the
	// controller.
	fl.Emulated.FailNextApply(1)
	fl.mu.Lock()
	fl.failApply, fl.failConns = 3, 1
	fl.mu.Unlock()
	_, err := c.Apply(ctx, "next", mustParse(t, "0-1,2-3,4-5,6-7"))
	wantCode(t, err, codes.Internal, "apply with failing switch, rollback and re-read")
	if got := hwConnects(t, fl.Emulated); got != "0-1,2-3,4-5" {
		t.Fatalf("switch holds %s, want 0-1,2-3,4-5", got)
	}

	res, err := c.Drain(ctx, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed == nil || *res.Removed != (topo.Circuit{A: 0, B: 1}) {
		t.Fatalf("drain removed %v, want 0-1", res.Removed)
	}
	if got := hwConnects(t, fl.Emulated); got != "2-3,4-5" {
		t.Fatalf("after draining port 0 the switch holds %s, want 2-3,4-5", got)
	}
	top, err := c.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := ocs.FormatConnects(top.Connects); got != "2-3,4-5" {
		t.Fatalf("after draining port 0 the controller has %s installed, want 2-3,4-5", got)
	}
}

// TestMetricsFailedRegistrationLeavesRegistryClean shows that a NewServer
// refused because one of its metrics cannot be registered takes back the
// metrics it had registered: before, they stayed in the registry (bound to
// the server that was never made), so a retry on the same registry failed
// even once the conflict was gone.
func TestMetricsFailedRegistrationLeavesRegistryClean(t *testing.T) {
	reg := prometheus.NewRegistry()
	// Same name and help as the controller's gauge: the registry remembers
	// the help of a name even after Unregister.
	squatter := prometheus.NewGauge(prometheus.GaugeOpts{Name: ocs.MetricGeneration,
		Help: "Generation of the installed set of cross-connects."})
	reg.MustRegister(squatter)
	if _, err := ocs.NewServer(newSwitch(t, 4, 0), ocs.ServerConfig{Registry: reg}); err == nil {
		t.Fatal("NewServer accepted a registry where its generation metric is taken")
	}
	reg.Unregister(squatter)
	srv, err := ocs.NewServer(newSwitch(t, 4, 0), ocs.ServerConfig{Registry: reg})
	if err != nil {
		t.Fatalf("NewServer after the conflict was removed: %v", err)
	}
	srv.Stop(ctxT(t))
}

// panicsOnChanges is a driver whose Changes panics.
type panicsOnChanges struct{ *ocs.Emulated }

func (panicsOnChanges) Changes() <-chan struct{} { panic("driver bug in Changes") }

// panicsOnPorts is a driver whose Ports panics.
type panicsOnPorts struct{ *ocs.Emulated }

func (panicsOnPorts) Ports() int { panic("driver bug in Ports") }

// TestDriverPanicInPortsOrChanges shows that a driver panicking in Ports
// or Changes does not panic across the API: NewServer returns an error, and
// Serve serves without the change signal (the controller reads the port
// health before every change anyway), as a panic in Apply, Connections or
// FailedPorts already was an error. Before, both panics went through
// NewServer and Serve to the caller (crashing the daemon).
func TestDriverPanicInPortsOrChanges(t *testing.T) {
	if _, err := ocs.NewServer(panicsOnPorts{newSwitch(t, 4, 0)}, ocs.ServerConfig{}); err == nil || !strings.Contains(err.Error(), "driver bug in Ports") {
		t.Fatalf("NewServer with a driver panicking in Ports: %v", err)
	}
	sw := newSwitch(t, 4, 0)
	addr, _ := startServer(t, panicsOnChanges{sw}, ocs.ServerConfig{})
	c := dial(t, addr)
	if err := sw.FailPort(3); err != nil {
		t.Fatal(err)
	}
	_, err := c.Apply(ctxT(t), "a", mustParse(t, "2-3"))
	wantCode(t, err, codes.FailedPrecondition, "apply on a failed port without a change signal")
	if _, err := c.Apply(ctxT(t), "b", mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
}
