package ocs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/occl/occl/reconfig/ocspb"
	"github.com/occl/occl/topo"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Defaults of ServerConfig.
const (
	DefaultRequestLogSize  = 1024
	DefaultRollbackTimeout = 10 * time.Second
	DefaultStopTimeout     = 5 * time.Second
	// watchBuffer is how many events a watcher may lag behind before the
	// controller ends its stream with RESOURCE_EXHAUSTED.
	watchBuffer = 4096
)

// ServerConfig configures a Server. The zero value is usable: no
// persistence, no authentication, no logging.
type ServerConfig struct {
	// StatePath is the file holding the installed cross-connects, the
	// drained ports, the generation and the request-id log. It is written
	// atomically (temporary file, fsync, rename, fsync of the directory)
	// before any change is acknowledged, and read by NewServer, so that a
	// restarted controller knows what is installed. A lock file
	// StatePath+".lock" keeps a second controller away. Empty means the
	// state lives in memory only.
	StatePath string
	// Token, when not empty, is the bearer token every call except the
	// health service must carry ("authorization: Bearer <token>").
	Token string
	// Logger receives the controller's log; nil discards it. Successful
	// calls are logged at Debug, changes of the switch at Info.
	Logger *slog.Logger
	// RequestLogSize is how many request ids are remembered for idempotent
	// replay (least recently used are forgotten); 0 means
	// DefaultRequestLogSize.
	RequestLogSize int
	// RollbackTimeout bounds a rollback after a failed apply, which runs
	// even when the caller's context is done; 0 means
	// DefaultRollbackTimeout.
	RollbackTimeout time.Duration
	// StopTimeout bounds the graceful stop when Serve's context is done;
	// 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	// GRPCOptions are added to the gRPC server's options, e.g.
	// grpc.Creds for TLS.
	GRPCOptions []grpc.ServerOption
	// Registry, when not nil, receives the controller's Prometheus
	// metrics (see MetricApplySeconds and the other Metric constants) and
	// the gRPC server metrics. Use a registry of the controller's own, not
	// the global one: a second Server on the same registry fails.
	Registry prometheus.Registerer
}

// Server is the OCS controller: a gRPC service (occl.ocs.v1.OCS plus the
// standard health service) that owns one Switch. See the package
// documentation for its guarantees.
type Server struct {
	sw     Switch
	cfg    ServerConfig
	log    *slog.Logger
	ports  int
	grpc   *grpc.Server
	health *health.Server
	lock   *os.File
	met    *serverMetrics // nil without ServerConfig.Registry

	sem      chan struct{} // a token held by the one change in progress
	healthMu sync.Mutex    // serializes reading and publishing port health

	mu         sync.Mutex // guards the fields below
	dur        durable    // committed state, as persisted
	peer       []int      // peer[p] from dur.Connects, -1 when free
	drained    []bool     // from dur.Drained
	failed     []bool     // as last read from the switch
	dirty      bool       // the switch may not hold dur.Connects
	loaded     bool       // dur came from the state file
	reconciled bool
	subs       map[*subscriber]struct{}
	stopped    bool

	done      chan struct{} // closed when Stop begins
	stopDone  chan struct{} // closed when Stop is done
	watchOnce sync.Once     // starts the health watch
	stopOnce  sync.Once
	stopErr   error
	wg        sync.WaitGroup
}

