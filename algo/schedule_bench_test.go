package algo

import (
	"context"
	"fmt"
	"testing"

	"github.com/occl/occl/algo/internal/fakepeers"
)

// benchCollective runs op on p ranks of one fake network b.N times.
// Every iteration is a full collective on all ranks; allocations are
// reported per iteration for all ranks together, including the fake
// network's own.
func benchCollective(b *testing.B, p, bytes int, op func(ctx context.Context, rank int, peers Peers, ws *Workspace, data []byte) error) {
	nw := fakepeers.New(p, fakepeers.Options{EagerLimit: 4096})
	ws := make([]*Workspace, p)
	data := make([][]byte, p)
	for r := range ws {
		ws[r] = new(Workspace)
		data[r] = makeInput(Float32, Sum, r, bytes/4)
	}
	ctx := context.Background()
	fn := func(ctx context.Context, rank int, peers fakepeers.Peers) error {
		return op(ctx, rank, peers, ws[rank], data[rank])
	}
	// Warm up workspaces and the network's message pools.
	if err := nw.Run(ctx, fn); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := nw.Run(ctx, fn); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllReduceRing(b *testing.B) {
	for _, size := range []int{64 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("p4/%dKiB", size>>10), func(b *testing.B) {
			benchCollective(b, 4, size, func(ctx context.Context, _ int, peers Peers, ws *Workspace, data []byte) error {
				return AllReduceRing(ctx, peers, ws, data, Float32, Sum, 64<<10)
			})
		})
	}
}

// BenchmarkReduceScatterRingStep measures one ring step: a reduce-scatter
// on two ranks is a single step of the ring.
func BenchmarkReduceScatterRingStep(b *testing.B) {
	const size = 1 << 20
	segs := PartitionOffsets(nil, size/4, 2)
	benchCollective(b, 2, size, func(ctx context.Context, _ int, peers Peers, ws *Workspace, data []byte) error {
		return ReduceScatterRing(ctx, peers, ws, data, Float32, Sum, segs, 64<<10)
	})
}

func BenchmarkAllReduceSmall(b *testing.B) {
	for _, ar := range allReduces {
		b.Run(ar.name+"/p8/4KiB", func(b *testing.B) {
			benchCollective(b, 8, 4<<10, func(ctx context.Context, _ int, peers Peers, ws *Workspace, data []byte) error {
				return ar.fn(ctx, peers, ws, data, Float32, Sum, 64<<10)
			})
		})
	}
}
