package comm_test

import (
	"context"
	"testing"

	"github.com/occl/occl/comm"
)

// BenchmarkOverhead measures what an operation costs apart from moving
// data: blocking and Async calls on a communicator of one rank, whose
// schedules only copy. Allocations are per operation.
func BenchmarkOverhead(b *testing.B) {
	comms, err := comm.NewLocal(1)
	if err != nil {
		b.Fatal(err)
	}
	c := comms[0]
	defer c.Close()
	ctx := context.Background()
	x := make([]float32, 2)
	b.Run("AllReduce", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := comm.AllReduce(ctx, c, x, x, comm.Sum); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AllReduceAsync", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := c.AllReduceAsync(ctx, comm.Slice(x), comm.Slice(x), comm.Sum).Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same, each request released once waited for (Request.Release).
	b.Run("AllReduceAsyncReleased", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			r := c.AllReduceAsync(ctx, comm.Slice(x), comm.Slice(x), comm.Sum)
			if err := r.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			r.Release()
		}
	})
}
