package comm

import (
	"context"
	"testing"

	"github.com/occl/occl/transport"
)

// echoConn is a peer that answers at once: Recv returns the last payload
// Send was given, under the header the receiver wants. It stands for a
// peer whose frames are always there, so that a benchmark through it
// measures what an operation costs on one rank apart from waiting.
type echoConn struct{ last []byte }

func (e *echoConn) Send(_ context.Context, _ transport.Header, p []byte) error {
	e.last = append(e.last[:0], p...)
	return nil
}

func (e *echoConn) Recv(_ context.Context, _ transport.Header, buf []byte) error {
	copy(buf, e.last)
	return nil
}

func (e *echoConn) EagerLimit() int    { return 1 << 20 }
func (e *echoConn) Buffers(n int) bool { return true }
func (e *echoConn) Close() error       { return nil }

// BenchmarkMachinery measures a small blocking collective on rank 0 of two
// ranks whose peer answers at once (echoConn): the cost of the operation's
// path through the communicator, the schedule and the transport's
// interface, without a transfer or a wait. Allocations are per operation.
func BenchmarkMachinery(b *testing.B) {
	comms, err := NewLocal(2)
	if err != nil {
		b.Fatal(err)
	}
	c := comms[0]
	defer comms[1].Close()
	defer c.Close()
	c.links.conns[1] = &echoConn{}
	ctx := context.Background()
	x := make([]float32, 2)
	y := make([]float32, 4)
	b.Run("AllReduce8B", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := AllReduce(ctx, c, x, x, Sum); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AllToAll16B", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := c.AllToAll(ctx, Slice(y), Slice(y)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Broadcast8B", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := c.Broadcast(ctx, Slice(x), Slice(x), 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	z := make([]float32, 4)
	b.Run("Barrier", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := c.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AllToAll16BOutOfPlace", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := c.AllToAll(ctx, Slice(y), Slice(z)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SendRecv8B", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := c.NewGroup().Send(Slice(x), 1).Recv(Slice(x), 1).Run(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	counts, displs := []int{1, 3}, []int{0, 1}
	b.Run("AllToAllV16BOutOfPlace", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := c.AllToAllV(ctx, Slice(y), counts, displs, Slice(z), counts, displs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
