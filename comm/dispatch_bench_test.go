package comm_test

import (
	"context"
	"testing"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

// BenchmarkDispatch measures small operations on 4 in-process ranks, so
// that the time and allocations per operation are those of choosing and
// dispatching the schedule rather than of moving bytes. With a topology
// the cost model chooses; without one the size rules do.
func BenchmarkDispatch(b *testing.B) {
	const n = 64
	ops := []struct {
		name string
		run  func(ctx context.Context, c *comm.Communicator, x, y []float32) error
	}{
		{"AllReduce", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return comm.AllReduce(ctx, c, x[:n], y[:n], comm.Sum)
		}},
		{"AllReduceInPlace", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return comm.AllReduce(ctx, c, y[:n], y[:n], comm.Sum)
		}},
		{"Broadcast", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return comm.Broadcast(ctx, c, x[:n], y[:n], 0)
		}},
		{"Reduce", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return comm.Reduce(ctx, c, x[:n], y[:n], comm.Sum, 0)
		}},
		{"AllGather", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return comm.AllGather(ctx, c, x[:n], y[:4*n])
		}},
		{"ReduceScatter", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return comm.ReduceScatter(ctx, c, x[:4*n], y[:n], comm.Sum)
		}},
		{"AllToAll", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return comm.AllToAll(ctx, c, x[:4*n], y[:4*n])
		}},
		{"AllToAllV", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			counts, displs := []int{n, n, n, n}, []int{0, n, 2 * n, 3 * n}
			return c.AllToAllV(ctx, comm.Slice(x[:4*n]), counts, displs, comm.Slice(y[:4*n]), counts, displs)
		}},
		{"Gather", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return comm.Gather(ctx, c, x[:n], y[:4*n], 0)
		}},
		{"Barrier", func(ctx context.Context, c *comm.Communicator, x, y []float32) error {
			return c.Barrier(ctx)
		}},
	}
	for _, fabric := range []struct{ name, spec string }{{"", ""}, {"/topo", "hosts=2x2,hbd=8GB/s,eps=1GB/s"}, {"/railonly", "hosts=2x2,hbd=8GB/s,eps=1GB/s,rail_only=1"}} {
		for _, op := range ops {
			name := op.name + fabric.name
			var opts []comm.Option
			if spec := fabric.spec; spec != "" {
				tp, err := topo.FromSpec(spec)
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, comm.WithTopology(tp))
			}
			b.Run(name, func(b *testing.B) {
				comms, err := comm.NewLocal(4, opts...)
				if err != nil {
					b.Fatal(err)
				}
				defer func() {
					for _, c := range comms {
						c.Close()
					}
				}()
				// A cancellable context, as callers' usually are.
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				b.ReportAllocs()
				done := make(chan error, len(comms))
				for _, c := range comms[1:] {
					go func() {
						x, y := make([]float32, 4*n), make([]float32, 4*n)
						var err error
						for i := 0; i < b.N && err == nil; i++ {
							err = op.run(ctx, c, x, y)
						}
						done <- err
					}()
				}
				x, y := make([]float32, 4*n), make([]float32, 4*n)
				for i := 0; i < b.N; i++ {
					if err := op.run(ctx, comms[0], x, y); err != nil {
						b.Fatal(err)
					}
				}
				for range comms[1:] {
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
