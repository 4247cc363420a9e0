package ocs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/timeout"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/validator"
	"github.com/occl/occl/reconfig/ocspb"
	"github.com/occl/occl/topo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Client defaults.
const (
	// DefaultCallTimeout is the deadline given to a unary call whose
	// context has none.
	DefaultCallTimeout = 30 * time.Second
	// DefaultRetries is how many times a unary call is attempted when the
	// controller is UNAVAILABLE or RESOURCE_EXHAUSTED.
	DefaultRetries = 6
	// DefaultRetryBackoff is the first wait between attempts; it doubles
	// (with 20% jitter) up to one second.
	DefaultRetryBackoff = 50 * time.Millisecond
)

// Client talks to an OCS controller. It is safe for concurrent use.
//
// Every unary call (GetTopology, Apply, Drain, Undrain) is idempotent, so
// each is retried with exponential backoff when the controller is
// UNAVAILABLE (not started yet, restarting) or RESOURCE_EXHAUSTED; Watch is
// not retried. A unary call whose context has no deadline gets
// DefaultCallTimeout (see WithTimeout). Errors keep their gRPC status:
// status.Code(err) tells codes.InvalidArgument, codes.FailedPrecondition,
// codes.Aborted, codes.Unauthenticated, codes.DeadlineExceeded and so on
// apart.
type Client struct {
	conn *grpc.ClientConn
	rpc  ocspb.OCSClient
}

type clientOptions struct {
	token    string
	timeout  time.Duration
	retries  uint
	backoff  time.Duration
	creds    credentials.TransportCredentials
	logger   *slog.Logger
	dialOpts []grpc.DialOption
}

// Option configures Dial.
type Option func(*clientOptions)

// WithToken sends token as a bearer token with every call. Without
// transport security (WithTransportCredentials) the token travels in clear
// text: use it on loopback or a trusted management network only.
func WithToken(token string) Option { return func(o *clientOptions) { o.token = token } }

// WithTimeout sets the deadline given to unary calls whose context has none
// (default DefaultCallTimeout); 0 disables it. A negative d makes Dial fail.
// A deadline on the caller's context always wins.
func WithTimeout(d time.Duration) Option { return func(o *clientOptions) { o.timeout = d } }

// WithRetry sets how many times a unary call is attempted (default
// DefaultRetries; 1 disables retries) and the first backoff (0 means
// DefaultRetryBackoff). 0 attempts or a negative backoff make Dial fail.
func WithRetry(attempts uint, backoff time.Duration) Option {
	return func(o *clientOptions) { o.retries, o.backoff = attempts, backoff }
}

// WithTransportCredentials sets transport security, e.g. TLS (default:
// none).
func WithTransportCredentials(c credentials.TransportCredentials) Option {
	return func(o *clientOptions) { o.creds = c }
}

// WithLogger logs every call (at Debug when it succeeds) to l.
func WithLogger(l *slog.Logger) Option { return func(o *clientOptions) { o.logger = l } }

// WithDialOptions adds gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *clientOptions) { o.dialOpts = append(o.dialOpts, opts...) }
}

// bearerCreds attaches the bearer token to every call.
type bearerCreds struct {
	token  string
	secure bool
}

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearerCreds) RequireTransportSecurity() bool { return b.secure }

// Dial returns a client of the controller at addr (host:port). It does not
// wait for the connection: the first call connects, and retries while the
// controller is unavailable. ctx is only checked; it bounds nothing after
// Dial returns. Dial fails on invalid options (a negative WithTimeout, 0
// attempts or a negative backoff in WithRetry).
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ocs: dial %s: %w", addr, err)
	}
	o := clientOptions{timeout: DefaultCallTimeout, retries: DefaultRetries, backoff: DefaultRetryBackoff}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout < 0 {
		return nil, fmt.Errorf("ocs: dial %s: WithTimeout(%v): negative timeout (0 disables the default deadline)", addr, o.timeout)
	}
	if o.retries == 0 || o.backoff < 0 {
		return nil, fmt.Errorf("ocs: dial %s: WithRetry(%d, %v): want at least 1 attempt and a backoff of 0 (the default) or more", addr, o.retries, o.backoff)
	}
	if o.backoff == 0 {
		o.backoff = DefaultRetryBackoff
	}
	creds := o.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	unary := []grpc.UnaryClientInterceptor{
		// Reject what the controller would reject, without a round trip.
		validator.UnaryClientInterceptor(),
	}
	if o.timeout > 0 {
		unary = append(unary, defaultDeadline(o.timeout))
	}
	unary = append(unary, retry.UnaryClientInterceptor(
		retry.WithMax(o.retries),
		retry.WithCodes(codes.Unavailable, codes.ResourceExhausted),
		retry.WithBackoff(retry.BackoffExponentialWithJitterBounded(o.backoff, 0.2, time.Second)),
	))
	var stream []grpc.StreamClientInterceptor
	if o.logger != nil {
		logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}
		unary = append(unary, logging.UnaryClientInterceptor(slogAdapter(o.logger), logOpts...))
		stream = append(stream, logging.StreamClientInterceptor(slogAdapter(o.logger), logOpts...))
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(unary...),
		grpc.WithChainStreamInterceptor(stream...),
		// Reconnect quickly: a controller restarts in well under a second.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if o.token != "" {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearerCreds{token: o.token, secure: o.creds != nil}))
	}
	dialOpts = append(dialOpts, o.dialOpts...)
	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("ocs: dial %s: %w", addr, err)
	}
	conn.Connect()
	return &Client{conn: conn, rpc: ocspb.NewOCSClient(conn)}, nil
}