// NewServer returns a controller for sw. It loads the state file (if any),
// which must have been written for a switch with the same number of ports,
// and takes its lock; it does not touch the switch. Serve (or an earlier
// Reconcile) makes the switch hold the persisted cross-connects. Call Stop
// to release the state file.
func NewServer(sw Switch, cfg ServerConfig) (*Server, error) {
	if sw == nil {
		return nil, errors.New("ocs: NewServer: nil Switch")
	}
	ports, err := driverPorts(sw)
	if err != nil {
		return nil, fmt.Errorf("ocs: NewServer: %w", err)
	}
	if ports < 2 || ports > maxPorts {
		return nil, fmt.Errorf("ocs: NewServer: switch has %d ports, want 2 to %d", ports, maxPorts)
	}
	if cfg.RequestLogSize <= 0 {
		cfg.RequestLogSize = DefaultRequestLogSize
	}
	cfg.RequestLogSize = min(cfg.RequestLogSize, maxRequestLog)
	if cfg.RollbackTimeout <= 0 {
		cfg.RollbackTimeout = DefaultRollbackTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	s := &Server{
		sw:       sw,
		cfg:      cfg,
		log:      cfg.Logger,
		ports:    ports,
		sem:      make(chan struct{}, 1),
		failed:   make([]bool, ports),
		subs:     make(map[*subscriber]struct{}),
		done:     make(chan struct{}),
		stopDone: make(chan struct{}),
		dur:      durable{Ports: ports},
		health:   health.NewServer(),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.StatePath != "" {
		lock, err := lockState(cfg.StatePath)
		if err != nil {
			return nil, fmt.Errorf("ocs: NewServer: %w", err)
		}
		d, ok, err := loadState(cfg.StatePath)
		if err == nil && ok && d.Ports != ports {
			err = fmt.Errorf("%s was written for a %d-port switch, this switch has %d ports", cfg.StatePath, d.Ports, ports)
		}
		if err != nil {
			unlockState(lock)
			return nil, fmt.Errorf("ocs: NewServer: loading state: %w", err)
		}
		s.lock = lock
		if ok {
			if n := len(d.Requests) - cfg.RequestLogSize; n > 0 {
				d.Requests = d.Requests[n:]
			}
			s.dur = *d
			s.loaded = true
			s.log.Info("loaded OCS state", "path", cfg.StatePath, "generation", d.Generation,
				"connects", len(d.Connects), "drained", len(d.Drained), "requests", len(d.Requests))
		}
	}
	s.index()
	if cfg.Registry != nil {
		m, err := newServerMetrics(s, cfg.Registry)
		if err != nil {
			unlockState(s.lock)
			return nil, fmt.Errorf("ocs: NewServer: registering metrics: %w", err)
		}
		s.met = m
	}

	unary, stream := s.interceptors()
	opts := append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}, cfg.GRPCOptions...)
	s.grpc = grpc.NewServer(opts...)
	ocspb.RegisterOCSServer(s.grpc, &service{s: s})
	healthgrpc.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus("", healthgrpc.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(ocspb.OCS_ServiceDesc.ServiceName, healthgrpc.HealthCheckResponse_NOT_SERVING)
	if s.met != nil {
		s.met.grpc.InitializeMetrics(s.grpc)
	}
	return s, nil
}

// index recomputes peer and drained from dur. s.mu is held (or s is not
// shared yet).
func (s *Server) index() {
	s.peer = make([]int, s.ports)
	for i := range s.peer {
		s.peer[i] = -1
	}
	for _, c := range s.dur.Connects {
		s.peer[c.A], s.peer[c.B] = c.B, c.A
	}
	s.drained = make([]bool, s.ports)
	for _, p := range s.dur.Drained {
		s.drained[p] = true
	}
}

// Reconcile makes the switch hold the persisted cross-connects: it reads
// what the switch holds and applies the difference. If that fails part-way,
// the controller adopts what the switch then holds as the installed set
// (logged as a warning, generation bumped) rather than refuse to start; it
// fails only when it cannot read the switch. Without persisted state (no
// StatePath, or no file yet) it adopts what the switch holds instead of
// tearing it down. Serve calls Reconcile if it was not called before.
func (s *Server) Reconcile(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return fmt.Errorf("ocs: reconcile: %w", err)
	}
	defer s.release()
	if err := s.refreshFailed(ctx); err != nil {
		return fmt.Errorf("ocs: reconcile: %w", err)
	}
	hw, err := s.readSwitch(ctx)
	if err != nil {
		return fmt.Errorf("ocs: reconcile: %w", err)
	}
	s.mu.Lock()
	want, loaded := s.dur.Connects, s.loaded
	s.mu.Unlock()
	remove, add, _ := diffConnects(hw, want)
	if !loaded {
		// Nothing persisted: what the switch holds is the truth.
		if err := s.resync(ctx); err != nil {
			return fmt.Errorf("ocs: reconcile: %w", err)
		}
	} else if len(remove)+len(add) > 0 {
		s.log.Info("reconciling the switch with the persisted state",
			"installed_on_switch", FormatConnects(hw), "persisted", FormatConnects(want))
		if _, err := s.switchApply(ctx, remove, add); err != nil {
			s.log.Warn("reconciling the switch failed; adopting what it holds", "err", err)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RollbackTimeout)
			defer cancel()
			if err := s.resync(rctx); err != nil {
				return fmt.Errorf("ocs: reconcile: %w", err)
			}
		}
	}
	s.mu.Lock()
	s.dirty = false
	s.reconciled = true
	s.mu.Unlock()
	return nil
}

