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
