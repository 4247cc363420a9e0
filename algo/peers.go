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

// Workspace hands out staging buffers to schedules. A communicator keeps one
// Workspace and passes it to every operation it runs, so buffers are
// allocated once and reused. A Workspace is not safe for concurrent use; one
// operation runs at a time on a communicator.
type Workspace struct {
	slots    [][]byte
	children []*Workspace
}

// Get returns a buffer of n bytes for the given slot. The contents are
// undefined. The buffer stays valid until the next call to Get with the same
// slot; different slots never alias.
func (w *Workspace) Get(slot, n int) []byte {
	for len(w.slots) <= slot {
		w.slots = append(w.slots, nil)
	}
	if cap(w.slots[slot]) < n {
		// Round up so that slowly growing sizes do not reallocate each time.
		c := n
		if c < 4096 {
			c = 4096
		} else {
			c += c / 4
		}
		w.slots[slot] = make([]byte, c)
	}
	return w.slots[slot][:n]
}

// Release drops buffers larger than keep bytes so that one huge operation
// does not pin memory for the life of the communicator.
func (w *Workspace) Release(keep int) {
	for i, b := range w.slots {
		if cap(b) > keep {
			w.slots[i] = nil
		}
	}
	for _, c := range w.children {
		c.Release(keep)
	}
}
