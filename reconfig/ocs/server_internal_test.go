package ocs

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/occl/occl/reconfig/ocspb"
	"github.com/occl/occl/topo"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func parse(t *testing.T, s string) []topo.Circuit {
	t.Helper()
	cs, err := ParseConnects(s)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// setStateFS replaces the rename and directory sync steps of state writes
// (nil keeps the real one) until the test ends.
func setStateFS(t *testing.T, rename func(oldpath, newpath string) error, sync func(dir string) error) {
	saved := stateFS
	t.Cleanup(func() { stateFS = saved })
	if rename != nil {
		stateFS.rename = rename
	}
	if sync != nil {
		stateFS.syncDir = sync
	}
}

// persistedServer returns a reconciled controller of an 8-port emulated
// switch with its state in a temporary directory, holding 0-1 as
// generation 1 (request id "base").
func persistedServer(t *testing.T) (*Server, *Emulated, ServerConfig) {
	t.Helper()
	ctx := testCtx(t)
	sw, err := NewEmulated(8, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ServerConfig{StatePath: filepath.Join(t.TempDir(), "ocs.state")}
	s, err := NewServer(sw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.apply(ctx, "base", parse(t, "0-1")); err != nil {
		t.Fatal(err)
	}
	return s, sw, cfg
}

// checkAgree checks that the switch, the controller and the state file all
// hold connects as generation gen, that the state file records request id
// when recorded is set and that no temporary file is left behind.
func checkAgree(t *testing.T, s *Server, sw *Emulated, connects string, gen uint64, id string, recorded bool) {
	t.Helper()
	hw, err := sw.Connections(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatConnects(hw); got != connects {
		t.Errorf("switch holds %s, want %s", got, connects)
	}
	if top := s.Topology(); FormatConnects(top.Connects) != connects || top.Generation != gen {
		t.Errorf("controller holds %s as generation %d, want %s as %d", FormatConnects(top.Connects), top.Generation, connects, gen)
	}
	d, ok, err := loadState(s.cfg.StatePath)
	if err != nil || !ok {
		t.Fatalf("loading the state file: ok=%v, %v", ok, err)
	}
	if got := FormatConnects(d.Connects); got != connects || d.Generation != gen {
		t.Errorf("state file holds %s as generation %d, want %s as %d", got, d.Generation, connects, gen)
	}
	if _, ok := d.lookup(id); ok != recorded {
		t.Errorf("state file records request %q: %v, want %v", id, ok, recorded)
	}
	entries, err := os.ReadDir(filepath.Dir(s.cfg.StatePath))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary state file left behind: %s", e.Name())
		}
	}
}

// TestDirSyncFailureKeepsPreviousState: when the directory sync fails after
// the new state was renamed into place, the controller rolls the switch
// back and the state file must hold the previous state too, so that a
// restart does not take the rolled-back circuits as installed.
func TestDirSyncFailureKeepsPreviousState(t *testing.T) {
	ctx := testCtx(t)
	s, sw, cfg := persistedServer(t)
	errSync := errors.New("injected directory sync failure")
	syncs := 0
	setStateFS(t, nil, func(dir string) error {
		syncs++
		if syncs == 1 {
			return errSync
		}
		return syncDir(dir)
	})

	_, err := s.apply(ctx, "more", parse(t, "0-1,2-3"))
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), errSync.Error()) {
		t.Fatalf("apply with a failing directory sync: %v, want Aborted naming the sync failure", err)
	}
	checkAgree(t, s, sw, "0-1", 1, "more", false)

	// A restart reads the previous state and the retry runs again.
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := NewServer(sw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop(context.Background())
	if err := s2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	checkAgree(t, s2, sw, "0-1", 1, "more", false)
	res, err := s2.apply(ctx, "more", parse(t, "0-1,2-3"))
	if err != nil || res.Replayed || res.Generation != 2 || res.Added != 1 {
		t.Fatalf("retry after restart = %+v, %v", res, err)
	}
	checkAgree(t, s2, sw, "0-1,2-3", 2, "more", true)
}

// TestDirSyncFailureKeepsChangeWhenStateCannotBeRestored: when the
// directory sync fails after the rename and the previous state cannot be
// written back, the state file holds the new state; the controller keeps
// the change so that the switch, the controller and the file agree, and
// reports the failure.
func TestDirSyncFailureKeepsChangeWhenStateCannotBeRestored(t *testing.T) {
	ctx := testCtx(t)
	s, sw, _ := persistedServer(t)
	errSync := errors.New("injected directory sync failure")
	errRename := errors.New("injected rename failure")
	syncs, renames := 0, 0
	setStateFS(t, func(oldpath, newpath string) error {
		renames++
		if renames == 2 { // putting the previous state back
			return errRename
		}
		return os.Rename(oldpath, newpath)
	}, func(dir string) error {
		syncs++
		if syncs == 1 {
			return errSync
		}
		return syncDir(dir)
	})

	_, err := s.apply(ctx, "more", parse(t, "0-1,2-3"))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), errSync.Error()) ||
		!strings.Contains(err.Error(), errRename.Error()) {
		t.Fatalf("apply with a failing directory sync and restore: %v, want Internal naming both failures", err)
	}
	checkAgree(t, s, sw, "0-1,2-3", 2, "more", true)
	res, err := s.apply(ctx, "more", parse(t, "0-1,2-3"))
	if err != nil || !res.Replayed || res.Generation != 2 {
		t.Fatalf("retry = %+v, %v; want the recorded result replayed", res, err)
	}
}

