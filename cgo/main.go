// Command cgo is occl's C ABI: built with
//
//	go build -buildmode=c-shared -o build/liboccl.so ./cgo
//
// it is the shared library liboccl.so (and, next to it, liboccl.h, the
// header cgo generates). Programs include the hand-written, documented
// public header cgo/include/occl.h and link with -loccl. liboccl.h includes
// cgo/include/occl_cgo.h (which includes occl.h) and declares the same
// functions with the same types: a test compiles a file against both, and
// links a reference to every function occl.h declares.
// The API is NCCL's with occl names and without CUDA streams: occlGetUniqueId,
// occlCommInitRank, occlAllReduce, occlGroupStart, occlCommAbort, ...
//
// # Handles, memory and the cgo pointer rules
//
// The cgo rules (https://pkg.go.dev/cmd/cgo#hdr-Passing_pointers) forbid C
// to keep a Go pointer after the call that passed it returns, and they let Go
// keep pointers to C memory: the Go garbage collector neither scans nor moves
// C memory and never frees it. This library follows them:
//
//   - Nothing Go allocates is handed to C beyond a call. Communicators and
//     requests are handles: addresses in a range of address space reserved
//     with PROT_NONE by internal.c, base + 8*id, looked up in Go tables by
//     id. They are never dereferenced, are not Go pointers (the range is not
//     the Go heap) and are not reused (a communicator's never, a
//     request's only after the others of its range, see table), so a
//     destroyed or made-up handle is reported as occlInvalidArgument, never
//     used.
//   - Strings returned to C live in C memory: static strings of internal.c,
//     and the calling thread's error buffer (allocated by internal.c, one
//     per thread, behind a pthread key) into which
//     messages are copied.
//   - C buffers are used in place. A blocking call wraps them with
//     unsafe.Slice for the duration of the call and returns when the
//     operation is done with them. A non-blocking call gives the same slices
//     to the operation, which uses them after the call has returned: that is
//     allowed (Go may hold pointers to C memory), and the memory stays valid
//     because the caller keeps it allocated and untouched until occlWait or
//     occlTest reports completion — the contract NCCL states for buffers of
//     operations enqueued on a stream, documented in occl.h.
//     runtime.Pinner does not apply: it pins Go memory, and C memory never
//     moves. Count and displacement arrays are copied during the call.
//
// # Errors
//
// Every exported function recovers from panics (occlInternalError), checks
// its arguments before touching them (null pointers, unknown data types and
// reductions, counts that are negative when read as signed or whose byte size
// overflows, unknown or destroyed communicators: occlInvalidArgument) and
// records the message of every failure for occlGetLastError, both for the
// calling thread and for the communicator. Blocking calls run with a context
// without deadline, so the communicator's timeout (OCCL_TIMEOUT) bounds them.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/include -O2 -Wall
#include "occl_cgo.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/transport/rdma"
)

// main is required by -buildmode=c-shared and never runs.
func main() {}

// Every buffer the library is given is C memory, which can be freed and
// its address reused while a registration of it would be cached.
func init() { rdma.SetForeignBuffers(true) }

// Library version, the value of OCCL_VERSION_CODE in occl.h.
const (
	versionMajor = 0
	versionMinor = 1
	versionPatch = 0
	versionCode  = versionMajor*10000 + versionMinor*100 + versionPatch
)

// Result codes, as in occl.h.
const (
	resSuccess         = C.occlSuccess
	resSystemError     = C.occlSystemError
	resInternalError   = C.occlInternalError
	resInvalidArgument = C.occlInvalidArgument
	resInvalidUsage    = C.occlInvalidUsage
	resRemoteError     = C.occlRemoteError
	resInProgress      = C.occlInProgress
	resTimeout         = C.occlTimeout
)

// commEntry is one communicator known to the C API.
type commEntry struct {
	id uint64
	// c is nil while the communicator is being created in an open group.
	c atomic.Pointer[comm.Communicator]

	mu      sync.Mutex
	lastErr string            // message of the last failed call on it
	tag     string            // traffic tag of its all-to-alls
	kept    map[string][]byte // traffic JSON kept for a retry with a larger buffer
}

// reqEntry is one request known to the C API: the operation it stands for
// (one comm.Request) and the communicator it runs on.
//
// users counts the calls using the entry (lookupRequest adds one, unuse
// takes it back); released is set when the handle is released. The last
// use of a released entry whose operation completed gives the request back
// (comm.Request.Release), so that an Async call allocates no request: not
// before, since a call from another thread with the same handle (two
// occlWait at once, which occl.h does not allow but survives) may still
// be using it.
type reqEntry struct {
	id       uint64
	name     string
	ce       *commEntry
	req      *comm.Request
	users    atomic.Int32
	released atomic.Bool
	done     atomic.Bool // its completion was seen (Wait returned, or Test reported it)
}

// reqEntries recycles request entries.
var reqEntries = sync.Pool{New: func() any { return new(reqEntry) }}

