package comm_test

import (
	"context"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// TestBlockingCallsAllocateNothing: a blocking collective between two
// ranks allocates nothing once warm, on either rank: its request is
// recycled, its arguments travel in the request, and its Done channel is
// never made.
func TestBlockingCallsAllocateNothing(t *testing.T) {
	comms := localComms(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ops := []struct {
		name string
		run  func(c *comm.Communicator, x, y []float32) error
	}{
		{"AllReduce", func(c *comm.Communicator, x, y []float32) error {
			return comm.AllReduce(ctx, c, x[:4], y[:4], comm.Sum)
		}},
		{"Broadcast", func(c *comm.Communicator, x, y []float32) error { return comm.Broadcast(ctx, c, x[:4], y[:4], 1) }},
		{"Reduce", func(c *comm.Communicator, x, y []float32) error {
			return comm.Reduce(ctx, c, x[:4], y[:4], comm.Max, 0)
		}},
		{"AllToAll", func(c *comm.Communicator, x, y []float32) error { return comm.AllToAll(ctx, c, x[:8], y[:8]) }},
		{"Barrier", func(c *comm.Communicator, x, y []float32) error { return c.Barrier(ctx) }},
	}
	for _, op := range ops {
		const runs = 200
		// The peer makes as many calls as AllocsPerRun: one warm-up and
		// runs measured ones (plus the warm-up below).
		peer := make(chan error, 1)
		go func() {
			x, y := make([]float32, 8), make([]float32, 8)
			for range runs + 2 {
				if err := op.run(comms[1], x, y); err != nil {
					peer <- err
					return
				}
			}
			peer <- nil
		}()
		x, y := make([]float32, 8), make([]float32, 8)
		var failed error
		if err := op.run(comms[0], x, y); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		allocs := testing.AllocsPerRun(runs, func() {
			if err := op.run(comms[0], x, y); err != nil && failed == nil {
				failed = err
			}
		})
		if failed != nil {
			t.Fatalf("%s: %v", op.name, failed)
		}
		if err := <-peer; err != nil {
			t.Fatalf("%s on the peer: %v", op.name, err)
		}
		if allocs != 0 && !raceEnabled { // the detector's sync.Pool drops a share of what it is given
			t.Errorf("%s: %.2f allocations per call on two ranks, want 0", op.name, allocs)
		}
	}
}

// TestRequestDone: Done is closed when the request completes, whether it
// was asked for before (made, then closed) or after (already closed), and
// Test and Wait agree with it.
func TestRequestDone(t *testing.T) {
	comms := localComms(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x := []float32{1, 2}
	r0 := comms[0].AllReduceAsync(ctx, comm.Slice(x), comm.Slice(x), comm.Sum)
	early := r0.Done() // made before the peer joins: the request cannot have completed
	select {
	case <-early:
		t.Fatal("Done closed before the peer took part")
	default:
	}
	if ok, _ := r0.Test(); ok {
		t.Fatal("Test reports completion before the peer took part")
	}
	y := []float32{3, 4}
	r1 := comms[1].AllReduceAsync(ctx, comm.Slice(y), comm.Slice(y), comm.Sum)
	select {
	case <-early:
	case <-ctx.Done():
		t.Fatal("Done never closed")
	}
	if err := r1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r1.Done(): // asked for after completion
	default:
		t.Fatal("Done of a completed request is not closed")
	}
	if ok, err := r0.Test(); !ok || err != nil {
		t.Fatalf("Test after completion: %v, %v", ok, err)
	}
	if x[0] != 4 || x[1] != 6 || y[0] != 4 || y[1] != 6 {
		t.Fatalf("sums %v and %v, want [4 6] on both", x, y)
	}
}

// localComms makes n ranks in this process, closed when the test ends.
func localComms(t *testing.T, n int) []*comm.Communicator {
	t.Helper()
	cs, err := comm.NewLocal(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(cs) })
	return cs
}