// Serve reconciles the switch (unless Reconcile was called), reports
// SERVING on the health service and serves gRPC on lis until ctx is done or
// Stop is called. When ctx is done it stops gracefully, waiting at most
// ServerConfig.StopTimeout for calls in flight. It returns nil once the
// controller has stopped (state file unlocked), whoever stopped it. If
// serving fails (lis stops accepting), the health service reports
// NOT_SERVING and Serve returns the error; Stop must still be called.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	s.mu.Lock()
	stopped, reconciled := s.stopped, s.reconciled
	s.mu.Unlock()
	if stopped {
		return errors.New("ocs: Serve: server stopped")
	}
	if !reconciled {
		if err := s.Reconcile(ctx); err != nil {
			return err
		}
	}
	s.watchOnce.Do(s.startHealthWatch)
	s.health.SetServingStatus("", healthgrpc.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ocspb.OCS_ServiceDesc.ServiceName, healthgrpc.HealthCheckResponse_SERVING)
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), s.cfg.StopTimeout)
			defer cancel()
			s.Stop(sctx)
		case <-s.done:
		}
	}()
	if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		// Nothing serves on lis any more: stop reporting SERVING.
		s.health.SetServingStatus("", healthgrpc.HealthCheckResponse_NOT_SERVING)
		s.health.SetServingStatus(ocspb.OCS_ServiceDesc.ServiceName, healthgrpc.HealthCheckResponse_NOT_SERVING)
		s.log.Error("serving gRPC failed", "addr", lis.Addr(), "err", err)
		return fmt.Errorf("ocs: serve: %w", err)
	}
	<-s.stopDone // grpc.Serve returns nil only once Stop began
	return nil
}

// Stop stops the controller: the health service reports NOT_SERVING, Watch
// streams end with UNAVAILABLE, calls in flight finish (until ctx is done,
// then they are cut), the state file is unlocked. It is safe to call more
// than once and without Serve.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.health.Shutdown()
		close(s.done)
		stopped := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			s.grpc.Stop()
			<-stopped
		}
		s.wg.Wait()
		// Wait for a change still running (a rollback after a cut call
		// is bounded by RollbackTimeout) before giving up the state file.
		s.sem <- struct{}{}
		s.stopErr = unlockState(s.lock)
		close(s.stopDone)
	})
	return s.stopErr
}

// Topology returns the controller's current view of the switch.
func (s *Server) Topology() *Topology {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topologyLocked()
}

func (s *Server) topologyLocked() *Topology {
	t := &Topology{
		Ports:      s.ports,
		Generation: s.dur.Generation,
		Connects:   slices.Clone(s.dur.Connects),
		PortStates: make([]PortStatus, s.ports),
	}
	if t.Connects == nil {
		t.Connects = []topo.Circuit{}
	}
	for p := range t.PortStates {
		t.PortStates[p] = s.portLocked(p)
	}
	return t
}

func (s *Server) portLocked(p int) PortStatus {
	st := PortStatus{Port: p, State: PortUp, Failed: s.failed[p], Drained: s.drained[p], Peer: s.peer[p]}
	switch {
	case st.Failed:
		st.State = PortFailed
	case st.Drained:
		st.State = PortDrained
	}
	return st
}

