package algo

import (
	"context"

	"github.com/occl/occl/transport"
)

// ViewPeers is implemented by Peers whose connections can hand a received
// message to the schedule where it lies (see transport.Viewer), so that a
// message that is only reduced into this rank's data is not first copied
// out of the connection.
type ViewPeers interface {
	Peers
	// RecvView receives message step from peer as Recv does and hands its
	// payload to use in pieces of whole elements of align bytes. A
	// payload the connection cannot show where it lies is received into
	// buf, which has the message's length, and handed whole.
	RecvView(ctx context.Context, peer int, step uint32, buf []byte, align int, use transport.Consumer) error
}

// reduction says what recvReduce does with a received message: reduce it
// into dst, dst = src op message, or message op src where msgFirst, with
// dst itself for a nil src. op is a combiner (see Op.Combiner). It is the
// transport.Consumer handed to the connection: the copy ws keeps (see
// Workspace.reduction), so that handing it over allocates nothing.
type reduction struct {
	ws       *Workspace
	dst, src []byte
	dt       DType
	op       Op
	msgFirst bool
}

// Consume implements transport.Consumer: it reduces piece into the same
// bytes of dst.
func (r *reduction) Consume(off int, piece []byte) {
	d := r.dst[off : off+len(piece)]
	s := d
	if r.src != nil {
		s = r.src[off : off+len(piece)]
	}
	if r.msgFirst {
		Reduce3(d, piece, s, r.dt, r.op)
	} else {
		Reduce3(d, s, piece, r.dt, r.op)
	}
}

// recvReduce receives message step from peer and reduces it as red says.
// Where p can show the message where it lies (ViewPeers), it is reduced
// from there, one read of it instead of a copy and a read; otherwise it
// is received into stage (len(red.dst) bytes) first.
func recvReduce(ctx context.Context, p Peers, peer int, step uint32, stage []byte, red *reduction) error {
	r := red.ws.reduction()
	*r = *red
	var err error
	if vp, ok := p.(ViewPeers); ok {
		err = vp.RecvView(ctx, peer, step, stage, red.dt.Size(), r)
	} else {
		err = recvWhole(ctx, p, peer, step, stage, r)
	}
	*r = reduction{} // drop the references to the caller's buffers
	return err
}

// recvWhole receives message step from peer into buf and hands it to use
// in one piece: RecvView where the connection cannot show the message
// where it lies.
func recvWhole(ctx context.Context, p Peers, peer int, step uint32, buf []byte, use transport.Consumer) error {
	if err := p.Recv(ctx, peer, step, buf); err != nil {
		return err
	}
	use.Consume(0, buf)
	return nil
}
