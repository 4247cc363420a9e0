package comm_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/reference"
	"github.com/occl/occl/transport/mem"
)

// p2pMsg is the reference content of message i from rank from, of n bytes.
func p2pMsg(from, i, n int) []byte {
	return reference.Input(comm.Uint8, comm.Sum, from, 1000*i, n)
}

// TestGroupSendsFirst runs groups whose sends go on the calling goroutine
// while their connections buffer them (in-process pipes of
// mem.DefaultCapacity bytes), and the rest on goroutines: every message
// must arrive once, intact and in order, whichever way each went.
//   - A group whose sends fill the connection part way: earlier
//     unreceived sends already hold part of it, so its first sends are
//     buffered and the later ones wait for the receiver.
//   - A group whose sends are all buffered and whose receives are not all
//     eager (a receive of more than the eager limit).
//   - An all-to-all of small messages, every one buffered and eager.
func TestGroupSendsFirst(t *testing.T) {
	const (
		msg = 40 << 10 // a sixth of a pipe
		pre = 3        // unreceived plain sends before the group
		k   = 8        // the group's sends to the right
		big = mem.DefaultCapacity / 2
	)
	for _, size := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", size), func(t *testing.T) {
			requireOK(t, runLocal(t, size, func(ctx context.Context, c *comm.Communicator) error {
				ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				r := c.Rank()
				right, left := (r+1)%size, (r+size-1)%size
				for i := range pre {
					if err := c.Send(ctx, comm.Raw(p2pMsg(r, i, msg), comm.Uint8), right); err != nil {
						return fmt.Errorf("plain send %d: %w", i, err)
					}
				}
				// Filling: pre+k messages from the left, and one 8-byte
				// message from the right.
				got := make([][]byte, pre+k)
				g := c.NewGroup()
				for i := range k {
					g.Send(comm.Raw(p2pMsg(r, pre+i, msg), comm.Uint8), right)
				}
				g.Send(comm.Raw(p2pMsg(r, 99, 8), comm.Uint8), left)
				for i := range got {
					got[i] = make([]byte, msg)
					g.Recv(comm.Raw(got[i], comm.Uint8), left)
				}
				small := make([]byte, 8)
				g.Recv(comm.Raw(small, comm.Uint8), right)
				if err := g.Run(ctx); err != nil {
					return fmt.Errorf("filling group: %w", err)
				}
				for i, b := range got {
					if !bytes.Equal(b, p2pMsg(left, i, msg)) {
						return fmt.Errorf("filling group: message %d from rank %d differs", i, left)
					}
				}
				if !bytes.Equal(small, p2pMsg(right, 99, 8)) {
					return fmt.Errorf("filling group: the small message from rank %d differs", right)
				}

				// A receive past the eager limit.
				large := make([]byte, big)
				err := c.NewGroup().
					Send(comm.Raw(p2pMsg(r, 7, big), comm.Uint8), right).
					Recv(comm.Raw(large, comm.Uint8), left).Run(ctx)
				if err != nil {
					return fmt.Errorf("large receive: %w", err)
				}
				if !bytes.Equal(large, p2pMsg(left, 7, big)) {
					return fmt.Errorf("large receive: the message from rank %d differs", left)
				}

				// Small all-to-all, self included.
				in := make([][]byte, size)
				g = c.NewGroup()
				for to := range size {
					g.Send(comm.Raw(p2pMsg(r, 50+to, 24), comm.Uint8), to)
				}
				for from := range size {
					in[from] = make([]byte, 24)
					g.Recv(comm.Raw(in[from], comm.Uint8), from)
				}
				if err := g.Run(ctx); err != nil {
					return fmt.Errorf("all-to-all group: %w", err)
				}
				for from, b := range in {
					if !bytes.Equal(b, p2pMsg(from, 50+r, 24)) {
						return fmt.Errorf("all-to-all group: the message from rank %d differs", from)
					}
				}
				return nil
			}))
		})
	}
}
