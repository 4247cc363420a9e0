package reconfig

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/reconfig/ocs"
	"github.com/occl/occl/topo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OCS adapts the OCS controller's gRPC client to Controller.
type OCS struct {
	Client *ocs.Client
}

// Apply asks the controller to install circuits under requestID. The
// controller's definite refusals (the target is invalid, a port is failed
// or drained, the switch failed and was put back, the caller is not
// authorized) wrap comm.ErrNotSwitched; a timeout or an unreachable
// controller leaves the outcome unknown.
func (o OCS) Apply(ctx context.Context, requestID string, circuits []topo.Circuit) (time.Duration, error) {
	res, err := o.Client.Apply(ctx, requestID, circuits)
	if err != nil {
		if notSwitched(err) {
			return 0, fmt.Errorf("%w: %w", comm.ErrNotSwitched, err)
		}
		return 0, err
	}
	return res.SwitchingTime, nil
}

// notSwitched says whether a controller's error is a definite answer that
// nothing was switched.
func notSwitched(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.Aborted, codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented:
		return true
	}
	return false
}

// Emulated is an OCS controller serving an emulated switch on 127.0.0.1
// inside this process, with a client to it: the whole control path
// (gRPC, interceptors, validation, diff, switching delay) without
// hardware. Close stops both.
type Emulated struct {
	// Switch is the emulated switch, for fault injection.
	Switch *ocs.Emulated
	// Server is the controller.
	Server *ocs.Server
	// Addr is the controller's address.
	Addr string
	OCS
	cancel context.CancelFunc
	served chan error
	closed sync.Once
	err    error // Close's
}

// StartEmulated serves an emulated switch of ports ports that takes delay
// to switch, and dials it with token (empty: no authentication).
func StartEmulated(ctx context.Context, ports int, delay time.Duration, token string) (*Emulated, error) {
	sw, err := ocs.NewEmulated(ports, delay)
	if err != nil {
		return nil, err
	}
	srv, err := ocs.NewServer(sw, ocs.ServerConfig{Token: token})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("emulated controller: listen: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	e := &Emulated{Switch: sw, Server: srv, Addr: lis.Addr().String(), cancel: cancel, served: make(chan error, 1)}
	go func() { e.served <- srv.Serve(sctx, lis) }()
	var opts []ocs.Option
	if token != "" {
		opts = append(opts, ocs.WithToken(token))
	}
	cl, err := ocs.Dial(ctx, e.Addr, opts...)
	if err != nil {
		cancel()
		<-e.served
		return nil, fmt.Errorf("emulated controller: dial: %w", err)
	}
	e.Client = cl
	return e, nil
}

// Close stops the client and the controller. Closing again returns the
// first Close's error.
func (e *Emulated) Close() error {
	e.closed.Do(func() {
		e.Client.Close()
		e.cancel()
		e.err = <-e.served
	})
	return e.err
}