// acquire waits for the right to change the switch.
func (s *Server) acquire(ctx context.Context) error {
	select {
	case <-s.done:
		return status.Error(codes.Unavailable, "OCS controller is shutting down")
	default:
	}
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-s.done:
		return status.Error(codes.Unavailable, "OCS controller is shutting down")
	}
}

func (s *Server) release() { <-s.sem }

// errDriverPanic marks an error made from a panic in the switch driver.
var errDriverPanic = errors.New("switch driver panicked")

// switchApply calls the driver, turning a panic into an error.
func (s *Server) switchApply(ctx context.Context, remove, add []topo.Circuit) (prog Progress, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("switch driver panicked in Apply", "panic", p)
			prog, err = Progress{}, fmt.Errorf("%w: %v", errDriverPanic, p)
		}
	}()
	return s.sw.Apply(ctx, remove, add)
}

// readSwitch reads and checks the cross-connects the switch holds.
func (s *Server) readSwitch(ctx context.Context) (cs []topo.Circuit, err error) {
	defer func() {
		if p := recover(); p != nil {
			cs, err = nil, fmt.Errorf("%w: %v", errDriverPanic, p)
		}
	}()
	cs, err = s.sw.Connections(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the switch's cross-connects: %w", err)
	}
	cs = sortConnects(cs)
	used := make(map[int]bool, 2*len(cs))
	for _, c := range cs {
		if c.A < 0 || c.B >= s.ports || c.A == c.B || used[c.A] || used[c.B] {
			return nil, fmt.Errorf("the switch reports an impossible cross-connect %v", c)
		}
		used[c.A], used[c.B] = true, true
	}
	return cs, nil
}

// refreshFailed reads the failed ports from the switch and publishes the
// changes.
func (s *Server) refreshFailed(ctx context.Context) (err error) {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	var ports []int
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("%w: %v", errDriverPanic, p)
			}
		}()
		ports, err = s.sw.FailedPorts(ctx)
	}()
	if err != nil {
		return fmt.Errorf("reading the switch's port health: %w", err)
	}
	failed := make([]bool, s.ports)
	for _, p := range ports {
		if p < 0 || p >= s.ports {
			return fmt.Errorf("the switch reports a failed port %d out of range", p)
		}
		failed[p] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for p := range failed {
		if failed[p] == s.failed[p] {
			continue
		}
		typ := EventPortUp
		if failed[p] {
			typ = EventPortFailed
			s.log.Warn("switch port failed", "port", p)
		} else {
			s.log.Info("switch port recovered", "port", p)
		}
		ev := newEvent(typ, s.dur.Generation, now)
		ev.Port = uint32(p)
		s.publishLocked(ev)
	}
	s.failed = failed
	return nil
}

// driverPorts calls the driver's Ports, turning a panic into an error.
func driverPorts(sw Switch) (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			n, err = 0, fmt.Errorf("reading the switch's number of ports: %w: %v", errDriverPanic, p)
		}
	}()
	return sw.Ports(), nil
}

// driverChanges calls the driver's Changes; a panic counts as no signal
// (prepare reads the port health before every change anyway).
func (s *Server) driverChanges() (ch <-chan struct{}) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("switch driver panicked in Changes; port health is read before each change only", "panic", p)
			ch = nil
		}
	}()
	return s.sw.Changes()
}

// startHealthWatch follows the switch's change signals until Stop.
func (s *Server) startHealthWatch() {
	ch := s.driverChanges()
	if ch == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			select {
			case <-s.done:
				return
			case <-ch:
				ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RollbackTimeout)
				if err := s.refreshFailed(ctx); err != nil {
					s.log.Warn("reading port health", "err", err)
				}
				cancel()
			}
		}
	}()
}

// prepare readies a change: it re-reads the switch if its state is
// unknown and refreshes the failed ports. The caller holds the semaphore.
func (s *Server) prepare(ctx context.Context) error {
	s.mu.Lock()
	dirty := s.dirty
	s.mu.Unlock()
	if dirty {
		if err := s.resync(ctx); err != nil {
			return driverStatus(ctx, fmt.Errorf("the switch's state is unknown: %w", err))
		}
	}
	if err := s.refreshFailed(ctx); err != nil {
		return driverStatus(ctx, err)
	}
	return nil
}

