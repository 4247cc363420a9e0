//go:build linux && cgo

package main

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/comm"
)

// TestBlockingCallAllocatesNothing: a blocking call through the C ABI's
// entry point (enqueue, which every exported operation calls) allocates
// nothing once warm: the call and its operation stay on the stack, and the
// Go API's blocking form recycles its request. The buffer is mapped outside
// the Go heap, as a C caller's is.
func TestBlockingCallAllocatesNothing(t *testing.T) {
	comms, err := comm.NewLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	defer c.Close()
	ce, h := addComm(c)
	if ce == nil {
		t.Fatal("no handle for the communicator")
	}
	defer removeComm(ce)
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	a := args{send: p, recv: p, count: 16, dtype: 7, op: 0, comm: handle(h)} // occlFloat32, occlSum
	if comm.DType(uint8(a.dtype)) != comm.Float32 {
		t.Fatalf("data type %d is not float32", uint8(a.dtype))
	}
	for _, tc := range []struct {
		name string
		op   *operation
	}{{"occlAllReduce", &allReduce}, {"occlBroadcast", &broadcast}, {"occlAllGather", &allGather}, {"occlAllToAll", &allToAll}, {"occlBarrier", &barrier}} {
		var res int
		allocs := testing.AllocsPerRun(200, func() {
			if r := enqueue(tc.name, blocking, tc.op, a); r != resSuccess {
				res = int(r)
			}
		})
		if res != 0 {
			t.Fatalf("%s: result %d", tc.name, res)
		}
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per blocking call, want 0", tc.name, allocs)
		}
	}
}
