package comm

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/occl/occl/comm/internal/wire"
	"github.com/occl/occl/transport/tcp"
)

// TestRendezvousFreesAddressFirst: when a rendezvous's result is out, its
// address can be bound again at once, as the next job on the same unique id
// does right after this one's Init returned. The rendezvous is held right
// after it published its result, so a listener closed any later (as a
// deferred close after the result was) is still bound when the test binds.
func TestRendezvousFreesAddressFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for round := range 3 {
		id, err := NewUniqueIDAt("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tcp.Listen(id.Addr, id.Secret[:], listenFilter(tcp.PurposeRendezvous, commIDOf(id)), nil)
		if err != nil {
			t.Fatal(err)
		}
		hold := make(chan struct{})
		rv := startRendezvous(ctx, ln, rendezvousSpec{size: 1, members: 1, published: func() { <-hold }}, discard{})
		tc, err := tcp.Dial(ctx, id.Addr, id.Secret[:], tcp.Hello{Purpose: tcp.PurposeRendezvous, Comm: commIDOf(id), From: 0, To: 0, NStreams: 1})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tcp.NewConn([]*net.TCPConn{tc}, tcp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := sendMsg(ctx, conn, &wire.Msg{Type: wire.Join, Rank: 0, Size: 1}); err != nil {
			t.Fatal(err)
		}
		if m, _, err := recvMsg(ctx, conn, nil); err != nil || m.Type != wire.Table {
			t.Fatalf("round %d: table: %v (type %d)", round, err, m.Type)
		}
		conns, err := rv.wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		again, err := net.Listen("tcp", id.Addr)
		close(hold)
		if err != nil {
			t.Fatalf("round %d: the rendezvous address is still bound after its result: %v", round, err)
		}
		again.Close()
		conn.Close()
		for _, c := range conns {
			c.Close()
		}
	}
}

// discard is a logger that drops every message.
type discard struct{}

func (discard) Warn(string, ...any) {}