// defaultDeadline applies go-grpc-middleware's timeout interceptor to calls
// whose context has no deadline yet, so that it never shortens a deadline
// the caller chose.
func defaultDeadline(d time.Duration) grpc.UnaryClientInterceptor {
	withTimeout := timeout.UnaryClientInterceptor(d)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		return withTimeout(ctx, method, req, reply, cc, invoker, opts...)
	}
}

// Close closes the connection.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("ocs: close: %w", err)
	}
	return nil
}

// NewRequestID returns a random request id for Apply.
func NewRequestID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// RollbackSuffix ends the request id of the request that undoes another
// (see RollbackRequestID).
const RollbackSuffix = "/rollback"

// RollbackRequestID returns the request id under which a client that lost
// track of request id (it timed out, or its connection broke, while the
// controller may still be switching) puts the previous cross-connects
// back: id with RollbackSuffix. The controller applies the two in the
// order it receives them, and a request id that arrives after its
// rollback has been applied is refused with codes.Aborted without
// switching, so a request delayed on its way cannot undo the rollback.
func RollbackRequestID(id string) string { return id + RollbackSuffix }

// GetTopology returns the installed cross-connects and the port states.
func (c *Client) GetTopology(ctx context.Context) (*Topology, error) {
	t, err := c.rpc.GetTopology(ctx, &ocspb.GetTopologyRequest{})
	if err != nil {
		return nil, fmt.Errorf("ocs: get topology: %w", err)
	}
	return topologyFromPB(t), nil
}

// Apply makes the switch hold exactly connects (the complete target set)
// and returns when the circuits are up. Retrying with the same requestID
// is safe: the controller applies a request id once and replays the
// recorded result (Replayed set). An empty requestID gets a fresh random
// one, which still makes the client's own retries safe.
func (c *Client) Apply(ctx context.Context, requestID string, connects []topo.Circuit) (ApplyResult, error) {
	if requestID == "" {
		requestID = NewRequestID()
	}
	for _, cc := range connects {
		if cc.A < 0 || cc.B < 0 || int64(cc.A) > 1<<32-1 || int64(cc.B) > 1<<32-1 {
			return ApplyResult{}, fmt.Errorf("ocs: apply %s: %w", requestID,
				status.Errorf(codes.InvalidArgument, "cross-connect %v: port out of range", cc))
		}
	}
	r, err := c.rpc.Apply(ctx, &ocspb.ApplyRequest{RequestId: requestID, Connects: connectsToPB(connects)})
	if err != nil {
		return ApplyResult{}, fmt.Errorf("ocs: apply %s: %w", requestID, err)
	}
	return applyResultFromPB(r), nil
}

// Drain excludes port from future targets. If the port carries a circuit,
// Drain fails with codes.FailedPrecondition unless force is set, in which
// case the circuit is torn down (PortChange.Removed). Draining a drained
// port succeeds.
func (c *Client) Drain(ctx context.Context, port int, force bool) (PortChange, error) {
	if port < 0 || int64(port) > 1<<32-1 {
		return PortChange{}, fmt.Errorf("ocs: drain port %d: %w", port, status.Error(codes.InvalidArgument, "port out of range"))
	}
	r, err := c.rpc.Drain(ctx, &ocspb.PortRequest{Port: uint32(port), Force: force})
	if err != nil {
		return PortChange{}, fmt.Errorf("ocs: drain port %d: %w", port, err)
	}
	return portChangeFromPB(r), nil
}

// Undrain returns a drained port to service. Undraining a port that is not
// drained succeeds.
func (c *Client) Undrain(ctx context.Context, port int) (PortChange, error) {
	if port < 0 || int64(port) > 1<<32-1 {
		return PortChange{}, fmt.Errorf("ocs: undrain port %d: %w", port, status.Error(codes.InvalidArgument, "port out of range"))
	}
	r, err := c.rpc.Undrain(ctx, &ocspb.PortRequest{Port: uint32(port)})
	if err != nil {
		return PortChange{}, fmt.Errorf("ocs: undrain port %d: %w", port, err)
	}
	return portChangeFromPB(r), nil
}

// ErrStopWatch may be returned by a Watch callback to end the watch; Watch
// then returns nil.
var ErrStopWatch = errors.New("ocs: stop watching")

// Watch calls fn with a snapshot event and then with every change the
// controller reports, until ctx is done (Watch returns ctx.Err(), wrapped),
// fn returns an error (Watch returns it, or nil for ErrStopWatch) or the
// stream fails (for example codes.Unavailable when the controller stops,
// codes.ResourceExhausted when fn was too slow). Watch is not retried: a
// caller that watches again gets a new snapshot.
func (c *Client) Watch(ctx context.Context, fn func(Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Watch(ctx, &ocspb.WatchRequest{})
	if err != nil {
		return fmt.Errorf("ocs: watch: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return fmt.Errorf("ocs: watch: %w", ctxErr)
			}
			if err == io.EOF {
				return errors.New("ocs: watch: the controller ended the stream")
			}
			return fmt.Errorf("ocs: watch: %w", err)
		}
		if err := fn(eventFromPB(ev)); err != nil {
			if errors.Is(err, ErrStopWatch) {
				return nil
			}
			return err
		}
	}
}
