package comm

import (
	"context"
	"errors"
	"testing"

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
