package comm_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// TestHugeTimeout: a timeout of hundreds of years (the largest
// time.Duration) means none, and an operation whose peer arrives late
// waits for it instead of timing out at once, as it did when the deadline
// overflowed.
func TestHugeTimeout(t *testing.T) {
	comms, err := comm.NewLocal(2, comm.WithTimeout(time.Duration(math.MaxInt64)))
	if err != nil {
		t.Fatal(err)
	}
	defer comms[1].Close()
	defer comms[0].Close()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == 1 {
				time.Sleep(100 * time.Millisecond)
			}
			x := []float32{float32(r + 1)}
			// Both paths: a small blocking call runs without a request,
			// an asynchronous one through the queue.
			if errs[r] = comm.AllReduce(context.Background(), c, x, x, comm.Sum); errs[r] == nil && x[0] != 3 {
				t.Errorf("rank %d: AllReduce gave %v, want 3", r, x[0])
			}
			if errs[r] == nil {
				if r == 0 {
					time.Sleep(100 * time.Millisecond)
				}
				errs[r] = c.BarrierAsync(context.Background()).Wait(context.Background())
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
