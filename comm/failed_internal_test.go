package comm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/transport"
)

// TestCompletedAfterFailure: an operation that completes on this rank
// after the communicator failed while it ran returns the failure, as every
// pending operation does, collectives and point-to-point alike.
func TestCompletedAfterFailure(t *testing.T) {
	for _, hdr := range []transport.Header{
		collHeader(algo.OpBarrier, 0, 0, 0, 0),
		{Kind: transport.KindP2P, Op: uint8(algo.OpSendRecv)},
	} {
		comms, err := NewLocal(2)
		if err != nil {
			t.Fatal(err)
		}
		c := comms[0]
		pe := &PeerError{Peer: 1, Reporter: 0, Kind: ErrPeerFailed, Reason: "injected while the operation ran"}
		r := c.postCall(context.Background(), "Injected", hdr, func(ctx context.Context, p *opPeers) error {
			c.fail(pe) // as the control plane does when another rank fails
			return nil
		})
		err = wait(r)
		var got *PeerError
		if !errors.As(err, &got) || got != pe || !errors.Is(err, ErrPeerFailed) {
			t.Fatalf("kind %d: operation completed after the failure returned %v, want %v", hdr.Kind, err, pe)
		}
		for _, c := range comms {
			c.Close()
		}
	}
}

// TestPanicInOperation: a panic inside an operation (a bug in occl) fails
// the communicator on every rank instead of crashing the process: the
// operation returns ErrAborted naming the rank, the peer waiting for it
// in a collective fails alike, and both close, from the panicking call's
// own goroutine (runAlone), from a queued request (help), from the
// worker, and from a goroutine its schedule started (schedule-goroutine:
// the send of a SendRecv, which receives meanwhile, panics).
func TestPanicInOperation(t *testing.T) {
	for _, how := range []string{"blocking", "async-wait", "async-worker", "schedule-goroutine"} {
		t.Run(how, func(t *testing.T) {
			comms, err := NewLocal(2)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			peer := make(chan error, 1)
			go func() {
				x := []float32{1}
				peer <- AllReduce(ctx, comms[1], x, x, Sum)
			}()
			c := comms[0]
			r := c.postCall(ctx, "Injected", collHeader(algo.OpAllReduce, Float32, Sum, 0, 1), func(ctx context.Context, p *opPeers) error {
				if how == "schedule-goroutine" {
					b := make([]byte, 4)
					return algo.SendRecv(ctx, panicSends{p}, 1, 0, b, 1, 0, b)
				}
				var m map[int]int
				m[0] = 1 // a nil map: the kind of bug the recovery is for
				return nil
			})
			switch how {
			case "blocking":
				err = wait(r)
			case "async-wait":
				err = c.issue(r).Wait(ctx)
			default:
				c.issue(r)
				<-r.Done()
				err = r.Wait(ctx)
			}
			if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "internal error in Injected") || !strings.Contains(err.Error(), "nil map") {
				t.Fatalf("the panicking operation returned %v, want ErrAborted naming an internal error", err)
			}
			if err := <-peer; !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "rank 0") {
				t.Fatalf("the peer's AllReduce returned %v, want ErrAborted naming rank 0", err)
			}
			for _, c := range comms {
				done := make(chan struct{})
				go func() { c.Close(); close(done) }()
				select {
				case <-done:
				case <-ctx.Done():
					t.Fatalf("rank %d: Close did not return", c.Rank())
				}
			}
		})
	}
}

// panicSends are peers whose Send panics, as a bug would, and which offer
// no eager sends, so that SendRecv sends on a goroutine of its own. Recv
// waits for the panic to cancel it.
type panicSends struct{ p *opPeers }

func (s panicSends) Rank() int { return s.p.Rank() }
func (s panicSends) Size() int { return s.p.Size() }
func (s panicSends) Send(context.Context, int, uint32, []byte) error {
	var m map[int]int
	m[0] = 1
	return nil
}
func (s panicSends) Recv(ctx context.Context, _ int, _ uint32, _ []byte) error {
	<-ctx.Done()
	return ctx.Err()
}
