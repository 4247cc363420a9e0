package comm

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"
)

// TestCloseDropsWorkspace checks that Close frees the staging buffers of a
// communicator's operations at once: a closed communicator may stay
// referenced (by an application's handle) and must not pin them.
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
		if reflect.ValueOf(c.worker.ws).IsZero() {
			t.Fatalf("rank %d: a 2 MiB AllReduce staged nothing in the workspace", r)
		}
	}
	for r, c := range comms {
		if err := c.Close(); err != nil {
			t.Fatalf("rank %d: Close: %v", r, err)
		}
		if !reflect.ValueOf(c.worker.ws).IsZero() {
			t.Errorf("rank %d: the closed communicator still holds its workspace", r)
		}
	}
}

// TestClosedIsCollected checks that nothing of a communicator's own keeps
// it reachable once it is closed: its watchdog's timer, stopped at Close,
// refers to it weakly. With a strong reference, the runtime's heap of
// timers, where a stopped timer's entry can stay until the time it was
// set for when the heap holds many others, kept one of the two
// communicators reachable past the 50 collections (half a second) allowed
// here in every one of 6 runs, and for a second or more.
func TestClosedIsCollected(t *testing.T) {
	comms, err := NewLocal(2, WithStallTimeout(time.Minute), WithHeartbeat(time.Minute, 2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(comms))
	fillers := make([][]*time.Timer, len(comms))
	for r, c := range comms {
		wg.Go(func() {
			// Other timers, as a job has (deadlines, heartbeats),
			// started where the watchdog's is (the running processor's
			// heap): among few, a stopped timer's entry goes at once.
			for range 1024 {
				fillers[r] = append(fillers[r], time.AfterFunc(time.Hour, func() {}))
			}
			errs[r] = c.Barrier(ctx) // arms the watchdog
		})
	}
	wg.Wait()
	defer func() {
		for _, f := range fillers {
			for _, t := range f {
				t.Stop()
			}
		}
	}()
	var refs []weak.Pointer[Communicator]
	for r, c := range comms {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if !c.watch.armed.Load() {
			t.Fatalf("rank %d: the watchdog is not running", r)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("rank %d: Close: %v", r, err)
		}
		refs = append(refs, weak.Make(c))
	}
	comms = nil
	for i := 0; ; i++ {
		runtime.GC()
		live := 0
		for _, p := range refs {
			if p.Value() != nil {
				live++
			}
		}
		if live == 0 {
			return
		}
		if i == 50 {
			t.Fatalf("%d of %d closed communicators still reachable after %d collections", live, len(refs), i+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