// unuse ends a call's use of re (see reqEntry).
func (re *reqEntry) unuse() {
	if re.users.Add(-1) != 0 || !re.released.Load() {
		return
	}
	if re.done.Load() {
		re.req.Release()
	}
	*re = reqEntry{}
	reqEntries.Put(re)
}

// table maps handle ids to communicators and requests. The ids of the
// handle range (see handles), 1 to n, are split in two halves, so that a
// request never has the handle of a communicator, even a destroyed one:
//
//   - Requests take the lower half, 1 to n/2, in turn, skipping those in
//     use, and start again at 1 after n/2: a program can make close to a
//     million a second (one thread calling occlAllReduceAsync and occlWait
//     made 700,000 a second on 2 shared cores, 2^33 in 3.3 hours), so a
//     long job would use up any range. An id comes back only after a
//     whole round of the half since it was last given.
//   - Communicators take the upper half, n/2+1 to n, in turn, and an id is
//     never given twice: once they are used up (2^32 of them with the
//     whole range, 2^16 with the least), no communicator can be created.
//
// occl.h states both.
var table = struct {
	sync.RWMutex
	lastReq  uint64 // the last request id given, 0 before the first
	lastComm uint64 // the last communicator id given, 0 before the first
	comms    map[uint64]*commEntry
	reqs     map[uint64]*reqEntry
}{comms: map[uint64]*commEntry{}, reqs: map[uint64]*reqEntry{}}

// idHalves returns the handle range's base address, the last id of
// requests (n/2) and the last id of communicators (n); 0, 0, 0 if the
// range could not be reserved.
func idHalves() (base uintptr, reqs, comms uint64) {
	base, n := handles()
	if base == 0 || n < 2 {
		return 0, 0, 0
	}
	return base, n / 2, n
}

// newReqID returns an unused request id and its handle, or 0 if there is
// none (the handle range could not be reserved, or every id of requests is
// in use). Called with table locked. The handle is computed here, as
// internal.c does (base + 8*id), from the range read once: two calls into C
// per Async call cost more than the rest of the table's work.
func newReqID() (uint64, unsafe.Pointer) {
	base, last, _ := idHalves()
	for tries := uint64(0); tries < last; tries++ {
		table.lastReq++
		if table.lastReq > last {
			table.lastReq = 1
		}
		id := table.lastReq
		if table.reqs[id] == nil {
			return id, pointer(base + 8*uintptr(id))
		}
	}
	return 0, nil
}

// newCommID returns a communicator id never given before and its handle,
// or 0 if there is none (the handle range could not be reserved, or every
// id of communicators has been given). Called with table locked.
func newCommID() (uint64, unsafe.Pointer) {
	base, first, last := idHalves()
	if base == 0 || table.lastComm >= last {
		return 0, nil
	}
	table.lastComm = max(table.lastComm, first) + 1
	return table.lastComm, pointer(base + 8*uintptr(table.lastComm))
}

// noHandles is the message of a call that got no handle for a
// communicator (from addComm) or a request (from addRequest).
func noHandles(forComm bool) string {
	base, reqs, comms := idHalves()
	switch {
	case base == 0:
		return "no handles left: their address range could not be reserved (is the address space limited?)"
	case forComm:
		return fmt.Sprintf("no handles left: all %d communicator handles have been given (none is given twice)", comms-reqs)
	}
	return fmt.Sprintf("no handles left: all %d request handles are in use", reqs)
}

// addComm registers a communicator (nil: being created) and returns its
// entry and handle.
func addComm(c *comm.Communicator) (*commEntry, C.occlComm_t) {
	table.Lock()
	defer table.Unlock()
	id, h := newCommID()
	if id == 0 {
		return nil, nil
	}
	ce := &commEntry{id: id}
	if c != nil {
		ce.c.Store(c)
	}
	table.comms[id] = ce
	return ce, C.occlComm_t(h)
}

// handle turns a handle into an integer. Every exported function does it
// first, so that no pointer-typed variable keeps a made-up handle: the Go
// runtime may throw on a pointer-typed stack slot holding a small integer
// (say (occlComm_t)1) when it copies the stack.
func handle[P C.occlComm_t | C.occlRequest_t](p P) uintptr {
	return uintptr(unsafe.Pointer(p))
}

// handles is the range handles live in: its base address and how many ids
// it holds (see internal.c). Every call looks a handle up, so the range is
// read from C once and the lookup is Go's.
var handles = sync.OnceValues(func() (base uintptr, n uint64) {
	return uintptr(C.occlInternalHandleBase()), uint64(C.occlInternalHandleCap())
})

// handleID returns the id of a handle (0 if it is not one).
func handleID(h uintptr) uint64 {
	base, n := handles()
	if base == 0 || h <= base || (h-base)%8 != 0 {
		return 0
	}
	if id := uint64(h-base) / 8; id <= n {
		return id
	}
	return 0
}

