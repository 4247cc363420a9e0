package comm

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCloseDropsWorkspace checks that Close frees the staging buffers of a
// communicator's operations at once: a closed communicator may stay
// referenced (by an application's handle, or by a stopped timer of the
// runtime until the time it was set for), and must not pin them.
func TestCloseDropsWorkspace(t *testing.T) {
	comms, err := NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 1 << 18 // 2 MiB of float64, past the direct path
	var wg sync.WaitGroup
	errs := make([]error, len(comms))
	for r, c := range comms {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(r + i)
		}
		wg.Go(func() {
			if errs[r] = c.AllReduce(ctx, Slice(x), Slice(x), Sum); errs[r] != nil {
				return
			}
			for i, v := range x {
				if want := float64(1 + 2*i); v != want {
					errs[r] = fmt.Errorf("element %d: %v, want %v", i, v, want)
					return
				}
			}
		})
	}
	wg.Wait()
	for r, c := range comms {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if c.worker.ws.Bytes() == 0 {
			t.Fatalf("rank %d: a 2 MiB AllReduce staged nothing in the workspace", r)
		}
	}
	for r, c := range comms {
		if err := c.Close(); err != nil {
			t.Fatalf("rank %d: Close: %v", r, err)
		}
		if got := c.worker.ws.Bytes(); got != 0 {
			t.Errorf("rank %d: the closed communicator still holds %d bytes of staging buffers", r, got)
		}
	}
}
