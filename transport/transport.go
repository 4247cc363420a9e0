// Package transport moves tagged byte messages between two ranks.
//
// A Conn is one ordered, reliable, bidirectional message stream between this
// rank and one peer. Every message is a frame: a fixed-size Header followed by
// Len payload bytes. The header carries the communicator id, epoch, operation
// sequence number and step of the message, plus a fingerprint of the
// operation (op, dtype, reduction, root, count), so that the receiver can tell
// a message that belongs to another operation, another epoch or a mismatched
// collective from the one it expects, and reject it instead of using it.
//
// Implementations live in sub-packages: tcp (sockets), shm (shared memory
// between processes of one host), rdma (verbs: InfiniBand and RoCE, or
// emulated verbs), mem (in process, for tests), and emu, which shapes any
// of them to an emulated fabric's link speeds. Package setup is the one
// place that decides which of them joins two ranks and sets it up.
package transport

import (
	"context"
	"errors"
	"fmt"
)

// Conn is a message stream to one peer.
//
// Send and Recv may be called concurrently with each other, but calls of the
// same kind must not overlap: the communicator serialises all sends to a peer
// and all receives from it. Every call honours ctx's deadline and
// cancellation; a call that fails leaves the stream in an undefined state, so
// the caller must close the Conn after any error. ctx may also carry hints
// for transports that poll while they wait (WithoutYield, WithCoreYield):
// they change how a wait spends its time, never what a call does.
type Conn interface {
	// Send writes one frame carrying payload. h.Len is set from
	// len(payload). It returns once payload may be reused.
	Send(ctx context.Context, h Header, payload []byte) error
	// Recv reads the next frame. The frame must match want in every field
	// (want.Len is taken from len(buf)); its payload is read directly into
	// buf. A frame that does not match is not consumed further and Recv
	// returns a *MismatchError.
	Recv(ctx context.Context, want Header, buf []byte) error
	// EagerLimit is the largest payload that Send is guaranteed to accept
	// without waiting for the peer to receive, provided the peer has
	// received every earlier frame. Schedules use it to exchange small
	// messages without a helper goroutine.
	EagerLimit() int
	// Close releases the connection. It unblocks pending calls, which fail
	// with ErrClosed.
	Close() error
}

// Errors common to every transport. Implementations wrap them with the
// details of what failed.
var (
	// ErrClosed is returned by calls on a Conn that has been closed locally.
	ErrClosed = errors.New("connection closed")
	// ErrPeerClosed is returned when the peer closed the connection or its
	// process went away.
	ErrPeerClosed = errors.New("connection closed by peer")
)

// Lender is implemented by connections that can lend a payload to the peer:
// the peer copies it straight out of this process's memory, and Lend
// returns as soon as the peer has been told where it is, before the copy.
// A rank that must send several large payloads and receive several can so
// post all its sends, then receive, then wait for its payloads to be taken,
// with one copy of every byte and no helper goroutine.
//
// Lend and Settle are sends: they must not overlap Send or each other.
type Lender interface {
	// LendMin returns the smallest payload Lend lends; 0 if it lends
	// none. Send is unaffected: the frame says whether its payload is
	// lent, so the peer's Recv takes either.
	LendMin() int
	// LentMin returns the smallest payload the peer lends on this
	// connection (what its LendMin returns); 0 if it lends none. A
	// receiver can so tell which payloads its peer sends lent: a schedule
	// that splits large messages expects those whole.
	LentMin() int
	// Lend sends a frame carrying payload, which must have at least
	// LendMin bytes, without waiting for the peer to copy it. payload
	// must stay unchanged and referenced until Settle returns.
	Lend(ctx context.Context, h Header, payload []byte) error
	// Settle waits until the peer has copied every payload lent so far.
	// If it fails (ctx ended, the connection closed), the payloads are
	// withdrawn: a peer still copying fails rather than deliver bytes
	// the caller may have overwritten since, and the Conn must be
	// closed.
	Settle(ctx context.Context) error
	// LendBuffers reports whether a Lend would now return without
	// waiting for the peer: the frame that tells the peer where the
	// payload is fits in the space the peer has freed (see Buffered, for
	// Send). A schedule that lends to a peer which has received every
	// earlier frame need not ask.
	LendBuffers() bool
}

// WholeLender is implemented by Lenders with their own rule for the
// payloads the receiver takes whole (one Recv of the whole message, not a
// message it reads in pieces): a payload in memory the peer maps instead
// of reading it with a system call is lent below LendMin (shared memory's
// peers map the buffers of hugemem.Alloc and copy with one memcpy), and
// by size such payloads are lent from their own threshold, below LendMin
// where a single copy pays for whole blocks but not for a ring's
// pipelined chunks, above it where the rings' copies win for blocks that
// a ring's chunks would still lend (Config.WholeLendThreshold of package
// shm); and payloads above LendMin that LendsWhole declines (too large
// for the cache, where the rings' copies win: Config.WholeRingThreshold)
// are sent, whole, with Send. The peer's Recv takes them as any lent
// payload or any sent one, but cannot tell in advance which payloads come
// lent this way (LentMin does not say): a schedule asks LendsWhole only
// where its receiver takes the payload whole whether it is lent or not.
type WholeLender interface {
	Lender
	// LendsWhole reports whether a payload its receiver takes whole is
	// lent, whatever its size against LendMin.
	LendsWhole(payload []byte) bool
}

