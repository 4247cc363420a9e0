package comm_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/occl/occl/comm"
)

// TestControlTCPAbort runs the TCP control plane in one process: a rank
// that aborts is named, with ErrAborted, by every other rank, whose
// pending collective the verdict ends.
func TestControlTCPAbort(t *testing.T) {
	const size = 3
	id, err := comm.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := make([]*comm.Communicator, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = comm.Init(ctx, id, r, size)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer comms[r].Close()
	}
	for r := range size - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = comms[r].Barrier(ctx)
		}()
	}
	comms[size-1].Abort()
	wg.Wait()
	for r := range size - 1 {
		var pe *comm.PeerError
		if !errors.As(errs[r], &pe) || !errors.Is(errs[r], comm.ErrAborted) || pe.Peer != size-1 || pe.Reporter != size-1 {
			t.Errorf("rank %d: %v, want rank %d's abort", r, errs[r], size-1)
		}
		if err := comms[r].Err(); !errors.Is(err, comm.ErrAborted) {
			t.Errorf("rank %d: communicator error %v after the verdict", r, err)
		}
	}
}
