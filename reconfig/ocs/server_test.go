package ocs_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/reconfig/ocspb"
	"github.com/occl/occl/topo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const testToken = "test-token-7f3a"

// startServer serves a controller for sw on a free loopback port and stops
// it when the test ends.
func startServer(t *testing.T, sw ocs.Switch, cfg ocs.ServerConfig) (string, *ocs.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, lis, sw, cfg)
}

func serveOn(t *testing.T, lis net.Listener, sw ocs.Switch, cfg ocs.ServerConfig) (string, *ocs.Server) {
	t.Helper()
	srv, err := ocs.NewServer(sw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String(), srv
}

func dial(t *testing.T, addr string, opts ...ocs.Option) *ocs.Client {
	t.Helper()
	c, err := ocs.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newSwitch(t *testing.T, ports int, delay time.Duration) *ocs.Emulated {
	t.Helper()
	sw, err := ocs.NewEmulated(ports, delay)
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

// setup returns an emulated switch, a controller with a token and a client.
func setup(t *testing.T, ports int, delay time.Duration) (*ocs.Emulated, *ocs.Server, *ocs.Client) {
	t.Helper()
	sw := newSwitch(t, ports, delay)
	addr, srv := startServer(t, sw, ocs.ServerConfig{Token: testToken})
	return sw, srv, dial(t, addr, ocs.WithToken(testToken))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustParse(t *testing.T, s string) []topo.Circuit {
	t.Helper()
	cs, err := ocs.ParseConnects(s)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
}

func hwConnects(t *testing.T, sw *ocs.Emulated) string {
	t.Helper()
	cs, err := sw.Connections(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ocs.FormatConnects(cs)
}

func TestApplyAndTopology(t *testing.T) {
	sw, _, c := setup(t, 16, ocs.TransceiverDelay)
	ctx := ctxT(t)
	res, err := c.Apply(ctx, "r1", mustParse(t, "0-5,7-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 2 || res.Removed != 0 || res.Unchanged != 0 || res.Generation != 1 || res.Replayed {
		t.Fatalf("Apply = %+v", res)
	}
	if res.SwitchingTime < ocs.TransceiverDelay {
		t.Fatalf("switching time %v shorter than the switch's delay", res.SwitchingTime)
	}
	top, err := c.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if top.Ports != 16 || top.Generation != 1 || ocs.FormatConnects(top.Connects) != "0-5,1-7" {
		t.Fatalf("topology = %+v", top)
	}
	if p := top.PortStates[7]; p.Peer != 1 || p.State != ocs.PortUp {
		t.Fatalf("port 7 = %+v", p)
	}
	if p := top.PortStates[2]; p.Peer != -1 {
		t.Fatalf("port 2 = %+v", p)
	}
	if got := hwConnects(t, sw); got != "0-5,1-7" {
		t.Fatalf("switch holds %s", got)
	}
}

func TestValidationSwitchesNothing(t *testing.T) {
	sw := newSwitch(t, 8, 0)
	addr, _ := startServer(t, sw, ocs.ServerConfig{Token: testToken})
	c := dial(t, addr, ocs.WithToken(testToken))
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, "base", mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	before := sw.Stats()

	// Through the Go client (validated on both sides).
	for name, target := range map[string]string{
		"port out of range": "0-1,2-8",
		"port used twice":   "0-1,1-2",
		"same port":         "3-3",
		"reversed twice":    "2-3,3-2",
	} {
		_, err := c.Apply(ctx, "bad-"+strings.ReplaceAll(name, " ", "-"), mustParse(t, target))
		wantCode(t, err, codes.InvalidArgument, name)
	}
	_, err := c.Apply(ctx, "bad id", mustParse(t, "0-1"))
	wantCode(t, err, codes.InvalidArgument, "request id with a space")

	// Raw gRPC, so that the server's validation is what answers.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := ocspb.NewOCSClient(conn)
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testToken)
	for name, req := range map[string]*ocspb.ApplyRequest{
		"empty id":        {Connects: []*ocspb.CrossConnect{{A: 0, B: 1}}},
		"port used twice": {RequestId: "x1", Connects: []*ocspb.CrossConnect{{A: 0, B: 1}, {A: 1, B: 2}}},
		"out of range":    {RequestId: "x2", Connects: []*ocspb.CrossConnect{{A: 0, B: 1 << 31}}},
		"max uint32":      {RequestId: "x3", Connects: []*ocspb.CrossConnect{{A: 0, B: 1<<32 - 1}}},
	} {
		_, err := raw.Apply(actx, req)
		wantCode(t, err, codes.InvalidArgument, "raw "+name)
		if !strings.Contains(status.Convert(err).Message(), "port") && name != "empty id" {
			t.Errorf("%s: unclear message %q", name, status.Convert(err).Message())
		}
	}
	_, err = raw.Drain(actx, &ocspb.PortRequest{Port: 8})
	wantCode(t, err, codes.InvalidArgument, "drain of a port out of range")

	if after := sw.Stats(); after != before {
		t.Fatalf("invalid requests reached the switch: %+v -> %+v", before, after)
	}
	top, _ := c.GetTopology(ctx)
	if top.Generation != 1 || ocs.FormatConnects(top.Connects) != "0-1" {
		t.Fatalf("topology changed: %+v", top)
	}
}

func TestAuth(t *testing.T) {
	sw := newSwitch(t, 4, 0)
	addr, _ := startServer(t, sw, ocs.ServerConfig{Token: testToken})
	ctx := ctxT(t)
	for name, opts := range map[string][]ocs.Option{
		"missing token": nil,
		"wrong token":   {ocs.WithToken("nope")},
		"token prefix":  {ocs.WithToken(testToken[:4])},
	} {
		c := dial(t, addr, opts...)
		_, err := c.GetTopology(ctx)
		wantCode(t, err, codes.Unauthenticated, name+": GetTopology")
		_, err = c.Apply(ctx, "a", mustParse(t, "0-1"))
		wantCode(t, err, codes.Unauthenticated, name+": Apply")
		err = c.Watch(ctx, func(ocs.Event) error { return errors.New("event without a token") })
		wantCode(t, err, codes.Unauthenticated, name+": Watch")
	}
	if st := sw.Stats(); st.Applies != 0 {
		t.Fatalf("unauthenticated apply reached the switch: %+v", st)
	}
	if _, err := dial(t, addr, ocs.WithToken(testToken)).GetTopology(ctx); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

func TestHealthServing(t *testing.T) {
	sw := newSwitch(t, 4, 0)
	addr, _ := startServer(t, sw, ocs.ServerConfig{Token: testToken})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := healthgrpc.NewHealthClient(conn)
	for _, svc := range []string{"", ocspb.OCS_ServiceDesc.ServiceName} {
		// No token: the health service is exempt from authentication.
		r, err := h.Check(ctxT(t), &healthgrpc.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health check %q: %v", svc, err)
		}
		if r.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v", svc, r.GetStatus())
		}
	}
}

func TestDiffSwitchesOnlyChanges(t *testing.T) {
	sw, _, c := setup(t, 16, 0)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, "g1", mustParse(t, "0-1,2-3,4-5,6-7")); err != nil {
		t.Fatal(err)
	}
	s1 := sw.Stats()
	if s1.Applies != 1 || s1.Connects != 4 || s1.Disconnects != 0 {
		t.Fatalf("first apply: %+v", s1)
	}
	// Keep 0-1 and 2-3, drop 4-5, re-pair 6 with 8, add 10-11.
	res, err := c.Apply(ctx, "g2", mustParse(t, "1-0,2-3,6-8,10-11"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 2 || res.Removed != 2 || res.Unchanged != 2 || res.Generation != 2 {
		t.Fatalf("second apply = %+v", res)
	}
	s2 := sw.Stats()
	if s2.Applies != 2 || s2.Connects-s1.Connects != 2 || s2.Disconnects-s1.Disconnects != 2 {
		t.Fatalf("second apply switched more than the difference: %+v -> %+v", s1, s2)
	}
	// The same target under a new id: nothing to switch, no driver call,
	// no new generation.
	res, err = c.Apply(ctx, "g3", mustParse(t, "10-11,6-8,2-3,0-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 0 || res.Removed != 0 || res.Unchanged != 4 || res.Generation != 2 || res.SwitchingTime != 0 {
		t.Fatalf("no-op apply = %+v", res)
	}
	if s3 := sw.Stats(); s3 != s2 {
		t.Fatalf("no-op apply called the driver: %+v -> %+v", s2, s3)
	}
	if got := hwConnects(t, sw); got != "0-1,2-3,6-8,10-11" {
		t.Fatalf("switch holds %s", got)
	}
}

func TestIdempotentRequestID(t *testing.T) {
	sw, _, c := setup(t, 8, 0)
	ctx := ctxT(t)
	first, err := c.Apply(ctx, "phase-1", mustParse(t, "0-1,2-3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, "phase-2", mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	st := sw.Stats()
	// Same id, same target (another order and orientation): the recorded
	// result, nothing switched, even though the installed set changed since.
	again, err := c.Apply(ctx, "phase-1", mustParse(t, "3-2,1-0"))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Generation != first.Generation || again.Added != first.Added {
		t.Fatalf("replay = %+v, first = %+v", again, first)
	}
	if sw.Stats() != st {
		t.Fatal("a replayed request switched")
	}
	// Same id, different target.
	_, err = c.Apply(ctx, "phase-1", mustParse(t, "0-1,2-4"))
	wantCode(t, err, codes.InvalidArgument, "reused request id")
	if !strings.Contains(err.Error(), "different target") {
		t.Fatalf("unclear error: %v", err)
	}
	if top, _ := c.GetTopology(ctx); ocs.FormatConnects(top.Connects) != "0-1" {
		t.Fatalf("topology = %v", top.Connects)
	}
}

func TestRollbackWhenSwitchFailsHalfway(t *testing.T) {
	sw, _, c := setup(t, 16, 2*time.Millisecond)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, "base", mustParse(t, "0-1,2-3")); err != nil {
		t.Fatal(err)
	}
	sw.FailNextApply(1) // one of the three new connects is made, then the switch fails
	_, err := c.Apply(ctx, "next", mustParse(t, "0-1,4-5,6-7,8-9"))
	wantCode(t, err, codes.Aborted, "apply with a failing switch")
	if !strings.Contains(err.Error(), "rolled back to generation 1") {
		t.Fatalf("unclear error: %v", err)
	}
	top, err := c.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if top.Generation != 1 || ocs.FormatConnects(top.Connects) != "0-1,2-3" {
		t.Fatalf("topology after rollback = %d %v", top.Generation, top.Connects)
	}
	if got := hwConnects(t, sw); got != "0-1,2-3" {
		t.Fatalf("switch holds %s after rollback", got)
	}
	// The failed request was not recorded: retrying it runs it.
	res, err := c.Apply(ctx, "next", mustParse(t, "0-1,4-5,6-7,8-9"))
	if err != nil || res.Replayed || res.Generation != 2 {
		t.Fatalf("retry after rollback = %+v, %v", res, err)
	}
	if got := hwConnects(t, sw); got != "0-1,4-5,6-7,8-9" {
		t.Fatalf("switch holds %s", got)
	}
}

func TestFailedAndDrainedPortsRejected(t *testing.T) {
	sw, _, c := setup(t, 8, 0)
	ctx := ctxT(t)
	if err := sw.FailPort(3); err != nil {
		t.Fatal(err)
	}
	_, err := c.Apply(ctx, "f", mustParse(t, "2-3"))
	wantCode(t, err, codes.FailedPrecondition, "apply with a failed port")
	if !strings.Contains(err.Error(), "failed ports [3]") {
		t.Fatalf("unclear error: %v", err)
	}

	if _, err := c.Drain(ctx, 5, false); err != nil {
		t.Fatal(err)
	}
	_, err = c.Apply(ctx, "d", mustParse(t, "4-5"))
	wantCode(t, err, codes.FailedPrecondition, "apply with a drained port")
	if sw.Stats().Applies != 0 {
		t.Fatal("rejected applies reached the switch")
	}
	top, _ := c.GetTopology(ctx)
	if !slices.Equal(top.PortsIn(ocs.PortFailed), []int{3}) || !slices.Equal(top.PortsIn(ocs.PortDrained), []int{5}) {
		t.Fatalf("port states: %+v", top.PortStates)
	}

	// Draining a port with a circuit: refused without force.
	if _, err := c.Apply(ctx, "c", mustParse(t, "0-1,6-7")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Drain(ctx, 6, false)
	wantCode(t, err, codes.FailedPrecondition, "drain of a connected port")
	ch, err := c.Drain(ctx, 6, true)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Removed == nil || *ch.Removed != (topo.Circuit{A: 6, B: 7}) || ch.Port.State != ocs.PortDrained || ch.Generation != 2 {
		t.Fatalf("forced drain = %+v", ch)
	}
	if got := hwConnects(t, sw); got != "0-1" {
		t.Fatalf("switch holds %s", got)
	}
	// Idempotent drain and undrain.
	if ch, err := c.Drain(ctx, 6, false); err != nil || ch.Generation != 2 {
		t.Fatalf("second drain = %+v, %v", ch, err)
	}
	for range 2 {
		ch, err := c.Undrain(ctx, 5)
		if err != nil || ch.Port.State != ocs.PortUp {
			t.Fatalf("undrain = %+v, %v", ch, err)
		}
	}
	if _, err := c.Apply(ctx, "u", mustParse(t, "0-1,4-5")); err != nil {
		t.Fatalf("apply on an undrained port: %v", err)
	}
	// A repaired port is usable again.
	if err := sw.RepairPort(3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, "r", mustParse(t, "0-1,4-5,2-3")); err != nil {
		t.Fatalf("apply on a repaired port: %v", err)
	}
}

// quiet is a driver that never signals health changes: the controller
// learns of them only when it reads FailedPorts before a change.
type quiet struct{ *ocs.Emulated }

func (quiet) Changes() <-chan struct{} { return nil }

// TestHealthReadBeforeEveryChange: a port repaired since the last read is
// usable at once, a port failed since is refused, without any signal.
func TestHealthReadBeforeEveryChange(t *testing.T) {
	sw := newSwitch(t, 8, 0)
	addr, _ := startServer(t, quiet{sw}, ocs.ServerConfig{})
	c := dial(t, addr)
	ctx := ctxT(t)
	sw.FailPort(3)
	_, err := c.Apply(ctx, "a", mustParse(t, "2-3"))
	wantCode(t, err, codes.FailedPrecondition, "apply on a failed port")
	sw.RepairPort(3)
	if _, err := c.Apply(ctx, "b", mustParse(t, "2-3")); err != nil {
		t.Fatalf("apply on a repaired port: %v", err)
	}
	sw.FailPort(4)
	_, err = c.Apply(ctx, "c", mustParse(t, "2-3,4-5"))
	wantCode(t, err, codes.FailedPrecondition, "apply on a newly failed port")
}

func TestPersistenceAcrossRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "ocs.state")
	ctx := ctxT(t)
	cfg := ocs.ServerConfig{StatePath: state, Token: testToken}

	var first ocs.ApplyResult
	serveUntilStopped(t, newSwitch(t, 16, 0), cfg, func(c1 *ocs.Client) {
		var err error
		if first, err = c1.Apply(ctx, "keep", mustParse(t, "0-5,1-7,2-9")); err != nil {
			t.Fatal(err)
		}
		if _, err := c1.Drain(ctx, 12, false); err != nil {
			t.Fatal(err)
		}
		// A second controller cannot take the same state file.
		if _, err := ocs.NewServer(newSwitch(t, 16, 0), cfg); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("second controller on the same state: %v", err)
		}
	})

	// A new controller with a fresh (empty) switch on the same state file.
	sw2 := newSwitch(t, 16, 0)
	addr, _ := startServer(t, sw2, cfg)
	c2 := dial(t, addr, ocs.WithToken(testToken))
	top, err := c2.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if top.Generation != first.Generation || ocs.FormatConnects(top.Connects) != "0-5,1-7,2-9" {
		t.Fatalf("restarted topology = %d %v", top.Generation, top.Connects)
	}
	if !slices.Equal(top.PortsIn(ocs.PortDrained), []int{12}) {
		t.Fatalf("drains lost: %v", top.PortsIn(ocs.PortDrained))
	}
	// Reconciled: the new switch holds the persisted set.
	if got := hwConnects(t, sw2); got != "0-5,1-7,2-9" {
		t.Fatalf("switch holds %s after restart", got)
	}
	applies := sw2.Stats().Applies
	again, err := c2.Apply(ctx, "keep", mustParse(t, "0-5,1-7,2-9"))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Generation != first.Generation || again.Added != 3 {
		t.Fatalf("replay after restart = %+v", again)
	}
	if sw2.Stats().Applies != applies {
		t.Fatal("replay after restart switched")
	}
	_, err = c2.Apply(ctx, "keep", mustParse(t, "0-5"))
	wantCode(t, err, codes.InvalidArgument, "reused id after restart")

}

// serveUntilStopped serves sw with cfg, runs body with a client of it,
// then stops the controller (releasing its state file) and checks that
// Serve returned cleanly.
func serveUntilStopped(t *testing.T, sw ocs.Switch, cfg ocs.ServerConfig, body func(c *ocs.Client)) {
	t.Helper()
	srv, err := ocs.NewServer(sw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), lis) }()
	body(dial(t, lis.Addr().String(), ocs.WithToken(cfg.Token)))
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

func TestStateForOtherSwitchRefused(t *testing.T) {
	state := filepath.Join(t.TempDir(), "ocs.state")
	sw := newSwitch(t, 16, 0)
	addr, srv := startServer(t, sw, ocs.ServerConfig{StatePath: state})
	if _, err := dial(t, addr).Apply(ctxT(t), "x", mustParse(t, "0-15")); err != nil {
		t.Fatal(err)
	}
	srv.Stop(context.Background())
	_, err := ocs.NewServer(newSwitch(t, 8, 0), ocs.ServerConfig{StatePath: state})
	if err == nil || !strings.Contains(err.Error(), "16-port") {
		t.Fatalf("state for a 16-port switch on an 8-port switch: %v", err)
	}
}

// TestReconcileAdoptsSwitch: when the persisted set cannot be installed
// (a port died while the controller was down) the controller adopts what
// the switch holds instead of refusing to start.
func TestReconcileAdoptsSwitch(t *testing.T) {
	state := filepath.Join(t.TempDir(), "ocs.state")
	addr, srv := startServer(t, newSwitch(t, 8, 0), ocs.ServerConfig{StatePath: state})
	if _, err := dial(t, addr).Apply(ctxT(t), "x", mustParse(t, "0-1,2-3")); err != nil {
		t.Fatal(err)
	}
	srv.Stop(context.Background())

	sw := newSwitch(t, 8, 0)
	sw.FailPort(3)
	srv2, err := ocs.NewServer(sw, ocs.ServerConfig{StatePath: state})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Stop(context.Background())
	if err := srv2.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	top := srv2.Topology()
	if got := ocs.FormatConnects(top.Connects); got != hwConnects(t, sw) || top.Generation != 2 {
		t.Fatalf("adopted %s (generation %d), switch holds %s", got, top.Generation, hwConnects(t, sw))
	}
}

// TestFirstStartAdoptsSwitch: a controller without persisted state takes
// the circuits the switch already holds as installed, instead of tearing
// them down.
func TestFirstStartAdoptsSwitch(t *testing.T) {
	for _, state := range []string{"", filepath.Join(t.TempDir(), "new.state")} {
		sw := newSwitch(t, 8, 0)
		if _, err := sw.Apply(context.Background(), nil, mustParse(t, "0-4,2-6")); err != nil {
			t.Fatal(err)
		}
		srv, err := ocs.NewServer(sw, ocs.ServerConfig{StatePath: state})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Reconcile(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		top := srv.Topology()
		srv.Stop(context.Background())
		if ocs.FormatConnects(top.Connects) != "0-4,2-6" || top.Generation != 1 || hwConnects(t, sw) != "0-4,2-6" {
			t.Fatalf("state %q: adopted %v (generation %d), switch holds %s", state, top.Connects, top.Generation, hwConnects(t, sw))
		}
		if sw.Stats().Applies != 1 {
			t.Fatalf("state %q: the controller switched at start", state)
		}
	}
}

func TestWatchEvents(t *testing.T) {
	sw, _, c := setup(t, 8, 0)
	ctx := ctxT(t)
	if _, err := c.Apply(ctx, "before", mustParse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	events := make(chan ocs.Event, 64)
	wctx, cancel := context.WithCancel(ctx)
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- c.Watch(wctx, func(ev ocs.Event) error { events <- ev; return nil })
	}()
	next := func() ocs.Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
			return ocs.Event{}
		}
	}
	snap := next()
	if snap.Type != ocs.EventSnapshot || snap.Snapshot == nil || ocs.FormatConnects(snap.Snapshot.Connects) != "0-1" || snap.Generation != 1 {
		t.Fatalf("first event = %+v", snap)
	}
	if _, err := c.Apply(ctx, "after", mustParse(t, "2-3")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 3 {
		got = append(got, next().String())
	}
	want := []string{"generation 2 circuit-removed 0-1", "generation 2 circuit-added 2-3", "generation 2 generation"}
	if !slices.Equal(got, want) {
		t.Fatalf("apply events = %q, want %q", got, want)
	}
	if _, err := c.Drain(ctx, 7, false); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != ocs.EventPortDrained || ev.Port != 7 {
		t.Fatalf("drain event = %v", ev)
	}
	if _, err := c.Undrain(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != ocs.EventPortUndrained || ev.Port != 7 {
		t.Fatalf("undrain event = %v", ev)
	}
	sw.FailPort(4) // reported asynchronously through Switch.Changes
	if ev := next(); ev.Type != ocs.EventPortFailed || ev.Port != 4 {
		t.Fatalf("failure event = %v", ev)
	}
	sw.RepairPort(4)
	if ev := next(); ev.Type != ocs.EventPortUp || ev.Port != 4 {
		t.Fatalf("repair event = %v", ev)
	}
	cancel()
	if err := <-watchErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch after cancel = %v", err)
	}
}

func TestWatchEndsOnStop(t *testing.T) {
	sw := newSwitch(t, 4, 0)
	addr, srv := startServer(t, sw, ocs.ServerConfig{})
	c := dial(t, addr)
	started := make(chan struct{})
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- c.Watch(ctxT(t), func(ev ocs.Event) error {
			if ev.Type == ocs.EventSnapshot {
				close(started)
			}
			return nil
		})
	}()
	<-started
	if err := srv.Stop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-watchErr:
		wantCode(t, err, codes.Unavailable, "watch when the controller stops")
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end when the controller stopped")
	}
}

func TestConcurrentAppliesSerialize(t *testing.T) {
	sw, _, c := setup(t, 32, time.Millisecond)
	ctx := ctxT(t)
	targets := []string{"0-1,2-3", "0-2,1-3", "4-5", "0-1,2-3,4-5,6-7", "none", "8-9,10-11,12-13"}
	var wg sync.WaitGroup
	errs := make(chan error, len(targets))
	for i, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Apply(ctx, "c"+string(rune('a'+i)), mustParse(t, tg))
			errs <- err
		}()
	}
	go func() { // readers run alongside
		for range 20 {
			c.GetTopology(ctx)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	top, _ := c.GetTopology(ctx)
	final := ocs.FormatConnects(top.Connects)
	if got := hwConnects(t, sw); got != final {
		t.Fatalf("controller says %s, switch holds %s", final, got)
	}
	if !slices.ContainsFunc(targets, func(tg string) bool { return ocs.FormatConnects(mustParse(t, tg)) == final }) {
		t.Fatalf("final topology %s is none of the targets", final)
	}
}

// panicky is a driver that panics while switching.
type panicky struct{ *ocs.Emulated }

func (p panicky) Apply(context.Context, []topo.Circuit, []topo.Circuit) (ocs.Progress, error) {
	panic("driver bug")
}

func TestDriverPanicIsAnError(t *testing.T) {
	addr, _ := startServer(t, panicky{newSwitch(t, 4, 0)}, ocs.ServerConfig{})
	c := dial(t, addr)
	_, err := c.Apply(ctxT(t), "p", mustParse(t, "0-1"))
	wantCode(t, err, codes.Internal, "apply through a panicking driver")
	// The controller re-read the switch (empty) and still serves.
	top, err := c.GetTopology(ctxT(t))
	if err != nil || len(top.Connects) != 0 {
		t.Fatalf("after a driver panic: %+v, %v", top, err)
	}
}

func TestParseConnects(t *testing.T) {
	cs, err := ocs.ParseConnects("0-5,1-7 9-2")
	if err != nil || ocs.FormatConnects(cs) != "0-5,1-7,9-2" {
		t.Fatalf("ParseConnects = %v, %v", cs, err)
	}
	if cs, err := ocs.ParseConnects("none"); err != nil || len(cs) != 0 {
		t.Fatalf("none = %v, %v", cs, err)
	}
	for _, bad := range []string{"0", "a-b", "1-", "-1-2", "0-99999999999"} {
		if _, err := ocs.ParseConnects(bad); err == nil {
			t.Errorf("ParseConnects(%q) accepted", bad)
		}
	}
}
