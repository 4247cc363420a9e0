package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
	"github.com/occl/occl/topo"
)

// TestBlockingCallsAllocateNothing: a blocking collective allocates
// nothing once warm, on any rank, at 2 ranks and at 4 (with and without a
// topology, whose cost model chooses the schedules, hierarchical ones
// among them): its request is recycled, its arguments travel in the
// request, its Done channel is never made, and the schedules keep their
// offsets, rank lists and views of sub-groups in the workspace. An Async
// call whose request is released once waited for allocates nothing
// either.
func TestBlockingCallsAllocateNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 4 // elements per rank
	ops := []struct {
		name string
		run  func(c *comm.Communicator, x, y []float32) error
	}{
		{"AllReduce", func(c *comm.Communicator, x, y []float32) error {
			return comm.AllReduce(ctx, c, x[:n], y[:n], comm.Sum)
		}},
		{"Broadcast", func(c *comm.Communicator, x, y []float32) error { return comm.Broadcast(ctx, c, x[:n], y[:n], 1) }},
		{"Reduce", func(c *comm.Communicator, x, y []float32) error {
			return comm.Reduce(ctx, c, x[:n], y[:n], comm.Max, 0)
		}},
		{"AllGather", func(c *comm.Communicator, x, y []float32) error {
			return comm.AllGather(ctx, c, x[:n], y[:n*c.Size()])
		}},
		{"ReduceScatter", func(c *comm.Communicator, x, y []float32) error {
			return comm.ReduceScatter(ctx, c, x[:n*c.Size()], y[:n], comm.Sum)
		}},
		{"AllToAll", func(c *comm.Communicator, x, y []float32) error {
			return comm.AllToAll(ctx, c, x[:n*c.Size()], y[:n*c.Size()])
		}},
		{"AllToAllV", func(c *comm.Communicator, x, y []float32) error {
			// Rank r sends r+1 elements to every rank.
			var counts, displs, rcounts, rdispls [4]int
			k := c.Size()
			for j := range k {
				counts[j], displs[j] = c.Rank()+1, j*n
				rcounts[j], rdispls[j] = j+1, j*n
			}
			return c.AllToAllV(ctx, comm.Slice(x[:n*k]), counts[:k], displs[:k], comm.Slice(y[:n*k]), rcounts[:k], rdispls[:k])
		}},
		{"Gather", func(c *comm.Communicator, x, y []float32) error {
			return comm.Gather(ctx, c, x[:n], y[:n*c.Size()], 0)
		}},
		{"Scatter", func(c *comm.Communicator, x, y []float32) error {
			return comm.Scatter(ctx, c, x[:n*c.Size()], y[:n], 1)
		}},
		{"Barrier", func(c *comm.Communicator, x, y []float32) error { return c.Barrier(ctx) }},
		{"Group, a ring step", func(c *comm.Communicator, x, y []float32) error {
			r, size := c.Rank(), c.Size()
			return c.NewGroup().Send(comm.Slice(x[:n]), (r+1)%size).Recv(comm.Slice(y[:n]), (r+size-1)%size).Run(ctx)
		}},
		{"AllReduceAsync, released", func(c *comm.Communicator, x, y []float32) error {
			r := c.AllReduceAsync(ctx, comm.Slice(x[:n]), comm.Slice(y[:n]), comm.Sum)
			err := r.Wait(ctx)
			r.Release()
			return err
		}},
		{"AllToAllAsync, released", func(c *comm.Communicator, x, y []float32) error {
			r := c.AllToAllAsync(ctx, comm.Slice(x[:n*c.Size()]), comm.Slice(y[:n*c.Size()]))
			err := r.Wait(ctx)
			r.Release()
			return err
		}},
	}
	for _, group := range []struct {
		name string
		size int
		topo string
	}{{"2 ranks", 2, ""}, {"4 ranks", 4, ""}, {"4 ranks on 2 hosts", 4, "hosts=2x2,hbd=8GB/s,eps=1GB/s"},
		{"4 ranks on a rail-only fabric", 4, "hosts=2x2,hbd=8GB/s,eps=1GB/s,rail_only=1"}} {
		var opts []comm.Option
		if group.topo != "" {
			tp, err := topo.FromSpec(group.topo)
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, comm.WithTopology(tp))
		}
		comms, err := comm.NewLocal(group.size, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeAll(comms) })
		for _, op := range ops {
			const runs = 200
			// The peers make as many calls as AllocsPerRun: one warm-up
			// and runs measured ones (plus the warm-up below).
			peers := make(chan error, len(comms))
			for _, c := range comms[1:] {
				go func() {
					x, y := make([]float32, n*len(comms)), make([]float32, n*len(comms))
					for range runs + 2 {
						if err := op.run(c, x, y); err != nil {
							peers <- err
							return
						}
					}
					peers <- nil
				}()
			}
			x, y := make([]float32, n*len(comms)), make([]float32, n*len(comms))
			var failed error
			if err := op.run(comms[0], x, y); err != nil {
				t.Fatalf("%s, %s: %v", group.name, op.name, err)
			}
			allocs := testing.AllocsPerRun(runs, func() {
				if err := op.run(comms[0], x, y); err != nil && failed == nil {
					failed = err
				}
			})
			if failed != nil {
				t.Fatalf("%s, %s: %v", group.name, op.name, failed)
			}
			for range comms[1:] {
				if err := <-peers; err != nil {
					t.Fatalf("%s, %s on a peer: %v", group.name, op.name, err)
				}
			}
			if allocs != 0 && !raceEnabled { // the detector's sync.Pool drops a share of what it is given
				t.Errorf("%s, %s: %.2f allocations per call, want 0", group.name, op.name, allocs)
			}
		}
	}
}