// TestSaveStateRestoresOnDirSyncFailure checks saveState alone: after a
// failed directory sync the file reads the previous state, or the new one
// (errStateKept) when there is no previous state to write back.
func TestSaveStateRestoresOnDirSyncFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ocs.state")
	prev := sampleState()
	if err := saveState(path, prev, nil); err != nil {
		t.Fatal(err)
	}
	next := prev.clone()
	next.Generation++
	errSync := errors.New("injected directory sync failure")
	setStateFS(t, nil, func(string) error { return errSync })

	err := saveState(path, &next, prev)
	if !errors.Is(err, errSync) || errors.Is(err, errStateKept) {
		t.Fatalf("saveState with a failing directory sync = %v, want %v, not errStateKept", err, errSync)
	}
	if d, _, err := loadState(path); err != nil || d.Generation != prev.Generation {
		t.Fatalf("state file after a restore: %+v, %v; want generation %d", d, err, prev.Generation)
	}
	err = saveState(path, &next, nil)
	if !errors.Is(err, errSync) || !errors.Is(err, errStateKept) {
		t.Fatalf("saveState without a previous state = %v, want %v and errStateKept", err, errSync)
	}
	if d, _, err := loadState(path); err != nil || d.Generation != next.Generation {
		t.Fatalf("state file kept: %+v, %v; want generation %d", d, err, next.Generation)
	}
}

// errAccept is a non-temporary Accept failure.
var errAccept = errors.New("injected accept failure")

// failingListener blocks in Accept until fail is closed, then fails with
// errAccept.
type failingListener struct {
	fail      chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func newFailingListener() *failingListener {
	return &failingListener{fail: make(chan struct{}), closed: make(chan struct{})}
}

func (l *failingListener) Accept() (net.Conn, error) {
	select {
	case <-l.fail:
		return nil, errAccept
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *failingListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *failingListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
}

// healthStatus returns the health service's status of service.
func healthStatus(t *testing.T, s *Server, service string) healthgrpc.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := s.health.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health check %q: %v", service, err)
	}
	return r.GetStatus()
}

// TestHealthNotServingAfterServeFails: when serving fails (the listener
// stops accepting), the health service must stop reporting SERVING.
func TestHealthNotServingAfterServeFails(t *testing.T) {
	ctx := testCtx(t)
	sw, err := NewEmulated(4, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(sw, ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	lis := newFailingListener()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, lis) }()

	services := []string{"", ocspb.OCS_ServiceDesc.ServiceName}
	for healthStatus(t, s, services[0]) != healthgrpc.HealthCheckResponse_SERVING {
		select {
		case err := <-served:
			t.Fatalf("Serve returned %v before the listener failed", err)
		case <-ctx.Done():
			t.Fatal("the controller never reported SERVING")
		case <-time.After(time.Millisecond):
		}
	}
	close(lis.fail)
	select {
	case err := <-served:
		if !errors.Is(err, errAccept) {
			t.Fatalf("Serve = %v, want %v", err, errAccept)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return after the listener failed")
	}
	for _, svc := range services {
		if st := healthStatus(t, s, svc); st != healthgrpc.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q after Serve failed = %v, want NOT_SERVING", svc, st)
		}
	}
}