// pointer turns an address the checks found plausible into a pointer. The
// memory is C's, which Go neither scans nor moves; the bits are
// reinterpreted, not converted, since a conversion from uintptr is only
// valid for memory Go knows about.
func pointer(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// lookupComm returns the entry of a communicator handle, nil if it is not
// a live one.
func lookupComm(h uintptr) *commEntry {
	id := handleID(h)
	if id == 0 {
		return nil
	}
	table.RLock()
	defer table.RUnlock()
	return table.comms[id]
}

// removeComm forgets a communicator; its handle is invalid from now on.
func removeComm(ce *commEntry) {
	table.Lock()
	delete(table.comms, ce.id)
	table.Unlock()
}

// addRequest registers a request and returns its handle.
func addRequest(name string, ce *commEntry, r *comm.Request) C.occlRequest_t {
	table.Lock()
	defer table.Unlock()
	id, h := newReqID()
	if id == 0 {
		return nil
	}
	re := reqEntries.Get().(*reqEntry)
	re.id, re.name, re.ce, re.req = id, name, ce, r
	table.reqs[id] = re
	return C.occlRequest_t(h)
}

// call is the context of one C API call: its name, its communicator if
// any, and the first failure recorded (the argument checks of coll.go do
// nothing once one has failed).
type call struct {
	name string
	ce   *commEntry
	r    C.occlResult_t
}

// begin starts an API call; the caller defers k.end(&res) right after,
// res being the function's named result. It passes the calling goroutine
// through the Go scheduler now and then (see schedPass).
func begin(name string) *call {
	passes.maybe()
	return &call{name: name}
}

// end turns a panic of the call into occlInternalError in *res. It is
// deferred directly, so that recover applies.
func (k *call) end(res *C.occlResult_t) {
	if r := recover(); r != nil {
		fmt.Fprintf(os.Stderr, "occl: %s: internal error: %v\n%s", k.name, r, debug.Stack())
		*res = k.fail(resInternalError, "internal error: %v", r)
	}
}

// fail records a failure of the call and returns its code.
func (k *call) fail(code C.occlResult_t, format string, args ...any) C.occlResult_t {
	k.record(k.name + ": " + fmt.Sprintf(format, args...))
	if k.r == resSuccess {
		k.r = code
	}
	return code
}

// failErr records err as the failure of the call and returns its code
// (occlSuccess for nil).
func (k *call) failErr(err error) C.occlResult_t {
	if err == nil {
		return resSuccess
	}
	k.record(k.name + ": " + err.Error())
	return resultOf(err)
}

// record stores msg as the calling thread's and the communicator's last
// error.
func (k *call) record(msg string) {
	setThreadError(msg)
	if k.ce != nil {
		k.ce.mu.Lock()
		k.ce.lastErr = msg
		k.ce.mu.Unlock()
	}
}

// setThreadError copies msg into the calling thread's error buffer. Passing
// the string's bytes is allowed: they hold no Go pointers and C copies them
// before returning.
func setThreadError(msg string) {
	if msg == "" {
		return
	}
	C.occlInternalSetThreadError((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

// comm resolves a communicator handle for the call: occlInvalidArgument if
// it is null, unknown or destroyed, occlInvalidUsage if it is still being
// created in an open group.
func (k *call) comm(h uintptr) (*commEntry, *comm.Communicator, C.occlResult_t) {
	if h == 0 {
		return nil, nil, k.fail(resInvalidArgument, "communicator is NULL")
	}
	ce := lookupComm(h)
	if ce == nil {
		return nil, nil, k.fail(resInvalidArgument, "communicator %#x is not a communicator (never created, or destroyed)", h)
	}
	k.ce = ce
	c := ce.c.Load()
	if c == nil {
		return nil, nil, k.fail(resInvalidUsage, "communicator is being created in this thread's open group; use it after occlGroupEnd")
	}
	return ce, c, resSuccess
}

// parent resolves the communicator a new one is made from (Split, Shrink,
// Grow) after checking and clearing the new handle's destination.
func (k *call) parent(h uintptr, newcomm *C.occlComm_t) (*comm.Communicator, C.occlResult_t) {
	if newcomm == nil {
		return nil, k.fail(resInvalidArgument, "newcomm is NULL")
	}
	*newcomm = nil
	_, c, r := k.comm(h)
	return c, r
}

// resultOf maps an error of package comm (or reconfig) to a result code.
func resultOf(err error) C.occlResult_t {
	switch {
	case err == nil:
		return resSuccess
	case errors.Is(err, comm.ErrRewire), errors.Is(err, comm.ErrGrow):
		return resSystemError
	case errors.Is(err, comm.ErrExcluded):
		return resRemoteError
	case errors.Is(err, errors.ErrUnsupported):
		return resInvalidUsage
	case errors.Is(err, comm.ErrInvalidArgument):
		return resInvalidArgument
	case errors.Is(err, comm.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return resTimeout
	case errors.Is(err, comm.ErrClosed), errors.Is(err, comm.ErrMismatch):
		return resInvalidUsage
	case errors.Is(err, comm.ErrAborted), errors.Is(err, comm.ErrPeerFailed):
		return resRemoteError
	}
	return resSystemError
}
