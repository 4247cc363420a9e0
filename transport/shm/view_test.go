package shm_test

import (
	"context"
	"testing"

	"github.com/occl/occl/algo"
	"github.com/occl/occl/transport"
)

// sumInto is a transport.Consumer that adds each piece, as float32s, into
// the same bytes of dst.
type sumInto struct{ dst []byte }

func (s *sumInto) Consume(off int, piece []byte) {
	algo.ReduceInto(s.dst[off:off+len(piece)], piece, algo.Float32, algo.Sum)
}

// BenchmarkRecvReduce receives float32 payloads from a sender goroutine
// and adds them into a vector, as a ring reduce-scatter's receiver does:
// copied out of the ring first (Recv, then ReduceInto), or reduced where
// the ring holds them (RecvView).
func BenchmarkRecvReduce(b *testing.B) {
	for _, size := range []int{64 << 10, 256 << 10} {
		for _, view := range []bool{false, true} {
			name := sizeName(size) + "/copy"
			if view {
				name = sizeName(size) + "/view"
			}
			b.Run(name, func(b *testing.B) {
				a, c := pair(b, 4<<20)
				defer a.Close()
				defer c.Close()
				ctx := context.Background()
				out, stage, acc := make([]byte, size), make([]byte, size), make([]byte, size)
				h := transport.Header{Kind: transport.KindCollective, Comm: 7}
				done := background(b.N, func(i int) error {
					h := h
					h.Seq = uint64(i)
					return a.Send(ctx, h, out)
				})
				sink := &sumInto{dst: acc}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					h := h
					h.Seq = uint64(i)
					var err error
					if view {
						err = c.RecvView(ctx, h, stage, 4, sink)
					} else if err = c.Recv(ctx, h, stage); err == nil {
						algo.ReduceInto(acc, stage, algo.Float32, algo.Sum)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
