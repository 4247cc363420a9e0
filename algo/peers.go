package algo

import "context"

// Peers is the view of one communicator that a schedule runs on, for the
// duration of one operation.
//
// Messages between two ranks are matched in order: the k-th message rank a
// sends to rank b is the k-th message b receives from a. The step number is a
// label chosen by the schedule; the runtime stamps it on the frame and checks
// on arrival that it is the step the receiver expects, so that a schedule bug
// or a mismatched collective is reported instead of silently corrupting data.
//
// Send and Recv on different peers may be called concurrently. At most one
// goroutine sends to a given peer at a time, and at most one receives from it.
type Peers interface {
	// Rank is this rank, in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Send sends buf to peer as message step. It returns when buf may be
	// reused; it may return before the peer has received it.
	Send(ctx context.Context, peer int, step uint32, buf []byte) error
	// Recv receives message step from peer into buf. The message must be
	// exactly len(buf) bytes long.
	Recv(ctx context.Context, peer int, step uint32, buf []byte) error
}
