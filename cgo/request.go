package main

// #include "occl_cgo.h"
import "C"

import "context"

// This file: waiting for, testing and releasing requests.

// lookupRequest returns the entry of a request handle, nil if it is not a
// live one.
func lookupRequest(h uintptr) *reqEntry {
	id := handleID(h)
	if id == 0 {
		return nil
	}
	table.RLock()
	defer table.RUnlock()
	re := table.reqs[id]
	if re != nil {
		re.users.Add(1) // under the lock: release cannot come between
	}
	return re
}

// release forgets a request; it reports false if it was already released.
// The caller still uses re until it calls unuse.
func release(re *reqEntry) bool {
	table.Lock()
	defer table.Unlock()
	if table.reqs[re.id] != re {
		return false
	}
	delete(table.reqs, re.id)
	re.released.Store(true)
	return true
}

// request resolves a request handle for the call.
func (k *call) request(h uintptr) (*reqEntry, C.occlResult_t) {
	if h == 0 {
		return nil, k.fail(resInvalidArgument, "request is NULL")
	}
	re := lookupRequest(h)
	if re == nil {
		return nil, k.fail(resInvalidArgument, "request %#x is not a request (never issued, or already released by occlWait, occlTest or occlRequestFree)", h)
	}
	k.ce = re.ce
	return re, resSuccess
}

// result is the outcome of a completed request, recorded under its
// operation's name.
func (k *call) result(re *reqEntry, err error) C.occlResult_t {
	if err == nil {
		return resSuccess
	}
	k.name = k.name + ": " + re.name
	return k.failErr(err)
}

// occlWait waits for a request, releases it and returns the operation's result. See occl.h.
//
//export occlWait
func occlWait(request C.occlRequest_t) (res C.occlResult_t) {
	requestH := handle(request) // first: see handle
	k := begin("occlWait")
	defer k.end(&res)
	return k.release(requestH, true)
}

// release releases the request h (NULL: nothing to do), once it has
// completed if wait is set, and returns its result if it waited.
func (k *call) release(h uintptr, wait bool) C.occlResult_t {
	if h == 0 {
		return resSuccess
	}
	re, r := k.request(h)
	if r != resSuccess {
		return r
	}
	defer re.unuse()
	var err error
	if wait {
		err = re.req.Wait(context.Background())
		re.done.Store(true)
	} else if done, _ := re.req.Test(); done {
		re.done.Store(true)
	}
	release(re)
	return k.result(re, err)
}

// occlTest reports whether a request has completed, releasing it if so. See occl.h.
//
//export occlTest
func occlTest(request C.occlRequest_t, done *C.int) (res C.occlResult_t) {
	requestH := handle(request) // first: see handle
	k := begin("occlTest")
	defer k.end(&res)
	if done == nil {
		return k.fail(resInvalidArgument, "done is NULL")
	}
	*done = 0
	re, r := k.request(requestH)
	if r != resSuccess {
		return r
	}
	defer re.unuse()
	finished, err := re.req.Test()
	if !finished {
		return resSuccess
	}
	re.done.Store(true)
	*done = 1
	release(re)
	return k.result(re, err)
}

// occlRequestFree releases a request without waiting for it. See occl.h.
//
//export occlRequestFree
func occlRequestFree(request C.occlRequest_t) (res C.occlResult_t) {
	requestH := handle(request) // first: see handle
	k := begin("occlRequestFree")
	defer k.end(&res)
	return k.release(requestH, false)
}

// occlRequestOverlap tells the library that the caller computes while the
// request's operation runs. See occl.h.
//
//export occlRequestOverlap
func occlRequestOverlap(request C.occlRequest_t) (res C.occlResult_t) {
	requestH := handle(request) // first: see handle
	k := begin("occlRequestOverlap")
	defer k.end(&res)
	re, r := k.request(requestH)
	if r != resSuccess {
		return r
	}
	defer re.unuse()
	re.req.Overlap()
	return resSuccess
}
