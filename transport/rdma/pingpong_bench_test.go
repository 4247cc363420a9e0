package rdma

import (
	"context"
	"testing"
)

// BenchmarkPingPong measures the round trip of an 8-byte frame.
func BenchmarkPingPong(b *testing.B) {
	x, y := pairWith(b, pairOpts{})
	ctx := context.Background()
	buf := make([]byte, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rb := make([]byte, 8)
		for i := 0; i < b.N; i++ {
			if y.Recv(ctx, hdr(uint64(i), 0), rb) != nil || y.Send(ctx, hdr(uint64(i), 1), rb) != nil {
				return
			}
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := x.Send(ctx, hdr(uint64(i), 0), buf); err != nil {
			b.Fatal(err)
		}
		if err := x.Recv(ctx, hdr(uint64(i), 1), buf); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}