// Offerer is implemented by Lenders that can also offer a payload: lend
// it for as long as the sender has nothing else to do, and take it back
// if the peer has not begun to copy it by then. An offered payload so
// costs one copy where the peer receives it while it is offered (two
// exchanging ranks whose receives overlap their sends), and otherwise
// the two of a buffered Send, written into the connection when taken
// back; either way the send does not wait for the peer to come and
// receive it (an implementation may give it a moment bounded by the cost
// of the take-back), as a Send that Buffers would not.
type Offerer interface {
	Lender
	// OfferMin returns the smallest payload Offer offers; 0 if it
	// offers none.
	OfferMin() int
	// Offers reports whether an Offer of a payload of n bytes can be
	// made now: n is at least the connection's smallest offer, nothing
	// lent earlier is unsettled, and the connection has room for the
	// payload should it be taken back. Only the sending side may ask; a
	// true answer holds until its next send, Lend or Offer.
	Offers(n int) bool
	// Offer sends a frame carrying payload, for which Offers must hold,
	// without waiting for the peer. The next Settle, Send or Lend on the
	// connection takes the payload back unless the peer has begun to
	// copy it (Settle may first wait a bounded moment for it to begin),
	// in which case Settle waits for that copy (the payload
	// must stay unchanged until Settle returns, as for Lend). The peer's
	// Recv takes either form.
	Offer(ctx context.Context, h Header, payload []byte) error
}

// Buffered is implemented by connections that can tell whether a Send
// would return at once: a group of sends and receives whose sends all do
// can run on one goroutine, its sends first, with no send waiting for a
// receive (see comm.Group).
type Buffered interface {
	// Buffers reports whether a Send of a payload of n bytes would now
	// return without waiting for the peer: the frame fits in the space the
	// peer has freed, and nothing about the payload makes the send wait
	// for the peer to copy it. Only the sending side may ask, between its
	// own sends and Lends; a true answer holds until its next one, as the
	// peer only frees space meanwhile. A closed connection reports false;
	// so does one whose peer closed it, where the transport knows (shared
	// memory and the in-process pipes do, TCP may not until a write
	// fails); Send then returns the error at once either way.
	Buffers(n int) bool
}

// Duplex is implemented by connections that can send one message and
// receive another on the calling goroutine at once, so that two ranks
// exchanging with each other need no second goroutine (and no wake-up
// between two threads of one process) to keep both directions moving.
//
// SendRecv is a Send and a Recv: it must not overlap either.
type Duplex interface {
	// DuplexMax is the largest message, in either direction, SendRecv
	// takes.
	DuplexMax() int
	// SendRecv sends payload with header sh and receives the frame
	// matching rh (rh.Len taken from len(buf)) into buf, progressing both
	// as the peer takes and sends. Both must be at most DuplexMax bytes.
	SendRecv(ctx context.Context, sh Header, payload []byte, rh Header, buf []byte) error
}

// Consumer takes a received payload piece by piece (see Viewer).
type Consumer interface {
	// Consume is given the payload's bytes from offset off on. piece is
	// valid only until Consume returns and must not be written; Consume
	// must not call the connection.
	Consume(off int, piece []byte)
}

// Viewer is implemented by connections that can hand a received payload to
// its receiver where it lies, in memory the peer wrote it to, so that a
// receiver that reads it once (to reduce it into its own data, say) need
// not copy it out first.
//
// RecvView is a receive: it must not overlap Recv or another RecvView.
type Viewer interface {
	// RecvView receives the next frame as Recv does (want.Len taken from
	// len(buf); a frame that does not match is reported before any of its
	// payload is seen) and hands its payload to use in consecutive
	// pieces, in order, each byte once. Every piece but the last is a
	// multiple of align bytes, a power of two up to 64 (an element's
	// size). A payload the connection cannot show where it lies (one the
	// peer lent, say) is received into buf and handed as one piece;
	// otherwise buf is not written. After an error use may have been
	// given part of the payload.
	RecvView(ctx context.Context, want Header, buf []byte, align int, use Consumer) error
}

// Named is implemented by connections that can say which transport they
// are: "tcp", "shm", "rdma", "mem", or a layer over another such as
// "emu(shm)".
type Named interface {
	Name() string
}

// Name returns the transport of conn: its Name if it has one, else its Go
// type.
func Name(conn Conn) string {
	if n, ok := conn.(Named); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", conn)
}
