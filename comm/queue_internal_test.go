package comm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/transport"
)

// TestBlockingCallWakesNoWorker: a blocking call runs its operation on the
// caller's goroutine and wakes no worker; an Async call wakes it. The
// worker is stopped first, so that nobody takes the wake-up token a push
// would leave: a blocking call must complete on its own and leave none.
func TestBlockingCallWakesNoWorker(t *testing.T) {
	comms, err := NewLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	defer c.Close()
	c.queue.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x := []float32{1, 2, 3}
	for i := range 3 {
		if err := AllReduce(ctx, c, x, x, Sum); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if n := len(c.queue.wake); n != 0 {
			t.Fatalf("call %d: a blocking call left %d wake-ups for the worker", i, n)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.NewGroup().Send(Slice(x), 0).Recv(Slice(make([]float32, 3)), 0).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(c.queue.wake); n != 0 {
		t.Fatalf("a blocking barrier or group left %d wake-ups for the worker", n)
	}
	r := c.AllReduceAsync(ctx, Slice(x), Slice(x), Sum)
	if n := len(c.queue.wake); n != 1 {
		t.Fatalf("an Async call left %d wake-ups for the worker, want 1", n)
	}
	// Without a worker it runs when its caller waits for it.
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if x[0] != 1 || x[2] != 3 {
		t.Fatalf("AllReduce of one rank changed its buffer: %v", x)
	}
}

// TestConcurrentBlockingCalls: goroutines making blocking calls on one
// communicator, each running its own operation when it is at the head of
// the queue and leaving it to the worker otherwise, never strand an
// operation in the queue (a lost wake-up would hang until the deadline),
// and mix with Async calls.
func TestConcurrentBlockingCalls(t *testing.T) {
	comms, err := NewLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const goroutines, calls = 4, 2000
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := []int64{int64(g), 1}
			for i := range calls {
				var err error
				if (g+i)%5 == 0 {
					err = c.AllReduceAsync(ctx, Slice(x), Slice(x), Sum).Wait(ctx)
				} else {
					err = AllReduce(ctx, c, x, x, Sum)
				}
				if err != nil {
					errs <- err
					return
				}
				if x[0] != int64(g) || x[1] != 1 {
					errs <- &OpError{Rank: 0, Op: "AllReduce", Err: ErrInvalidArgument}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestScheduleContext: a schedule runs under a twin of the shared
// default-timeout context that tells polling transports not to yield, and
// for a small operation to give the core away; a caller's own context (it
// has a deadline) is passed through unchanged.
func TestScheduleContext(t *testing.T) {
	var o opContext
	defer o.release()
	ctx := o.get(context.Background(), time.Minute, time.Now())
	for _, tc := range []struct {
		bytes int
		core  bool
	}{{8, true}, {shortOp, true}, {shortOp + 1, false}, {64 << 20, false}} {
		s := o.schedule(ctx, tc.bytes)
		if transport.Yields(s) {
			t.Errorf("%d bytes: schedule context of the shared context yields", tc.bytes)
		}
		if got := transport.CoreYields(s); got != tc.core {
			t.Errorf("%d bytes: schedule context gives the core away: %v, want %v", tc.bytes, got, tc.core)
		}
		if dl, _ := s.Deadline(); !dl.Equal(o.deadline) {
			t.Errorf("%d bytes: schedule context deadline %v, want the shared one %v", tc.bytes, dl, o.deadline)
		}
	}
	own, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := o.schedule(o.get(own, time.Minute, time.Now()), 8); got != own {
		t.Error("a caller's own context was replaced")
	}
}
