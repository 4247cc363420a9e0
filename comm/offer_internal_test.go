package comm

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/internal/fanout"
	"github.com/occl/occl/internal/reference"
	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/mem"
	"github.com/occl/occl/transport/shm"
)

// offeringConn is a shared-memory connection that counts its offers.
type offeringConn struct {
	*shm.Conn
	offers *atomic.Int64
}

func (o offeringConn) Offer(ctx context.Context, h transport.Header, payload []byte) error {
	o.offers.Add(1)
	return o.Conn.Offer(ctx, h, payload)
}

// offeringPair makes two in-process communicators joined by a
// shared-memory connection that offers payloads of 32 KiB or more and
// lends them from 1 MiB, and the count of their offers.
func offeringPair(t *testing.T) ([]*Communicator, *atomic.Int64) {
	t.Helper()
	offers := new(atomic.Int64)
	sc := shm.Config{CMAThreshold: 1 << 20, OfferThreshold: 32 << 10}
	comms := shmPair(t, sc, func(c *shm.Conn) transport.Conn { return offeringConn{c, offers} })
	return comms, offers
}

// shmPair makes two in-process communicators of one core each joined by
// a shared-memory connection configured as sc (its ranks, communicator
// and epoch filled in), which wrap turns into the connection each
// communicator uses.
func shmPair(t *testing.T, sc shm.Config, wrap func(*shm.Conn) transport.Conn) []*Communicator {
	t.Helper()
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	x, y := mem.Pipe(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sc.Comm, sc.Epoch = rand.Uint64(), 1
	var (
		ends [2]*shm.Conn
		errs [2]error
		wg   sync.WaitGroup
	)
	for r, ctl := range []transport.Conn{x, y} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := sc
			c.Self, c.Peer = r, 1-r
			ends[r], errs[r] = shm.Connect(ctx, ctl, c)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("shm.Connect: %v / %v", errs[0], errs[1])
	}
	if ends[0].LendMin() == 0 {
		t.Fatal("this process cannot read its own memory by cross-memory attach")
	}
	g := newLocalGroup(2)
	g.conns[0][1].Close()
	g.conns[1][0].Close()
	g.conns[0][1], g.conns[1][0] = wrap(ends[0]), wrap(ends[1])
	cfg.cpus = 1
	comms := g.members(0x0ffe, []string{cfg.hostID, cfg.hostID}, cfg)
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// onEach calls fn for every rank of comms at once, each on a goroutine of
// its own, and fails t, naming what, if any returns an error.
func onEach(t *testing.T, what string, comms []*Communicator, fn func(r int, c *Communicator) error) {
	t.Helper()
	for r, err := range fanout.Each(comms, fn) {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

// TestGroupOffers: over shared memory, a group's send of at least the
// connection's smallest offer and within its eager limit is offered, and
// arrives intact whether the peer copies it while offered or the sender
// takes it back: in an exchange, from blocking Sends that both ranks make
// before their Recvs (which would wait for each other if an offer waited
// for its receiver), from two sends to the same peer in one group (the
// second, buffered, takes the first back unless the peer has claimed it).
// Smaller payloads and those past the eager limit are not offered.
func TestGroupOffers(t *testing.T) {
	comms, offers := offeringPair(t)
	eager := comms[0].links.to(1).EagerLimit()
	steps := []struct {
		name   string
		sizes  []int // the sizes of one rank's sends to the other, in order
		split  bool  // blocking Sends, then blocking Recvs
		offers int64 // offers per rank
	}{
		{"exchange 64 KiB", []int{64 << 10}, false, 1},
		{"exchange 16 KiB", []int{16 << 10}, false, 0},
		{"send then receive 256 KiB", []int{256 << 10}, true, 1},
		{"send then receive at the eager limit", []int{eager}, true, 1},
		{"two sends to one peer", []int{64 << 10, 100 << 10}, false, 1},
		{"past the eager limit", []int{eager + 1}, false, 0},
	}
	for i, st := range steps {
		before := offers.Load()
		onEach(t, st.name, comms, func(r int, c *Communicator) error { return offerStep(c, i, st.sizes, st.split) })
		if got := offers.Load() - before; got != 2*st.offers {
			t.Errorf("%s: %d offers, want %d per rank", st.name, got, st.offers)
		}
	}
}

// offerStep sends messages of the given sizes to the other rank and
// receives its messages, in one group or (split) with blocking calls,
// and checks what arrived.
func offerStep(c *Communicator, step int, sizes []int, split bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	peer := 1 - c.Rank()
	msg := func(from, i int) []byte { return reference.Input(Uint8, Sum, from, 1000*step+i, sizes[i]) }
	got := make([][]byte, len(sizes))
	g := c.NewGroup()
	for i := range sizes {
		got[i] = make([]byte, sizes[i])
		if split {
			if err := c.Send(ctx, Raw(msg(c.Rank(), i), Uint8), peer); err != nil {
				return fmt.Errorf("send %d: %w", i, err)
			}
			continue
		}
		g.Send(Raw(msg(c.Rank(), i), Uint8), peer)
	}
	for i := range sizes {
		if split {
			if err := c.Recv(ctx, Raw(got[i], Uint8), peer); err != nil {
				return fmt.Errorf("recv %d: %w", i, err)
			}
			continue
		}
		g.Recv(Raw(got[i], Uint8), peer)
	}
	if !split {
		if err := g.Run(ctx); err != nil {
			return err
		}
	}
	for i := range sizes {
		if !bytes.Equal(got[i], msg(peer, i)) {
			return fmt.Errorf("message %d (%d bytes) from rank %d differs", i, sizes[i], peer)
		}
	}
	return nil
}

// TestGroupOfferWaits: a group that offers a send above the short
// operations on shared memory waits as a lending all-to-all does (the
// copy waits, which give the core away), and so does one that lends a
// send past the eager limit; a short one keeps the short waits, and a
// large one that neither offers nor lends (a send past the eager limit
// below the smallest loan, receives alone) waits alone.
func TestGroupOfferWaits(t *testing.T) {
	comms, _ := offeringPair(t)
	c := comms[0]
	eager, lendMin := c.links.to(1).EagerLimit(), c.links.to(1).(transport.Lender).LendMin()
	send := func(n int) p2pOp { return p2pOp{send: true, peer: 1, buf: Raw(make([]byte, n), Uint8)} }
	recv := func(n int) p2pOp { return p2pOp{peer: 1, buf: Raw(make([]byte, n), Uint8)} }
	for _, tc := range []struct {
		name string
		ops  []p2pOp
		want waits
	}{
		{"offered 512 KiB", []p2pOp{send(512 << 10), recv(512 << 10)}, waitCopy},
		{"lent past the eager limit", []p2pOp{send(lendMin)}, waitCopy},
		{"past the eager limit, not lent", []p2pOp{send(eager + 1)}, waitAlone},
		{"short, offered 64 KiB", []p2pOp{send(64 << 10), recv(64 << 10)}, waitShort},
		{"receives alone", []p2pOp{recv(512 << 10)}, waitAlone},
	} {
		if got := c.p2pWaits(tc.ops); got != tc.want {
			t.Errorf("%s: waits %d, want %d", tc.name, got, tc.want)
		}
	}
}
