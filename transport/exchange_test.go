package transport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occl/occl/transport"
)

// oneSided is a Conn whose sends fail at once with sendErr (or succeed if
// it is nil) and whose receives wait for their context, or fail at once
// with recvErr if set.
type oneSided struct{ sendErr, recvErr error }

func (c oneSided) Send(ctx context.Context, _ transport.Header, _ []byte) error { return c.sendErr }

func (c oneSided) Recv(ctx context.Context, _ transport.Header, _ []byte) error {
	if c.recvErr != nil {
		return c.recvErr
	}
	<-ctx.Done()
	return ctx.Err()
}

func (oneSided) EagerLimit() int { return 0 }
func (oneSided) Close() error    { return nil }

// TestExchangeFailedSendEndsReceive: a send that fails ends the receive
// waiting beside it, and Exchange reports the send's error, not the
// cancellation, long before the caller's deadline.
func TestExchangeFailedSendEndsReceive(t *testing.T) {
	broken := errors.New("broken pipe")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := transport.Exchange(ctx, oneSided{sendErr: broken}, transport.Header{}, nil, transport.Header{}, nil)
	if !errors.Is(err, broken) {
		t.Fatalf("Exchange: %v, want the send's error", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Exchange returned after its deadline (%v)", time.Since(start))
	}
}

// TestExchangeErrors: the receive's own failure, and the caller's
// cancellation, are reported as they are.
func TestExchangeErrors(t *testing.T) {
	garbled := errors.New("garbled frame")
	ctx := context.Background()
	if err := transport.Exchange(ctx, oneSided{recvErr: garbled}, transport.Header{}, nil, transport.Header{}, nil); !errors.Is(err, garbled) {
		t.Errorf("failed receive: %v, want its error", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := transport.Exchange(cctx, oneSided{}, transport.Header{}, nil, transport.Header{}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v, want context.Canceled", err)
	}
}