// driverStatus turns an error reading the switch into a status: the
// context's code when ctx is done, else UNAVAILABLE.
func driverStatus(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.Errorf(status.FromContextError(ctx.Err()).Code(), "%v", err)
	}
	return status.Errorf(codes.Unavailable, "%v", err)
}

// resync adopts what the switch holds as the installed set. The caller
// holds the semaphore.
func (s *Server) resync(ctx context.Context) error {
	hw, err := s.readSwitch(ctx)
	if err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	cur := s.dur
	s.mu.Unlock()
	if slices.Equal(hw, cur.Connects) {
		s.mu.Lock()
		s.dirty = false
		s.mu.Unlock()
		return nil
	}
	next := cur.clone()
	next.Connects = hw
	next.Generation++
	// No previous state to put back on a failed write: a file holding
	// next agrees with the switch, and dirty makes the next change re-read
	// the switch and write again.
	if err := s.persist(&next, nil); err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		return fmt.Errorf("saving the switch's state: %w", err)
	}
	s.log.Warn("adopted the switch's cross-connects as the installed set",
		"generation", next.Generation, "connects", FormatConnects(hw))
	s.commit(cur, next)
	s.mu.Lock()
	s.dirty = false
	s.mu.Unlock()
	return nil
}

// persist writes d to the state file. On error the file holds prev, or d
// when the error wraps errStateKept (see saveState).
func (s *Server) persist(d, prev *durable) error {
	if s.cfg.StatePath == "" {
		return nil
	}
	defer s.met.observeStateWrite(time.Now())
	return saveState(s.cfg.StatePath, d, prev)
}

// commit publishes next as the installed state and sends the events of the
// change from cur.
func (s *Server) commit(cur, next durable) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dur = next
	s.index()
	now := time.Now()
	removed, added, _ := diffConnects(cur.Connects, next.Connects)
	for _, list := range []struct {
		typ EventType
		cs  []topo.Circuit
	}{{EventCircuitRemoved, removed}, {EventCircuitAdded, added}} {
		for _, c := range list.cs {
			ev := newEvent(list.typ, next.Generation, now)
			ev.Connect = connectToPB(c)
			s.publishLocked(ev)
		}
	}
	undrained, drained := diffInts(cur.Drained, next.Drained)
	for _, list := range []struct {
		typ   EventType
		ports []int
	}{{EventPortUndrained, undrained}, {EventPortDrained, drained}} {
		for _, p := range list.ports {
			ev := newEvent(list.typ, next.Generation, now)
			ev.Port = uint32(p)
			s.publishLocked(ev)
		}
	}
	if next.Generation != cur.Generation {
		s.publishLocked(newEvent(EventGeneration, next.Generation, now))
	}
}

// diffConnects returns the connects of from missing in to (remove), those of
// to missing in from (add) and the number in both. Both are sorted.
func diffConnects(from, to []topo.Circuit) (remove, add []topo.Circuit, unchanged int) {
	in := make(map[topo.Circuit]bool, len(from))
	for _, c := range from {
		in[c] = true
	}
	want := make(map[topo.Circuit]bool, len(to))
	for _, c := range to {
		want[c] = true
		if in[c] {
			unchanged++
		} else {
			add = append(add, c)
		}
	}
	for _, c := range from {
		if !want[c] {
			remove = append(remove, c)
		}
	}
	return remove, add, unchanged
}

// diffInts returns the elements of from missing in to and those of to
// missing in from.
func diffInts(from, to []int) (gone, added []int) {
	for _, x := range from {
		if !slices.Contains(to, x) {
			gone = append(gone, x)
		}
	}
	for _, x := range to {
		if !slices.Contains(from, x) {
			added = append(added, x)
		}
	}
	return gone, added
}

