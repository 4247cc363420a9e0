//go:build linux && cgo

package main

import (
	"context"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/internal/commtest"
)

// TestBlockingCallAllocatesNothing: a blocking call through the C ABI's
// entry point (enqueue, which every exported operation calls) allocates
// nothing once warm: the call and its operation stay on the stack, and the
// Go API's blocking form recycles its request. The buffer is mapped outside
// the Go heap, as a C caller's is.
func TestBlockingCallAllocatesNothing(t *testing.T) {
	comms := commtest.Local(t, 1)
	h := commHandle(t, comms[0])
	buf := cPage(t)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	a := args{send: p, recv: p, count: 16, dtype: 7, op: 0, comm: h} // occlFloat32, occlSum
	if comm.DType(uint8(a.dtype)) != comm.Float32 {
		t.Fatalf("data type %d is not float32", uint8(a.dtype))
	}
	// AllToAllv's counts and displacements (size_t, one rank) after the
	// data, and its receive buffer apart from its send buffer.
	// (size_t is 64 bits on the platforms cgo builds occl for.)
	counts := [4]uintptr{}
	for i, v := range []uint64{16, 0, 16, 0} {
		counts[i] = p + 2048 + uintptr(i)*8
		*(*uint64)(unsafe.Pointer(&buf[2048+i*8])) = v
	}
	av := a
	av.recv, av.counts = p+1024, counts
	for _, tc := range []struct {
		name string
		op   *operation
		a    args
	}{{"occlAllReduce", &allReduce, a}, {"occlBroadcast", &broadcast, a}, {"occlAllGather", &allGather, a}, {"occlAllToAll", &allToAll, a}, {"occlAllToAllv", &allToAllv, av}, {"occlBarrier", &barrier, a}} {
		var res int
		allocs := testing.AllocsPerRun(200, func() {
			if r := enqueue(tc.name, blocking, tc.op, tc.a); r != resSuccess {
				res = int(r)
			}
		})
		if res != 0 {
			t.Fatalf("%s: result %d", tc.name, res)
		}
		if allocs != 0 && !raceEnabled { // the detector's sync.Pool drops a share of what it is given
			t.Errorf("%s: %.1f allocations per blocking call, want 0", tc.name, allocs)
		}
		// The Async form and occlWait: the request and its handle's entry
		// are given back when the handle is released.
		req := *blocking // a request handle, of the C type
		name := tc.name + "Async"
		allocs = testing.AllocsPerRun(200, func() {
			if r := enqueue(name, &req, tc.op, tc.a); r != resSuccess {
				res = int(r)
				return
			}
			if r := occlWait(req); r != resSuccess {
				res = int(r)
			}
		})
		if res != 0 {
			t.Fatalf("%s, occlWait: result %d", name, res)
		}
		if allocs != 0 && !raceEnabled {
			t.Errorf("%s, occlWait: %.1f allocations per call, want 0", name, allocs)
		}
	}
}

// TestRequestWaitedTwiceAtOnce: two occlWait calls on one handle at once
// (which occl.h does not allow) both return, one with the result and the
// other with it too or with an invalid-handle error, and the request is
// given back only after both (under the race detector, a request given
// back while the other wait still reads it is a reported race).
func TestRequestWaitedTwiceAtOnce(t *testing.T) {
	comms := commtest.Local(t, 2)
	buf := cPage(t)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	a := args{send: p, recv: p + 1024, count: 16, dtype: 7, op: 0, comm: commHandle(t, comms[0])} // occlFloat32, occlSum
	x := unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), 16)
	y := unsafe.Slice((*float32)(unsafe.Pointer(&buf[1024])), 16)
	ctx := context.Background()
	other := make([]float32, 16)
	for i := range 200 {
		for j := range x {
			x[j], y[j], other[j] = float32(i+j), -1, 1
		}
		req := *blocking
		if r := enqueue("occlAllReduceAsync", &req, &allReduce, a); r != resSuccess {
			t.Fatalf("call %d: issue: result %d", i, r)
		}
		results := make(chan int, 2)
		var started sync.WaitGroup
		for range 2 {
			started.Add(1)
			go func() {
				started.Done()
				results <- int(occlWait(req))
			}()
		}
		// Both waits look the handle up before the operation can
		// complete: rank 1 joins only now.
		started.Wait()
		time.Sleep(200 * time.Microsecond)
		if err := comm.AllReduce(ctx, comms[1], other, other, comm.Sum); err != nil {
			t.Fatal(err)
		}
		r1, r2 := <-results, <-results
		if r1 != int(resSuccess) && r2 != int(resSuccess) || r1 != int(resSuccess) && r1 != int(resInvalidArgument) || r2 != int(resSuccess) && r2 != int(resInvalidArgument) {
			t.Fatalf("call %d: the two waits returned %d and %d, want success and success or an invalid handle", i, r1, r2)
		}
		for j := range y {
			if want := float32(i + j + 1); y[j] != want {
				t.Fatalf("call %d: element %d is %v, want %v", i, j, y[j], want)
			}
		}
	}
}

// commHandle registers c with the C API for the test's length and returns
// its handle as a C caller passes it.
func commHandle(t *testing.T, c *comm.Communicator) uintptr {
	t.Helper()
	ce, h := addComm(c)
	if ce == nil {
		t.Fatal("no handle for the communicator")
	}
	t.Cleanup(func() { removeComm(ce) })
	return handle(h)
}

// cPage returns a page mapped outside the Go heap, as a C caller's buffer
// is, unmapped when the test ends.
func cPage(t *testing.T) []byte {
	t.Helper()
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(buf) })
	return buf
}
