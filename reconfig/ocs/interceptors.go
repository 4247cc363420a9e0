package ocs

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/validator"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// slogAdapter lets the go-grpc-middleware logging interceptor write to l.
func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// serverCodeToLevel logs successful calls at Debug, so that a controller
// logging at Info shows changes and problems only.
func serverCodeToLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK:
		return logging.LevelDebug
	case codes.Canceled, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists,
		codes.FailedPrecondition, codes.DeadlineExceeded, codes.OutOfRange:
		return logging.LevelInfo
	case codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted, codes.Aborted, codes.Unavailable:
		return logging.LevelWarn
	default:
		return logging.LevelError
	}
}

// interceptors returns the server's interceptor chains, outermost first:
// Prometheus gRPC metrics (with ServerConfig.Registry), logging, recovery (a panic becomes INTERNAL), bearer-token authentication
// (all services but health; only when a token is configured) and
// validation (the requests' Validate methods; a failure is
// INVALID_ARGUMENT).
func (s *Server) interceptors() ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	logger := slogAdapter(s.log)
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(serverCodeToLevel),
	}
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		s.log.ErrorContext(ctx, "panic in OCS controller call", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error in the OCS controller")
	})
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if s.met != nil {
		unary = append(unary, s.met.grpc.UnaryServerInterceptor())
		stream = append(stream, s.met.grpc.StreamServerInterceptor())
	}
	unary = append(unary,
		logging.UnaryServerInterceptor(logger, logOpts...),
		recovery.UnaryServerInterceptor(recoverOpt),
	)
	stream = append(stream,
		logging.StreamServerInterceptor(logger, logOpts...),
		recovery.StreamServerInterceptor(recoverOpt),
	)
	if s.cfg.Token != "" {
		notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
			return c.Service != healthgrpc.Health_ServiceDesc.ServiceName
		})
		authFn := bearerAuth(s.cfg.Token)
		unary = append(unary, selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(authFn), notHealth))
		stream = append(stream, selector.StreamServerInterceptor(auth.StreamServerInterceptor(authFn), notHealth))
	}
	unary = append(unary, validator.UnaryServerInterceptor())
	stream = append(stream, validator.StreamServerInterceptor())
	return unary, stream
}

// bearerAuth returns an auth function accepting "Bearer <token>". The
// comparison takes constant time (over SHA-256 digests, so that the length
// of the token does not leak either).
func bearerAuth(token string) auth.AuthFunc {
	want := sha256.Sum256([]byte(token))
	return func(ctx context.Context) (context.Context, error) {
		got, err := auth.AuthFromMD(ctx, "bearer")
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, "missing bearer token (set OCCL_OCS_TOKEN)")
		}
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			return nil, status.Error(codes.Unauthenticated, "invalid bearer token")
		}
		return ctx, nil
	}
}