// checkTarget checks a normalized target against the switch: ports exist
// and are used once (INVALID_ARGUMENT), none is drained or, when health is
// set, failed (FAILED_PRECONDITION). Check health only after refreshFailed:
// the known failures may be stale.
func (s *Server) checkTarget(target []topo.Circuit, health bool) error {
	used := make(map[int]topo.Circuit, 2*len(target))
	for _, c := range target {
		for _, p := range [2]int{c.A, c.B} {
			if p < 0 || p >= s.ports {
				return status.Errorf(codes.InvalidArgument, "cross-connect %v: port %d does not exist (the switch has ports 0-%d)", c, p, s.ports-1)
			}
			if c.A == c.B {
				return status.Errorf(codes.InvalidArgument, "cross-connect %v joins port %d to itself", c, p)
			}
			if o, ok := used[p]; ok {
				return status.Errorf(codes.InvalidArgument, "port %d is used twice: by %v and %v", p, o, c)
			}
			used[p] = c
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var failed, drained []int
	for p := range used {
		if health && s.failed[p] {
			failed = append(failed, p)
		} else if s.drained[p] {
			drained = append(drained, p)
		}
	}
	switch {
	case len(failed) > 0 && len(drained) > 0:
		return status.Errorf(codes.FailedPrecondition, "target uses failed ports %v and drained ports %v", sortedInts(failed), sortedInts(drained))
	case len(failed) > 0:
		return status.Errorf(codes.FailedPrecondition, "target uses failed ports %v", sortedInts(failed))
	case len(drained) > 0:
		return status.Errorf(codes.FailedPrecondition, "target uses drained ports %v (undrain them first)", sortedInts(drained))
	}
	return nil
}

// apply is the Apply RPC.
func (s *Server) apply(ctx context.Context, id string, target []topo.Circuit) (ApplyResult, error) {
	if err := ocspb.ValidateRequestID(id); err != nil {
		return ApplyResult{}, status.Error(codes.InvalidArgument, err.Error())
	}
	defer s.met.observeApply(time.Now())
	target = sortConnects(target)
	hash := targetHash(target)
	if err := s.acquire(ctx); err != nil {
		return ApplyResult{}, err
	}
	defer s.release()

	s.mu.Lock()
	rec, seen := s.dur.lookup(id)
	s.mu.Unlock()
	if seen {
		if rec.Fenced {
			return ApplyResult{}, status.Errorf(codes.Aborted,
				"request id %q arrived after its rollback %q was applied: nothing was switched", id, RollbackRequestID(id))
		}
		if rec.Target != hash {
			return ApplyResult{}, status.Errorf(codes.InvalidArgument,
				"request id %q was already used for a different target; use a new request id", id)
		}
		s.mu.Lock()
		touched := s.dur.clone() // most recently used now; persisted with the next change
		touched.record(rec, s.cfg.RequestLogSize)
		s.dur = touched
		s.mu.Unlock()
		res := rec.Result
		res.Replayed = true
		return res, nil
	}
	if err := s.checkTarget(target, false); err != nil { // before touching the switch
		return ApplyResult{}, err
	}
	if err := s.prepare(ctx); err != nil {
		return ApplyResult{}, err
	}
	if err := s.checkTarget(target, true); err != nil { // with fresh port health
		return ApplyResult{}, err
	}
	undone, isRollback := strings.CutSuffix(id, RollbackSuffix)
	res, err := s.transition(ctx, target, func(next *durable, res ApplyResult) {
		if isRollback && undone != "" {
			if _, arrived := next.lookup(undone); !arrived {
				// The request this one undoes has not arrived: it must
				// not switch when it does.
				next.record(requestRecord{ID: undone, Fenced: true}, s.cfg.RequestLogSize)
			}
		}
		next.record(requestRecord{ID: id, Target: hash, Result: res}, s.cfg.RequestLogSize)
	})
	if err != nil {
		return ApplyResult{}, err
	}
	s.log.Info("applied cross-connects", "request_id", id, "generation", res.Generation,
		"added", res.Added, "removed", res.Removed, "unchanged", res.Unchanged, "switching_time", res.SwitchingTime)
	return res, nil
}

// transition switches from the installed set to target, all or nothing,
// and commits target together with edit's changes. The caller holds the
// semaphore and has checked target.
func (s *Server) transition(ctx context.Context, target []topo.Circuit, edit func(next *durable, res ApplyResult)) (ApplyResult, error) {
	s.mu.Lock()
	cur := s.dur
	s.mu.Unlock()
	remove, add, unchanged := diffConnects(cur.Connects, target)
	res := ApplyResult{Generation: cur.Generation, Added: len(add), Removed: len(remove), Unchanged: unchanged}
	changed := len(remove)+len(add) > 0
	var prog Progress
	if changed {
		start := time.Now()
		var err error
		prog, err = s.switchApply(ctx, remove, add)
		res.SwitchingTime = time.Since(start)
		s.met.observeSwitching(res.SwitchingTime)
		if err != nil {
			return ApplyResult{}, s.rollback(ctx, cur, len(remove)+len(add), prog, err)
		}
		res.Generation++
	}
	next := cur.clone()
	next.Connects = target
	next.Generation = res.Generation
	if edit != nil {
		edit(&next, res)
	}
	if err := s.persist(&next, &cur); err != nil {
		s.log.Error("saving the OCS state failed", "path", s.cfg.StatePath, "err", err)
		if errors.Is(err, errStateKept) {
			// The state file holds next and cannot be put back: keep the
			// change, so that the switch, the controller and the file
			// agree. Retrying the request id replays its result.
			s.commit(cur, next)
			return ApplyResult{}, status.Errorf(codes.Internal,
				"the change was made (generation %d) but the state file could not be made durable: %v",
				next.Generation, err)
		}
		if changed {
			return ApplyResult{}, s.rollback(ctx, cur, len(remove)+len(add), prog,
				fmt.Errorf("saving the state: %w", err))
		}
		return ApplyResult{}, status.Errorf(codes.Internal, "saving the controller state: %v", err)
	}
	s.commit(cur, next)
	return res, nil
}

// rollback undoes the progress of a failed switch apply and returns the
// error for the caller: ABORTED (or the context's code) when the switch is
// back at cur, INTERNAL when it is not.
func (s *Server) rollback(ctx context.Context, cur durable, total int, prog Progress, cause error) error {
	done := len(prog.Removed) + len(prog.Added)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RollbackTimeout)
	defer cancel()
	var rerr error
	if errors.Is(cause, errDriverPanic) {
		rerr = errors.New("the driver's progress is unknown")
	} else if done > 0 {
		s.log.Warn("switching failed; rolling back", "done", done, "of", total, "err", cause)
		_, rerr = s.switchApply(rctx, prog.Added, prog.Removed)
	}
	if rerr != nil {
		s.log.Error("rollback failed; re-reading the switch", "cause", cause, "err", rerr)
		if err := s.resync(rctx); err != nil {
			return status.Errorf(codes.Internal,
				"switching failed (%v) and rollback failed (%v); the switch's state is unknown (%v) and will be re-read before the next change",
				cause, rerr, err)
		}
		s.mu.Lock()
		gen := s.dur.Generation
		s.mu.Unlock()
		return status.Errorf(codes.Internal,
			"switching failed (%v) and rollback failed (%v); the controller adopted what the switch holds as generation %d",
			cause, rerr, gen)
	}
	code := codes.Aborted
	if ctx.Err() != nil {
		code = status.FromContextError(ctx.Err()).Code()
	}
	if done == 0 {
		return status.Errorf(code, "switching failed before any change; the installed set is still generation %d: %v",
			cur.Generation, cause)
	}
	return status.Errorf(code, "switching failed after %d of %d changes and was rolled back to generation %d: %v",
		done, total, cur.Generation, cause)
}

// portChange is Drain and Undrain.
func (s *Server) portChange(ctx context.Context, port uint32, drain, force bool) (*ocspb.PortResponse, error) {
	if port >= uint32(s.ports) {
		return nil, status.Errorf(codes.InvalidArgument, "port %d does not exist (the switch has ports 0-%d)", port, s.ports-1)
	}
	p := int(port)
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	s.mu.Lock()
	cur := s.dur
	isDrained, peer, dirty := s.drained[p], s.peer[p], s.dirty
	s.mu.Unlock()
	if drain && !isDrained && (dirty || (force && peer >= 0)) {
		// Re-read the switch if its state is unknown (whether the port
		// carries a circuit, and which, depends on it) and the port health
		// before tearing a circuit down; then work from what was found, not
		// from the stale installed set.
		if err := s.prepare(ctx); err != nil {
			return nil, err
		}
		s.mu.Lock()
		cur = s.dur
		isDrained, peer = s.drained[p], s.peer[p]
		s.mu.Unlock()
	}

	resp := &ocspb.PortResponse{}
	if isDrained != drain {
		target := cur.Connects
		if drain && peer >= 0 {
			c := topo.Circuit{A: p, B: peer}.Normalize()
			if !force {
				return nil, status.Errorf(codes.FailedPrecondition,
					"port %d carries cross-connect %v: remove it from the target first, or drain with force to tear it down", p, c)
			}
			target = slices.DeleteFunc(slices.Clone(cur.Connects), func(x topo.Circuit) bool { return x == c })
			resp.Removed = connectToPB(c)
		}
		_, err := s.transition(ctx, target, func(next *durable, _ ApplyResult) {
			if drain {
				next.Drained = sortedInts(append(next.Drained, p))
			} else {
				next.Drained = slices.DeleteFunc(next.Drained, func(x int) bool { return x == p })
			}
		})
		if err != nil {
			return nil, err
		}
		verb := "undrained"
		if drain {
			verb = "drained"
		}
		s.log.Info("port "+verb, "port", p, "removed", resp.Removed != nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp.Port = portStatusToPB(s.portLocked(p))
	resp.Generation = s.dur.Generation
	return resp, nil
}

// subscriber is one Watch stream.
type subscriber struct {
	ch   chan *ocspb.Event
	gone chan struct{} // closed when the subscriber fell behind
}

// publishLocked sends ev to every subscriber; s.mu is held. A subscriber
// whose buffer is full is dropped.
func (s *Server) publishLocked(ev *ocspb.Event) {
	for sub := range s.subs {
		select {
		case sub.ch <- ev:
		default:
			delete(s.subs, sub)
			close(sub.gone)
		}
	}
}

// watch is the Watch RPC.
func (s *Server) watch(stream grpc.ServerStreamingServer[ocspb.Event]) error {
	sub := &subscriber{ch: make(chan *ocspb.Event, watchBuffer), gone: make(chan struct{})}
	s.mu.Lock()
	snap := newEvent(EventSnapshot, s.dur.Generation, time.Now())
	snap.Snapshot = topologyToPB(s.topologyLocked())
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()
	if err := stream.Send(snap); err != nil {
		return err
	}
	ctx := stream.Context()
	for {
		select {
		case ev := <-sub.ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-sub.gone:
			return status.Error(codes.ResourceExhausted, "watcher fell too far behind; watch again")
		case <-s.done:
			return status.Error(codes.Unavailable, "OCS controller is shutting down")
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// service adapts Server to the generated gRPC interface.
type service struct {
	ocspb.UnimplementedOCSServer
	s *Server
}

func (v *service) GetTopology(ctx context.Context, _ *ocspb.GetTopologyRequest) (*ocspb.Topology, error) {
	return topologyToPB(v.s.Topology()), nil
}

func (v *service) Apply(ctx context.Context, req *ocspb.ApplyRequest) (*ocspb.ApplyResponse, error) {
	res, err := v.s.apply(ctx, req.GetRequestId(), connectsFromPB(req.GetConnects()))
	if err != nil {
		return nil, err
	}
	return applyResultToPB(res), nil
}

func (v *service) Watch(_ *ocspb.WatchRequest, stream grpc.ServerStreamingServer[ocspb.Event]) error {
	return v.s.watch(stream)
}

func (v *service) Drain(ctx context.Context, req *ocspb.PortRequest) (*ocspb.PortResponse, error) {
	return v.s.portChange(ctx, req.GetPort(), true, req.GetForce())
}

func (v *service) Undrain(ctx context.Context, req *ocspb.PortRequest) (*ocspb.PortResponse, error) {
	return v.s.portChange(ctx, req.GetPort(), false, false)
}
