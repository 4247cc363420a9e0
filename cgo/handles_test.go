//go:build linux && cgo

package main

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"github.com/occl/occl/internal/commtest"
)

// TestCommunicatorHandlesNeverReused: a communicator handle is never given
// twice. Once the last id of the communicators' half of the handle range
// is given, no more are: not an id from the start of the range again, nor
// the last one once its communicator is gone; creating a communicator then
// fails with occlSystemError and "no handles left", and the communicator
// it would have had is aborted (its creation ran first).
func TestCommunicatorHandlesNeverReused(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where the aborted communicator's flight record goes
	comms := commtest.Local(t, 1)
	ce, h := addComm(comms[0])
	if ce == nil {
		t.Fatal("no handle for the communicator")
	}
	t.Cleanup(func() { removeComm(ce) })
	base, reqs, last := idHalves()
	if base == 0 {
		t.Skip("the handle range could not be reserved")
	}
	if id := handleID(handle(h)); id <= reqs || id > last {
		t.Fatalf("communicator id %d outside the communicators' half (%d, %d]", id, reqs, last)
	}
	// Skip to the end of the range, and back when the test is done.
	table.Lock()
	saved := table.lastComm
	table.lastComm = last - 1
	table.Unlock()
	t.Cleanup(func() {
		table.Lock()
		table.lastComm = saved
		table.Unlock()
	})

	end, eh := addComm(nil)
	if end == nil || handleID(handle(eh)) != last {
		t.Fatalf("the last id, %d, was not given", last)
	}
	removeComm(end)
	if more, mh := addComm(nil); more != nil {
		removeComm(more)
		t.Fatalf("id %d given after the last one, %d", handleID(handle(mh)), last)
	}
	newcomm := h // the C type
	if r := occlCommSplit(h, 0, 0, &newcomm); r != resSystemError || newcomm != nil {
		t.Fatalf("occlCommSplit with no handles left: result %d, handle %p; want occlSystemError (%d) and NULL", r, newcomm, resSystemError)
	}
	if msg := goString(unsafe.Pointer(occlGetLastError(h))); !strings.Contains(msg, "occlCommSplit: no handles left: all ") ||
		!strings.Contains(msg, "communicator handles have been given") {
		t.Fatalf("occlCommSplit with no handles left: message %q", msg)
	}
}

// TestRequestHandlesGoRound: requests take the ids of the lower half of the
// handle range in turn and start again at its beginning after its end,
// skipping the ids of requests still in use; they never take a
// communicator's.
func TestRequestHandlesGoRound(t *testing.T) {
	comms := commtest.Local(t, 1)
	h := commHandle(t, comms[0])
	buf := cPage(t)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	a := args{send: p, recv: p, count: 16, dtype: 7, op: 0, comm: h} // occlFloat32, occlSum
	base, reqs, _ := idHalves()
	if base == 0 {
		t.Skip("the handle range could not be reserved")
	}
	// restart makes the next request id the half's last, and the test
	// puts the counter back when it is done.
	table.Lock()
	saved := table.lastReq
	table.Unlock()
	restart := func() {
		table.Lock()
		table.lastReq = reqs - 1
		table.Unlock()
	}
	t.Cleanup(func() {
		table.Lock()
		table.lastReq = saved
		table.Unlock()
	})
	// free returns the first id from 1 no live request has.
	free := func(from uint64) uint64 {
		table.RLock()
		defer table.RUnlock()
		for table.reqs[from] != nil {
			from++
		}
		return from
	}

	restart()
	var held []uint64 // ids of the requests not waited for yet
	for _, step := range []struct {
		name    string
		restart bool   // the next id is the half's last (in use after the first step)
		want    uint64 // 0: the first free id from 1
	}{
		{"the last id", false, reqs},
		{"after the last", false, 0},
		{"the last in use", true, 0},
	} {
		if step.restart {
			restart()
		}
		want := step.want
		if want == 0 {
			want = free(1)
		}
		req := *blocking // a request handle, of the C type
		if r := enqueue("occlAllReduceAsync", &req, &allReduce, a); r != resSuccess {
			t.Fatalf("%s: result %d", step.name, r)
		}
		id := handleID(handle(req))
		if id != want {
			t.Errorf("%s: request id %d, want %d", step.name, id, want)
		}
		if lookupComm(handle(req)) != nil || id > reqs {
			t.Errorf("%s: request id %d is a communicator's", step.name, id)
		}
		held = append(held, id)
		defer occlWait(req)
	}
	if held[1] == held[2] {
		t.Errorf("two requests in use have id %d", held[1])
	}
}

// goString copies the NUL-terminated C string at p (at most
// OCCL_LAST_ERROR_BYTES, occlGetLastError's longest).
func goString(p unsafe.Pointer) string {
	b := unsafe.Slice((*byte)(p), 1024)
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
