package comm_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// TestCloseWhileIssuing closes a communicator while other goroutines keep
// issuing calls on it, valid and invalid, blocking and asynchronous, with
// operations still queued: every call must end with its result,
// ErrClosed or (the invalid ones) ErrInvalidArgument, and the process
// must not crash (counting the calls issued during Close's wait for the
// ones before it once misused a sync.WaitGroup, a panic).
func TestCloseWhileIssuing(t *testing.T) {
	ctx := context.Background()
	for range 40 {
		comms, err := comm.NewLocal(1)
		if err != nil {
			t.Fatal(err)
		}
		c := comms[0]
		good, bad := comm.Slice(make([]float32, 4)), comm.Slice(make([]float32, 3))
		var queued []*comm.Request
		for range 16 {
			queued = append(queued, c.AllReduceAsync(ctx, good, good, comm.Sum))
		}
		stop := make(chan struct{})
		errs := make(chan error, 1024)
		var wg sync.WaitGroup
		issue := []func() error{
			func() error { return c.AllReduceAsync(ctx, bad, good, comm.Sum).Wait(ctx) },
			func() error { return c.AllReduceAsync(ctx, good, good, comm.Sum).Wait(ctx) },
			func() error { return c.AllReduce(ctx, good, good, comm.Sum) },
			func() error { return c.Barrier(ctx) },
		}
		for _, fn := range issue {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := fn(); err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				}
			}()
		}
		time.Sleep(200 * time.Microsecond)
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			if !errors.Is(err, comm.ErrClosed) && !errors.Is(err, comm.ErrInvalidArgument) {
				t.Fatalf("a call issued during Close: %v, want ErrClosed or ErrInvalidArgument", err)
			}
		}
		for i, r := range queued {
			if err := r.Wait(ctx); err != nil && !errors.Is(err, comm.ErrClosed) {
				t.Fatalf("operation %d queued before Close: %v", i, err)
			}
		}
	}
}

// TestSecondCloseHonorsContext calls Destroy while a first Close waits for
// an operation that cannot finish (its peer never joins): the second call
// must return when its own context ends, with an error that says so, not
// when the first Close gives up.
func TestSecondCloseHonorsContext(t *testing.T) {
	comms, err := comm.NewLocal(2, comm.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	comms[0].BarrierAsync(context.Background()) // rank 1 never joins
	first := make(chan error, 1)
	go func() { first <- comms[0].Close() }()
	time.Sleep(50 * time.Millisecond) // the first Close is waiting for the Barrier
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = comms[0].Destroy(ctx)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Destroy with a 100ms context returned after %v", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Destroy during another Close: %v, want context.DeadlineExceeded", err)
	}
	comms[0].Abort() // fails the Barrier, which ends the first Close's wait
	select {
	case <-first:
	case <-time.After(2 * time.Second):
		t.Fatalf("the first Close still waiting 2s after Abort")
	}
	// Once the first has finished, another Close is harmless.
	if err := comms[0].Close(); err != nil {
		t.Errorf("Close after Close: %v", err)
	}
}

// TestCallsAfterAbort checks that a call on the rank that aborted is
// refused as on the other ranks: errors.Is finds ErrAborted (and
// ErrClosed: the communicator is closed on this rank).
func TestCallsAfterAbort(t *testing.T) {
	comms, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	comms[0].Abort()
	ctx := context.Background()
	x := comm.Slice(make([]float32, 4))
	for name, call := range map[string]func() error{
		"Barrier":        func() error { return comms[0].Barrier(ctx) },
		"AllReduce":      func() error { return comms[0].AllReduce(ctx, x, x, comm.Sum) },
		"AllReduceAsync": func() error { return comms[0].AllReduceAsync(ctx, x, x, comm.Sum).Wait(ctx) },
	} {
		err := call()
		if !errors.Is(err, comm.ErrAborted) || !errors.Is(err, comm.ErrClosed) {
			t.Errorf("%s after Abort: %v, want ErrAborted and ErrClosed", name, err)
		}
	}
	// Closing an aborted communicator is harmless.
	if err := comms[0].Close(); err != nil {
		t.Errorf("Close after Abort: %v", err)
	}
}
