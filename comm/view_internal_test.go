package comm

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/shm"
)

// viewingConn is a shared-memory connection that counts its viewed
// receives.
type viewingConn struct {
	*shm.Conn
	views *atomic.Int64
}

func (v viewingConn) RecvView(ctx context.Context, want transport.Header, buf []byte, align int, use transport.Consumer) error {
	v.views.Add(1)
	return v.Conn.RecvView(ctx, want, buf, align, use)
}

// plainConn is a connection seen only as a transport.Conn.
type plainConn struct{ transport.Conn }

// TestReductionsView: over shared memory, AllReduce (recursive
// halving-doubling and ring sizes), ReduceScatter and Reduce reduce what
// they receive where the connection holds it, and get the same results as
// over a connection that cannot show it (received, then reduced).
func TestReductionsView(t *testing.T) {
	for _, viewing := range []bool{true, false} {
		t.Run(fmt.Sprintf("viewing=%v", viewing), func(t *testing.T) {
			views := new(atomic.Int64)
			comms := shmPair(t, shm.Config{CMAThreshold: 1 << 20}, func(c *shm.Conn) transport.Conn {
				if viewing {
					return viewingConn{c, views}
				}
				return plainConn{c}
			})
			// Integers and halves of them: every sum is exact in float32.
			input := func(rank, n int) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32((i*7+rank*13)%1000) / 2
				}
				return x
			}
			sum := func(n int) []float32 {
				a, b := input(0, n), input(1, n)
				for i := range a {
					a[i] += b[i]
				}
				return a
			}
			for _, tc := range []struct {
				op string
				n  int // elements per rank's input
			}{
				{"allreduce", 5001},    // recursive halving-doubling
				{"allreduce", 300_001}, // ring, odd count
				{"reducescatter", 300_002},
				{"reduce", 700_003}, // the chain, in chunks
			} {
				before := views.Load()
				out := make([][]float32, 2)
				onEach(t, fmt.Sprintf("%s of %d", tc.op, tc.n), comms, func(r int, c *Communicator) error {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					in := input(r, tc.n)
					switch tc.op {
					case "allreduce":
						out[r] = make([]float32, tc.n)
						return AllReduce(ctx, c, in, out[r], Sum)
					case "reducescatter":
						out[r] = make([]float32, tc.n/2)
						return ReduceScatter(ctx, c, in, out[r], Sum)
					}
					out[r] = make([]float32, tc.n)
					return Reduce(ctx, c, in, out[r], Sum, 1)
				})
				want := sum(tc.n)
				for r := range comms {
					got, exp := out[r], want
					switch tc.op {
					case "reducescatter":
						exp = want[r*tc.n/2 : (r+1)*tc.n/2]
					case "reduce":
						if r != 1 {
							continue
						}
					}
					for i := range exp {
						if got[i] != exp[i] {
							t.Fatalf("%s of %d: rank %d element %d = %v, want %v", tc.op, tc.n, r, i, got[i], exp[i])
						}
					}
				}
				if got := views.Load() - before; (got > 0) != viewing {
					t.Errorf("%s of %d: %d viewed receives", tc.op, tc.n, got)
				}
			}
		})
	}
}
