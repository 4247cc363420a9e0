package algo

import (
	"context"
	"fmt"
	"sync"

	"github.com/occl/occl/transport"
)

// EagerPeers is implemented by Peers whose transport buffers small messages.
// EagerLimit(peer) is the largest message that Send to peer accepts without
// waiting for peer to receive it (given that peer has received every earlier
// message). Schedules use it to exchange small messages without a helper
// goroutine.
type EagerPeers interface {
	Peers
	// EagerLimit returns the eager message limit for peer in bytes.
	EagerLimit(peer int) int
}

// LendPeers is implemented by Peers that can lend large messages (see
// transport.Lender): the receiver copies the message out of this rank's
// memory, and Lend returns before it has, so that a rank can post all its
// sends, receive, and then wait for its messages to be taken, with one copy
// of every byte and no helper goroutine.
type LendPeers interface {
	Peers
	// LendMin returns the smallest message Lend lends to peer, 0 if it
	// lends none. Send of a message of any size to peer still returns as
	// its transport's Send does.
	LendMin(peer int) int
	// LentMin returns the smallest message peer lends to this rank (what
	// LendMin returns on peer's side), 0 if it lends none: a receiver
	// expects such messages whole where the sender lends them.
	LentMin(peer int) int
	// Lend sends buf, of at least LendMin(peer) bytes, to peer as message
	// step without waiting for the copy. buf must not change until
	// Settle(peer) returns.
	Lend(ctx context.Context, peer int, step uint32, buf []byte) error
	// Settle waits until peer has copied every message lent to it. After
	// an error the messages are withdrawn and the connection fails.
	Settle(ctx context.Context, peer int) error
}

// DuplexPeers is implemented by Peers whose connections can send a
// message and receive another at once on the calling goroutine (see
// transport.Duplex): an exchange with one peer then needs no helper
// goroutine, and no wake-up of one thread by another.
type DuplexPeers interface {
	Peers
	// DuplexMax returns the largest message Exchange moves with peer, in
	// either direction, 0 if it moves none.
	DuplexMax(peer int) int
	// Exchange sends sbuf to peer as message sstep and receives message
	// rstep from peer into rbuf, both at most DuplexMax(peer) bytes.
	Exchange(ctx context.Context, peer int, sstep uint32, sbuf []byte, rstep uint32, rbuf []byte) error
}

// duplexWith returns p as DuplexPeers if it exchanges messages of n
// bytes with peer at once, nil if not. Only messages of at most a piece
// of the pairwise all-to-all (PairwisePiece) are exchanged so: one
// thread copying both ways is faster than two for one such message, but
// a longer exchange goes faster as a send and a receive that run on two
// CPUs. Over loopback TCP, 2 processes on 2 cores, AllToAll medians of 3
// to 10 interleaved rounds, two goroutines / one: 512 KiB 86 / 81 us, 1 MiB
// 181 / 162 us, 2 MiB 294 / 318 us, 16 MiB 2.18 / 2.70 ms.
func duplexWith(p Peers, peer, n int) DuplexPeers {
	if n > pairwiseChunk {
		return nil
	}
	if d, ok := p.(DuplexPeers); ok {
		if m := d.DuplexMax(peer); m > 0 && n <= m {
			return d
		}
	}
	return nil
}

// SendRecv sends sbuf to rank to as message sstep and receives message rstep
// from rank from into rbuf, concurrently, so that two ranks exchanging with
// each other cannot deadlock whatever the message sizes. Both messages are
// sent and received even when empty.
//
// When p implements EagerPeers and sbuf fits in the eager limit of to, the
// send is done inline before the receive; otherwise the send runs in a
// goroutine while the caller receives. SendRecv waits for both and returns
// the first error; a failure on one side cancels the other.
func SendRecv(ctx context.Context, p Peers, to int, sstep uint32, sbuf []byte, from int, rstep uint32, rbuf []byte) error {
	return sendRecv(ctx, p, to, sstep, sbuf, from, rstep, rbuf, nil)
}

