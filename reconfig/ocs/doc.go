// Package ocs is occl's optical circuit switch (OCS) control plane: a gRPC
// controller that owns one switch, the drivers behind it, and a client.
//
// # Model
//
// A switch has ports 0 .. N-1. A cross-connect (a topo.Circuit, its ends
// being switch ports: see topo.Topology.SwitchPorts) joins two ports
// with a duplex optical circuit; a port joins at most one. The controller
// keeps the installed set of cross-connects and a generation counter that
// counts changes of that set, plus the state of every port: up, failed (the
// switch says so) or drained (an operator excluded it).
//
// The controller follows the TPUv4 / mFabric control-plane rules:
//
//   - Declarative: Apply carries the COMPLETE target set. Every installed
//     cross-connect missing from it is torn down.
//   - Validated first: ports must exist, be used at most once and not be
//     joined to themselves (codes.InvalidArgument), and must not be failed
//     or drained (codes.FailedPrecondition). A rejected request switches
//     nothing.
//   - Diff-based: only the pairs that differ from the installed set are
//     switched; an Apply of the installed set does not touch the switch.
//   - All or nothing: if the switch fails part-way, the controller reverses
//     the changes the driver reports as done and returns codes.Aborted; the
//     installed set and generation are the previous ones. If the reversal
//     fails too, the controller re-reads the switch, adopts what it holds as
//     a new generation and returns codes.Internal (the one case where the
//     previous state is not restored; Watch reports the new circuits).
//   - Idempotent: a request id that was applied returns its recorded result
//     (ApplyResult.Replayed) without switching again, even after a restart;
//     reusing an id for a different target (compared order- and
//     orientation-independently) is codes.InvalidArgument. The controller
//     remembers the last ServerConfig.RequestLogSize ids (1024 by default),
//     least recently used forgotten first. Failed applies are not recorded,
//     so retrying one runs it again.
//   - Fenced by rollbacks: a request id ending in RollbackSuffix undoes the
//     request id before it (RollbackRequestID: a client that timed out on a
//     request puts the previous cross-connects back so). If that request
//     has not arrived when its rollback is applied, the controller records
//     it as fenced, and refuses it with codes.Aborted, switching nothing,
//     if it arrives later (delayed in the network, or retried by a client
//     that did not learn of the rollback), so that it cannot undo the
//     rollback. The fence is kept and forgotten as the request-id log is.
//   - Serialized: one change (Apply, Drain, Undrain) at a time; others wait
//     for their turn or for their context.
//   - Returns when circuits are up, with the switching time measured around
//     the driver's Apply.
//   - Durable: with ServerConfig.StatePath the installed set, drained
//     ports, generation and request-id log are written atomically (write a
//     temporary file, fsync, rename, fsync the directory) before a change
//     is acknowledged, and read back at start. Reconcile (called by Serve)
//     then makes the switch hold the persisted set: it reads what the
//     switch holds and applies the difference. If that fails it adopts what
//     the switch holds. Without persisted state (no StatePath, or a first
//     start) the controller adopts what the switch holds rather than tear
//     existing circuits down. A lock file (StatePath+".lock") keeps a second
//     controller off the same state. If writing the state fails, the change
//     is rolled back and the file keeps the previous state: when only the
//     directory fsync failed after the rename, the previous state is
//     written back. If that fails too, the file holds the new state, so the
//     controller keeps the change and returns codes.Internal; retrying the
//     request id replays the recorded result.
//
// Deadlines: if the caller's deadline expires while the switch is moving,
// the driver stops, the controller rolls back what was done and the call
// fails with codes.DeadlineExceeded: the installed set is the previous one
// (consistently rolled back, never half-applied). If the deadline expires
// after the switch finished, the change is committed and recorded; retrying
// the same request id returns the recorded result.
//
// Drains: Drain(port) excludes a port from future targets. If the port
// carries a circuit, Drain fails with codes.FailedPrecondition unless force
// is set, in which case that circuit is torn down (a new generation) and the
// port drained, all or nothing. Drain and Undrain are idempotent. Failed
// ports come from the driver; a circuit on a port that fails stays in the
// installed set (and in Topology) until a target leaves it out.
//
// Watch streams a snapshot event and then every change: port up / failed /
// drained / undrained, circuit added / removed, and a generation event after
// the circuit events of each new generation. A watcher more than 4096 events
// behind is ended with codes.ResourceExhausted and should watch again.
//
// # Service
//
// The wire protocol is occl.ocs.v1.OCS (package
// github.com/occl/occl/reconfig/ocspb): GetTopology, Apply, Watch, Drain,
// Undrain, and the standard gRPC health service (grpc.health.v1.Health),
// which reports SERVING for "" and "occl.ocs.v1.OCS" while Serve runs and
// NOT_SERVING before, once Serve fails and from Stop on.
// Interceptors, all from github.com/grpc-ecosystem/go-grpc-middleware/v2,
// outermost first: logging (to ServerConfig.Logger through log/slog;
// successful calls at Debug, so a logger at Info or above is quiet),
// recovery (a panic becomes codes.Internal), auth (when ServerConfig.Token
// is set: "authorization: Bearer <token>", compared in constant time;
// missing or wrong is codes.Unauthenticated; the health service is exempt)
// and validator (the hand-written Validate methods of the ocspb requests;
// failures are codes.InvalidArgument).
//
// # Switch drivers
//
// The controller drives a Switch: Ports, Connections (what the hardware
// holds), FailedPorts, Apply(ctx, remove, add) returning the Progress it
// made even when it fails, and Changes, a level-triggered signal of port
// health changes. Emulated is an in-memory switch with a switching delay
// (PiezoDelay = 25ms like a piezo MEMS switch, TransceiverDelay = 1ms like
// InfinitePOD's transceivers, or anything else) and fault injection:
// FailPort / RepairPort, FailNextApply(n) (the next apply fails after n
// connects, leaving partial progress to roll back) and SlowApply(extra). It
// honors context cancellation during the delay. Drivers for real switches
// (Polatis, Calient, Telescent, ...) implement the same interface and need
// nothing else from the controller.
//
// # Use
//
// Serving in process:
//
//	sw, _ := ocs.NewEmulated(64, ocs.PiezoDelay)
//	srv, err := ocs.NewServer(sw, ocs.ServerConfig{StatePath: "ocs.state", Token: token})
//	if err != nil { ... }
//	lis, _ := net.Listen("tcp", "127.0.0.1:0")
//	go srv.Serve(ctx, lis) // reconciles, serves until ctx is done
//	defer srv.Stop(context.Background())
//
// As a daemon (reconfig/cmd/occl-ocsd):
//
//	OCCL_OCS_TOKEN=secret occl-ocsd -listen 127.0.0.1:7070 -ports 64 -delay 25ms -state /var/lib/occl/ocs.state
//
// prints "occl-ocsd listening on 127.0.0.1:7070" (with the default
// -listen 127.0.0.1:0, the port it picked) and stops gracefully on SIGTERM.
//
// Client:
//
//	c, err := ocs.Dial(ctx, addr, ocs.WithToken(token))
//	if err != nil { ... }
//	defer c.Close()
//	res, err := c.Apply(ctx, "phase-12", []topo.Circuit{{A: 0, B: 5}, {A: 1, B: 7}})
//	switch status.Code(err) {
//	case codes.OK: // res.Added, res.Removed, res.Unchanged, res.SwitchingTime
//	case codes.InvalidArgument, codes.FailedPrecondition: // bad target, nothing switched
//	case codes.Aborted: // the switch failed; previous topology intact
//	}
//	t, err := c.GetTopology(ctx)
//	err = c.Watch(ctx, func(ev ocs.Event) error { fmt.Println(ev); return nil })
//	_, err = c.Drain(ctx, 3, false)
//
// The client retries every unary call (all are idempotent; Apply through its
// request id) with exponential backoff on codes.Unavailable and
// codes.ResourceExhausted (go-grpc-middleware's retry interceptor), and gives
// calls without a deadline a default one (DefaultCallTimeout, through its
// timeout interceptor). Watch is not retried.
//
// From the shell (reconfig/cmd/occl-ocsctl, with OCCL_OCS_TOKEN and
// OCCL_OCS_ADDR set or -addr):
//
//	occl-ocsctl topology
//	occl-ocsctl apply -id phase-12 0-5,1-7
//	occl-ocsctl watch
//	occl-ocsctl drain 3        # or: drain -force 3
//	occl-ocsctl undrain 3
//
// The token travels in clear text unless TLS is configured
// (ServerConfig.GRPCOptions with grpc.Creds, WithTransportCredentials on
// the client): keep the controller on loopback or a trusted management
// network otherwise.
package ocs