// TestRequestDone: Done is closed when the request completes, whether it
// was asked for before (made, then closed) or after (already closed), and
// Test and Wait agree with it.
func TestRequestDone(t *testing.T) {
	comms := commtest.Local(t, 2)
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

// TestReleasedRequestsServeAgain: requests released once completed serve
// later operations with the right results, a release before completion
// does nothing (the request still completes and reports), and a request
// released after a failure does not carry its error into the next one.
func TestReleasedRequestsServeAgain(t *testing.T) {
	comms := commtest.Local(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Rank 1 has not called it: rank 0's request cannot have completed.
	x0, x1 := []float32{1, 2}, []float32{3, 4}
	r0 := comms[0].AllReduceAsync(ctx, comm.Slice(x0), comm.Slice(x0), comm.Sum)
	r0.Release()
	r1 := comms[1].AllReduceAsync(ctx, comm.Slice(x1), comm.Slice(x1), comm.Sum)
	if err := r0.Wait(ctx); err != nil || x0[0] != 4 || x0[1] != 6 {
		t.Fatalf("request released before it completed: %v, result %v, want [4 6]", err, x0)
	}
	if err := r1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	r0.Release()
	r1.Release()

	errs := make(chan error, 2)
	for rank, c := range comms {
		go func() {
			x, y := make([]float32, 3), make([]float32, 3)
			for i := range 500 {
				for j := range x {
					x[j] = float32(rank*1000 + i + j)
				}
				r := c.AllReduceAsync(ctx, comm.Slice(x), comm.Slice(y), comm.Sum)
				if err := r.Wait(ctx); err != nil {
					errs <- err
					return
				}
				r.Release()
				for j := range y {
					if want := float32(1000 + 2*(i+j)); y[j] != want {
						errs <- fmt.Errorf("rank %d, call %d: element %d is %v, want %v", rank, i, j, y[j], want)
						return
					}
				}
			}
			// A request that failed, released, then a good call.
			r := c.AllReduceAsync(ctx, comm.Slice(x), comm.Slice(y[:1]), comm.Sum)
			if r.Wait(ctx) == nil {
				errs <- fmt.Errorf("rank %d: AllReduce of 3 into 1 element succeeded", rank)
				return
			}
			r.Release()
			r = c.AllReduceAsync(ctx, comm.Slice(x), comm.Slice(y), comm.Sum)
			errs <- r.Wait(ctx)
			r.Release()
		}()
	}
	for range comms {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