// recv receives message step from peer into buf, or, where red is not
// nil, reduces it as red says (see recvReduce; buf is then its stage).
func recv(ctx context.Context, p Peers, peer int, step uint32, buf []byte, red *reduction) error {
	if red != nil {
		return recvReduce(ctx, p, peer, step, buf, red)
	}
	return p.Recv(ctx, peer, step, buf)
}

// sendRecv is SendRecv whose received message is reduced as red says
// where red is not nil.
func sendRecv(ctx context.Context, p Peers, to int, sstep uint32, sbuf []byte, from int, rstep uint32, rbuf []byte, red *reduction) error {
	if ep, ok := p.(EagerPeers); ok && len(sbuf) <= ep.EagerLimit(to) {
		if err := p.Send(ctx, to, sstep, sbuf); err != nil {
			return fmt.Errorf("send step %d to rank %d: %w", sstep, to, err)
		}
		if err := recv(ctx, p, from, rstep, rbuf, red); err != nil {
			return fmt.Errorf("recv step %d from rank %d: %w", rstep, from, err)
		}
		return nil
	}
	if to == from && red == nil {
		if d := duplexWith(p, to, max(len(sbuf), len(rbuf))); d != nil {
			if err := d.Exchange(ctx, to, sstep, sbuf, rstep, rbuf); err != nil {
				return fmt.Errorf("exchange steps %d/%d with rank %d: %w", sstep, rstep, to, err)
			}
			return nil
		}
	}
	g := newGroup(ctx)
	defer g.cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer RecoverTo(g.fail)
		if err := p.Send(g.ctx, to, sstep, sbuf); err != nil {
			g.fail(fmt.Errorf("send step %d to rank %d: %w", sstep, to, err))
		}
	}()
	if err := recv(g.ctx, p, from, rstep, rbuf, red); err != nil {
		g.fail(fmt.Errorf("recv step %d from rank %d: %w", rstep, from, err))
	}
	<-done
	return g.err
}

// exchange is SendRecv with the same step label on both messages that skips
// empty messages. Both sides of every message must know its length, so that
// a message is skipped by its sender exactly when its receiver skips it.
func exchange(ctx context.Context, p Peers, to int, sbuf []byte, from int, rbuf []byte, step uint32) error {
	return exchangeReduce(ctx, p, to, sbuf, from, rbuf, step, nil)
}

// exchangeReduce is exchange whose received message is reduced as red
// says where red is not nil (rbuf is then its stage).
func exchangeReduce(ctx context.Context, p Peers, to int, sbuf []byte, from int, rbuf []byte, step uint32, red *reduction) error {
	switch {
	case len(sbuf) == 0 && len(rbuf) == 0:
		return nil
	case len(rbuf) == 0:
		if err := p.Send(ctx, to, step, sbuf); err != nil {
			return fmt.Errorf("send step %d to rank %d: %w", step, to, err)
		}
		return nil
	case len(sbuf) == 0:
		if err := recv(ctx, p, from, step, rbuf, red); err != nil {
			return fmt.Errorf("recv step %d from rank %d: %w", step, from, err)
		}
		return nil
	}
	return sendRecv(ctx, p, to, step, sbuf, from, step, rbuf, red)
}

// group tracks the helper goroutines of one operation: the first failure is
// kept and cancels the shared context, so that the other goroutines stop
// instead of waiting for messages that will never come.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	err    error
}

func newGroup(ctx context.Context) *group {
	g := &group{}
	// Its goroutines wait on each other's progress: their transport
	// waits must let the others run.
	g.ctx, g.cancel = context.WithCancel(transport.WithYield(ctx))
	return g
}

// fail records err if it is the first failure and cancels the group.
// Failures after the first are usually consequences of the cancellation and
// are dropped.
func (g *group) fail(err error) {
	if err == nil {
		return
	}
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
	g.cancel()
}

// wait waits for the token channel or cancellation.
func (g *group) wait(tokens <-chan struct{}) error {
	select {
	case <-tokens:
		return nil
	case <-g.ctx.Done():
		return g.ctx.Err()
	}
}
