package comm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// TestDeadlineWhileQueued: an AllReduce with a 200 ms deadline queued
// behind a Barrier that cannot complete (rank 1 never calls it) returns its
// deadline's error at the deadline, not when the Barrier gives up at the
// communicator's timeout, and without failing the communicator itself.
func TestDeadlineWhileQueued(t *testing.T) {
	const timeout = 4 * time.Second
	comms, err := comm.NewLocal(2, comm.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	defer comms[0].Close()
	stuck := comms[0].BarrierAsync(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	x := []float32{1}
	start := time.Now()
	err = comm.AllReduce(ctx, comms[0], x, x, comm.Sum)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued AllReduce: %v, want its deadline's error", err)
	}
	var pe *comm.PeerError
	if errors.As(err, &pe) {
		t.Fatalf("queued AllReduce returned the communicator's failure %v, want its own deadline", err)
	}
	// A bound on correctness, not speed: the deadline is 200 ms, the
	// Barrier in front of it gives up only after the 4 s timeout.
	if took > timeout/2 {
		t.Fatalf("queued AllReduce returned after %v; its deadline was 200ms", took)
	}
	if x[0] != 1 {
		t.Fatalf("a withdrawn AllReduce wrote its buffer: %v", x[0])
	}
	if err := stuck.Wait(context.Background()); !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("Barrier rank 1 never joined: %v, want a timeout", err)
	}
}

// TestWithdrawnOperationKeepsCommunicator: operations whose deadline ends
// while they are queued (blocking and Async) are withdrawn; the ranks then
// go on with the next collective as if they had never been issued, and the
// communicator stays healthy.
func TestWithdrawnOperationKeepsCommunicator(t *testing.T) {
	comms, err := comm.NewLocal(2, comm.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	defer comms[0].Close()
	bg := context.Background()
	withdrawn := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		// Rank 1 joins the Barrier only after rank 0's operations behind
		// it were withdrawn.
		<-withdrawn
		if err := comms[1].Barrier(bg); err != nil {
			done <- err
			return
		}
		y := []int32{2}
		if err := comm.AllReduce(bg, comms[1], y, y, comm.Sum); err != nil {
			done <- err
			return
		}
		if y[0] != 3 {
			done <- errors.New("rank 1: wrong sum")
			return
		}
		done <- nil
	}()

	barrier := comms[0].BarrierAsync(bg)
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	a := []int32{100}
	async := comms[0].AllReduceAsync(ctx, comm.Slice(a), comm.Slice(a), comm.Sum)
	b := []int32{100}
	if err := comm.AllReduce(ctx, comms[0], b, b, comm.Sum); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued AllReduce: %v, want its deadline's error", err)
	}
	if err := async.Wait(bg); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued AllReduceAsync: %v, want its deadline's error", err)
	}
	close(withdrawn)
	if err := barrier.Wait(bg); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
	x := []int32{1}
	if err := comm.AllReduce(bg, comms[0], x, x, comm.Sum); err != nil {
		t.Fatalf("AllReduce after the withdrawn ones: %v", err)
	}
	if x[0] != 3 || a[0] != 100 || b[0] != 100 {
		t.Fatalf("sum %d (want 3); withdrawn buffers %d, %d (want untouched 100)", x[0], a[0], b[0])
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for r, c := range comms {
		if err := c.Err(); err != nil {
			t.Fatalf("rank %d failed: %v", r, err)
		}
	}
}

// TestWaitWithShorterDeadline: Wait with a context that ends before the
// operation returns that context's error while the operation goes on; it
// must not run the operation itself (the caller-runs-its-own-operation
// shortcut would block it until the peer comes), and the operation then
// completes normally.
func TestWaitWithShorterDeadline(t *testing.T) {
	comms, err := comm.NewLocal(2, comm.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	defer comms[0].Close()
	bg := context.Background()
	x := []int32{1}
	r := comms[0].AllReduceAsync(bg, comm.Slice(x), comm.Slice(x), comm.Sum)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a 100 ms deadline while rank 1 has not joined: %v, want its deadline's error", err)
	}
	y := []int32{2}
	if err := comm.AllReduce(bg, comms[1], y, y, comm.Sum); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(bg); err != nil || x[0] != 3 || y[0] != 3 {
		t.Fatalf("after rank 1 joined: %v, sums %d and %d, want 3", err, x[0], y[0])
	}
}
