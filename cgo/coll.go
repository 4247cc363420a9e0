package main

// #include "occl_cgo.h"
import "C"

import (
	"context"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/occl/occl/comm"
)

// This file: the operations. Each is described once (its arguments and how
// they are checked, as NCCL's argcheck does), and its two exported forms,
// blocking and Async, differ only in what enqueue does with the prepared
// operation.
//
// The checks record the first failure in the call (call.fail) and do
// nothing once one has failed, so that a prepare function lists its checks
// in order and looks at the outcome once, at the end.

// maxBytes bounds the bytes of one buffer: 2^47 (128 TiB), more than any
// host has, and far from where Go slice lengths or address arithmetic
// overflow.
const maxBytes = 1 << 47

// errInternal is the error of a recovered panic.
func errInternal(r any) error { return fmt.Errorf("internal error: %v", r) }

// failed reports whether a check of the call has failed.
func (k *call) failed() bool { return k.r != resSuccess }

// dtype checks a data type.
func (k *call) dtype(dt C.occlDataType_t) comm.DType {
	d := comm.DType(uint8(dt))
	if !k.failed() && (uint64(dt) >= C.occlNumTypes || !d.Valid()) {
		k.fail(resInvalidArgument, "unknown datatype %d (valid: 0 occlInt8 .. 9 occlBfloat16)", int32(uint32(dt)))
	}
	return d
}

// redop checks a reduction.
func (k *call) redop(op C.occlRedOp_t) comm.Op {
	o := comm.Op(uint8(op))
	if !k.failed() && (uint64(op) >= C.occlNumOps || !o.Valid()) {
		k.fail(resInvalidArgument, "unknown reduction %d (valid: 0 occlSum .. 4 occlAvg)", int32(uint32(op)))
	}
	return o
}

// elems checks a count of elements of dt, times mult (a number of ranks),
// and returns the number of elements.
func (k *call) elems(what string, count C.size_t, mult int, dt comm.DType) int {
	n := uint64(count)
	switch {
	case k.failed():
		return 0
	case int64(n) < 0:
		k.fail(resInvalidArgument, "%s %d is negative (%d as size_t)", what, int64(n), n)
	case n > uint64(maxBytes/dt.Size()/mult) && mult > 1:
		k.fail(resInvalidArgument, "%s %d too large: %d ranks x %d elements of %d bytes overflow the limit of 2^47 bytes", what, n, mult, n, dt.Size())
	case n > uint64(maxBytes/dt.Size()/mult):
		k.fail(resInvalidArgument, "%s %d too large: %d elements of %d bytes overflow the limit of 2^47 bytes", what, n, n, dt.Size())
	default:
		return int(n) * mult
	}
	return 0
}

// minAddress is the lowest address a buffer may have: the first page is
// never mapped, and the Go runtime must not find a smaller value in a
// pointer (it throws when it copies a stack holding one).
const minAddress = 4096

// addr turns a buffer or array pointer into an integer. Exported functions
// do it first, so that a made-up pointer such as (void*)1 is rejected by
// the checks without ever sitting in a pointer-typed Go variable.
func addr[P unsafe.Pointer | C.occlInternalConstBuf | C.occlInternalConstCounts | C.occlInternalConstP2POps | C.occlInternalConstDoubles](p P) uintptr {
	return uintptr(unsafe.Pointer(p))
}

// address checks the address of n bytes at p: not NULL, not in the first
// page, not wrapping around. It returns the call's outcome so far.
func (k *call) address(what string, p, n uintptr) C.occlResult_t {
	switch {
	case k.failed() || validAddress(p, n):
	case p == 0:
		k.fail(resInvalidArgument, "%s is NULL", what)
	case p < minAddress:
		k.fail(resInvalidArgument, "%s %#x is not a valid address", what, p)
	case p > math.MaxUint64-n:
		k.fail(resInvalidArgument, "%s %#x + %d bytes wraps around the address space", what, p, n)
	}
	return k.r
}

// validAddress reports whether n bytes at p pass address's checks.
func validAddress(p, n uintptr) bool { return p >= minAddress && p <= math.MaxUint64-n }

// buffer makes a Buffer over n elements of dt at p, in place, without
// copying. A null p is accepted for 0 elements.
func (k *call) buffer(what string, p uintptr, n int, dt comm.DType) comm.Buffer {
	bytes := uintptr(n) * uintptr(dt.Size())
	if bytes == 0 || k.failed() {
		return comm.Raw(nil, dt)
	}
	// The label is formatted only for a failure: every call checks its
	// buffers, and formatting costs more than the rest of the check.
	if !validAddress(p, bytes) && k.address(fmt.Sprintf("%s (of %d elements)", what, n), p, bytes) != resSuccess {
		return comm.Buffer{}
	}
	return comm.Raw(unsafe.Slice((*byte)(pointer(p)), bytes), dt)
}

// counts copies an array of len(out) size_t counts or displacements into
// out and returns it (nil if the array cannot be read).
func (k *call) counts(what string, p uintptr, out []int, dt comm.DType) []int {
	n := len(out)
	if k.address(what, p, uintptr(n)*unsafe.Sizeof(C.size_t(0))) != resSuccess {
		return nil
	}
	src := unsafe.Slice((*C.size_t)(pointer(p)), n)
	for i, v := range src {
		if n := uint64(v); !k.failed() && n <= uint64(maxBytes/dt.Size()) {
			out[i] = int(n) // what elems checks, without formatting its label
			continue
		}
		out[i] = k.elems(fmt.Sprintf("%s[%d]", what, i), v, 1, dt)
	}
	return out
}

// extent is the number of elements counts/displs address: the largest
// displ + count (0 if every count is 0).
func (k *call) extent(what string, counts, displs []int, dt comm.DType) int {
	n := 0
	for j := range counts {
		if k.failed() {
			return 0
		}
		if counts[j] == 0 {
			continue
		}
		end := counts[j] + displs[j] // both < 2^47
		if end > maxBytes/dt.Size() {
			k.fail(resInvalidArgument, "%s: block %d ends at element %d: more than %d bytes", what, j, end, uint64(maxBytes))
		}
		n = max(n, end)
	}
	return n
}

// rank checks a root or peer of c.
func (k *call) rank(what string, r C.int, c *comm.Communicator) int {
	if !k.failed() && (r < 0 || int(r) >= c.Size()) {
		k.fail(resInvalidArgument, "%s %d out of range [0, %d)", what, int(r), c.Size())
	}
	return int(r)
}

// opCtx is the context of an operation on ce: no deadline (the
// communicator's timeout applies) and ce's traffic tag.
func opCtx(ce *commEntry) context.Context {
	ce.mu.Lock()
	tag := ce.tag
	ce.mu.Unlock()
	if tag == "" {
		return context.Background()
	}
	return comm.WithTrafficTag(context.Background(), tag)
}

// op is the first check of every operation: the communicator, which it
// records in o (nil if the communicator is not usable).
func (k *call) op(o *groupOp, h uintptr) *comm.Communicator {
	ce, c, r := k.comm(h)
	if r != resSuccess {
		return nil
	}
	*o = groupOp{name: k.name, ce: ce, c: c, ctx: opCtx(ce)}
	return c
}

// blocking is the request argument of a blocking call: the blocking form
// of an operation runs the Go API's blocking form (or is recorded in the
// open group).
var blocking = new(C.occlRequest_t)

// enqueue is every operation's entry point. It checks the arguments, then
// issues the operation: for a blocking call (request == blocking) it runs
// it to completion, or records it in the calling thread's open group; else
// it starts it and returns its request in *request (which must not be
// NULL, and is cleared first). name is the called function's: the
// Async forms pass their own, so that no name is built per call.
//
// The call and the operation live on the stack: the checks are called
// directly (see operation), and the function values that issue or run the
// operation take its operands by value, so that nothing of the call
// escapes to the heap and a blocking call allocates nothing here.
func enqueue(name string, request *C.occlRequest_t, d *operation, a args) (res C.occlResult_t) {
	async := request != blocking
	k := call{name: name}
	defer k.end(&res)
	return k.enqueue(async, request, d, &a)
}

func (k *call) enqueue(async bool, request *C.occlRequest_t, d *operation, a *args) C.occlResult_t {
	if async {
		if request == nil {
			return k.fail(resInvalidArgument, "request is NULL")
		}
		*request = nil
	}
	var o groupOp
	d.prepare(k, &o, a)
	if k.failed() {
		return k.r
	}
	g := openGroup()
	switch {
	case !async && g != nil:
		g.ops = append(g.ops, o)
		return resSuccess
	case !async:
		err := o.call()
		o.x.release()
		return k.failErr(err)
	case g != nil:
		return k.fail(resInvalidUsage, "non-blocking calls are not allowed inside a group; use the blocking form (occlGroupEnd waits)")
	}
	req := o.start()
	o.x.release()
	h := addRequest(k.name, o.ce, req)
	if h == nil {
		_ = req.Wait(context.Background())
		req.Release()
		return k.fail(resSystemError, "%s", noHandles(false))
	}
	*request = h
	return resSuccess
}

// ---- Collectives --------------------------------------------------------

// args are an operation's arguments as the C caller passed them (root is
// the peer of a send or receive).
type args struct {
	send, recv uintptr
	count      C.size_t
	dtype      C.occlDataType_t
	op         C.occlRedOp_t
	root       C.int
	comm       uintptr
	// counts are occlAllToAllv's sendcounts, sdispls, recvcounts and
	// rdispls.
	counts [4]uintptr
	// ops and nops are occlSendRecvAsync's.
	ops  uintptr
	nops C.int
}

// extentOf says how many elements one buffer of a collective holds and
// where it is used.
type extentOf struct {
	perRank  bool // nranks × count elements (else count)
	rootOnly bool // used on the root only (ignored elsewhere)
}

// operands are a collective's checked arguments.
type operands struct {
	send, recv comm.Buffer
	red        comm.Op
	root       int
	// counts are AllToAllv's send counts and displacements, then its
	// receive counts and displacements, in countsBuf, which comes from
	// countsPool and goes back once the operation is issued (the Go API
	// copies what it needs of them then; see release).
	counts    [4][]int
	countsBuf *[]int
	// group is SendRecv's operations.
	group *comm.Group
}

// countsPool recycles AllToAllv's counts and displacements.
var countsPool = sync.Pool{New: func() any { return new([]int) }}

// release gives back what the operands hold until the operation is
// issued.
func (x *operands) release() {
	if x.countsBuf != nil {
		countsPool.Put(x.countsBuf)
		x.countsBuf, x.counts = nil, [4][]int{}
	}
}

// kind says how an operation's arguments are checked.
type kind uint8

const (
	// kindCollective: as its operation entry describes them, in this
	// order: communicator, data type, reduction, root, count, send
	// buffer, receive buffer.
	kindCollective kind = iota
	kindAllToAllv
	kindBarrier
	kindSend
	kindRecv
	kindSendRecv
)

// operation describes an operation of the C ABI: how its arguments are
// checked, and for a collective its arguments and how to issue it. An
// operation is a value of the table below, so that checking a call's
// arguments calls no function value (through which the call's state would
// escape to the heap).
type operation struct {
	kind       kind
	count      string // the count argument's name in occl.h
	reduces    bool   // takes a reduction
	rooted     bool   // takes a root
	send, recv extentOf
	issue      func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request // the Async form
	run        func(ctx context.Context, c *comm.Communicator, x operands) error         // the blocking form
}

// prepare checks the arguments a of a call of d and makes o ready to
// issue.
func (d *operation) prepare(k *call, o *groupOp, a *args) {
	switch d.kind {
	case kindCollective:
		d.prepareCollective(k, o, a)
	case kindAllToAllv:
		prepareAllToAllv(k, o, a)
	case kindBarrier:
		if k.op(o, a.comm) != nil {
			o.issue, o.run = issueBarrier, runBarrier
		}
	case kindSend, kindRecv:
		if c := k.op(o, a.comm); c != nil {
			prepareP2P(k, o, c, d.kind == kindSend, a)
		}
	case kindSendRecv:
		prepareSendRecv(k, o, a)
	}
}

// prepareCollective checks the arguments of a collective as d describes
// them.
func (d *operation) prepareCollective(k *call, o *groupOp, a *args) {
	{
		c := k.op(o, a.comm)
		if c == nil {
			return
		}
		x := &o.x
		dt := k.dtype(a.dtype)
		if d.reduces {
			x.red = k.redop(a.op)
		}
		if d.rooted {
			x.root = k.rank("root", a.root, c)
		}
		var n [2]int // elements of count, and of nranks × count
		if !d.send.perRank || !d.recv.perRank {
			n[0] = k.elems(d.count, a.count, 1, dt)
		}
		if d.send.perRank || d.recv.perRank {
			n[1] = k.elems(d.count, a.count, c.Size(), dt)
		}
		used := func(e extentOf) bool { return !e.rootOnly || x.root == c.Rank() }
		if used(d.send) {
			x.send = k.buffer("sendbuff", a.send, n[b2i(d.send.perRank)], dt)
		}
		if used(d.recv) {
			x.recv = k.buffer("recvbuff", a.recv, n[b2i(d.recv.perRank)], dt)
		}
		o.issue, o.run = d.issue, d.run
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The operations. Counts and extents are those of occl.h.
var (
	allToAllv  = operation{kind: kindAllToAllv}
	barrier    = operation{kind: kindBarrier}
	send       = operation{kind: kindSend}
	recv       = operation{kind: kindRecv}
	sendRecvOp = operation{kind: kindSendRecv}

	allReduce = operation{count: "count", reduces: true,
		issue: func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
			return c.AllReduceAsync(ctx, x.send, x.recv, x.red)
		},
		run: func(ctx context.Context, c *comm.Communicator, x operands) error {
			return c.AllReduce(ctx, x.send, x.recv, x.red)
		}}
	broadcast = operation{count: "count", rooted: true, send: extentOf{rootOnly: true},
		issue: func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
			return c.BroadcastAsync(ctx, x.send, x.recv, x.root)
		},
		run: func(ctx context.Context, c *comm.Communicator, x operands) error {
			return c.Broadcast(ctx, x.send, x.recv, x.root)
		}}
	reduce = operation{count: "count", reduces: true, rooted: true, recv: extentOf{rootOnly: true},
		issue: func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
			return c.ReduceAsync(ctx, x.send, x.recv, x.red, x.root)
		},
		run: func(ctx context.Context, c *comm.Communicator, x operands) error {
			return c.Reduce(ctx, x.send, x.recv, x.red, x.root)
		}}
	allGather = operation{count: "sendcount", recv: extentOf{perRank: true},
		issue: func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
			return c.AllGatherAsync(ctx, x.send, x.recv)
		},
		run: func(ctx context.Context, c *comm.Communicator, x operands) error {
			return c.AllGather(ctx, x.send, x.recv)
		}}
	reduceScatter = operation{count: "recvcount", reduces: true, send: extentOf{perRank: true},
		issue: func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
			return c.ReduceScatterAsync(ctx, x.send, x.recv, x.red)
		},
		run: func(ctx context.Context, c *comm.Communicator, x operands) error {
			return c.ReduceScatter(ctx, x.send, x.recv, x.red)
		}}
	gather = operation{count: "sendcount", rooted: true, recv: extentOf{perRank: true, rootOnly: true},
		issue: func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
			return c.GatherAsync(ctx, x.send, x.recv, x.root)
		},
		run: func(ctx context.Context, c *comm.Communicator, x operands) error {
			return c.Gather(ctx, x.send, x.recv, x.root)
		}}
	scatter = operation{count: "recvcount", rooted: true, send: extentOf{perRank: true, rootOnly: true},
		issue: func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
			return c.ScatterAsync(ctx, x.send, x.recv, x.root)
		},
		run: func(ctx context.Context, c *comm.Communicator, x operands) error {
			return c.Scatter(ctx, x.send, x.recv, x.root)
		}}
	allToAll = operation{count: "count", send: extentOf{perRank: true}, recv: extentOf{perRank: true},
		issue: func(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
			return c.AllToAllAsync(ctx, x.send, x.recv)
		},
		run: func(ctx context.Context, c *comm.Communicator, x operands) error {
			return c.AllToAll(ctx, x.send, x.recv)
		}}
)

// occlAllReduce reduces count elements across ranks into recvbuff on every rank. See occl.h.
//
//export occlAllReduce
func occlAllReduce(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlAllReduce", blocking, &allReduce, args{send: addr(sendbuff), recv: addr(recvbuff), count: count, dtype: datatype, op: op, comm: handle(comm)}) // arguments first: see addr
}

// occlAllReduceAsync is the non-blocking occlAllReduce. See occl.h.
//
//export occlAllReduceAsync
func occlAllReduceAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlAllReduceAsync", request, &allReduce, args{send: addr(sendbuff), recv: addr(recvbuff), count: count, dtype: datatype, op: op, comm: handle(comm)}) // arguments first: see addr
}

// occlBroadcast copies count elements of root's sendbuff into recvbuff on every rank. See occl.h.
//
//export occlBroadcast
func occlBroadcast(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlBroadcast", blocking, &broadcast, args{send: addr(sendbuff), recv: addr(recvbuff), count: count, dtype: datatype, root: root, comm: handle(comm)}) // arguments first: see addr
}

// occlBroadcastAsync is the non-blocking occlBroadcast. See occl.h.
//
//export occlBroadcastAsync
func occlBroadcastAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlBroadcastAsync", request, &broadcast, args{send: addr(sendbuff), recv: addr(recvbuff), count: count, dtype: datatype, root: root, comm: handle(comm)}) // arguments first: see addr
}

// occlReduce reduces count elements across ranks into recvbuff on root. See occl.h.
//
//export occlReduce
func occlReduce(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, root C.int, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlReduce", blocking, &reduce, args{send: addr(sendbuff), recv: addr(recvbuff), count: count, dtype: datatype, op: op, root: root, comm: handle(comm)}) // arguments first: see addr
}

// occlReduceAsync is the non-blocking occlReduce. See occl.h.
//
//export occlReduceAsync
func occlReduceAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, root C.int, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlReduceAsync", request, &reduce, args{send: addr(sendbuff), recv: addr(recvbuff), count: count, dtype: datatype, op: op, root: root, comm: handle(comm)}) // arguments first: see addr
}

// occlAllGather gathers sendcount elements of every rank into recvbuff on every rank. See occl.h.
//
//export occlAllGather
func occlAllGather(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.occlDataType_t, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlAllGather", blocking, &allGather, args{send: addr(sendbuff), recv: addr(recvbuff), count: sendcount, dtype: datatype, comm: handle(comm)}) // arguments first: see addr
}

// occlAllGatherAsync is the non-blocking occlAllGather. See occl.h.
//
//export occlAllGatherAsync
func occlAllGatherAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.occlDataType_t, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlAllGatherAsync", request, &allGather, args{send: addr(sendbuff), recv: addr(recvbuff), count: sendcount, dtype: datatype, comm: handle(comm)}) // arguments first: see addr
}

// occlReduceScatter reduces nranks*recvcount elements and leaves this rank's block in recvbuff. See occl.h.
//
//export occlReduceScatter
func occlReduceScatter(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlReduceScatter", blocking, &reduceScatter, args{send: addr(sendbuff), recv: addr(recvbuff), count: recvcount, dtype: datatype, op: op, comm: handle(comm)}) // arguments first: see addr
}

// occlReduceScatterAsync is the non-blocking occlReduceScatter. See occl.h.
//
//export occlReduceScatterAsync
func occlReduceScatterAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlReduceScatterAsync", request, &reduceScatter, args{send: addr(sendbuff), recv: addr(recvbuff), count: recvcount, dtype: datatype, op: op, comm: handle(comm)}) // arguments first: see addr
}

// occlGather gathers sendcount elements of every rank into recvbuff on root. See occl.h.
//
//export occlGather
func occlGather(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlGather", blocking, &gather, args{send: addr(sendbuff), recv: addr(recvbuff), count: sendcount, dtype: datatype, root: root, comm: handle(comm)}) // arguments first: see addr
}

// occlGatherAsync is the non-blocking occlGather. See occl.h.
//
//export occlGatherAsync
func occlGatherAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlGatherAsync", request, &gather, args{send: addr(sendbuff), recv: addr(recvbuff), count: sendcount, dtype: datatype, root: root, comm: handle(comm)}) // arguments first: see addr
}

// occlScatter sends block j of root's sendbuff to rank j's recvbuff. See occl.h.
//
//export occlScatter
func occlScatter(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlScatter", blocking, &scatter, args{send: addr(sendbuff), recv: addr(recvbuff), count: recvcount, dtype: datatype, root: root, comm: handle(comm)}) // arguments first: see addr
}

// occlScatterAsync is the non-blocking occlScatter. See occl.h.
//
//export occlScatterAsync
func occlScatterAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlScatterAsync", request, &scatter, args{send: addr(sendbuff), recv: addr(recvbuff), count: recvcount, dtype: datatype, root: root, comm: handle(comm)}) // arguments first: see addr
}

// occlAllToAll sends block j (count elements) of sendbuff to rank j and receives rank j's block. See occl.h.
//
//export occlAllToAll
func occlAllToAll(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlAllToAll", blocking, &allToAll, args{send: addr(sendbuff), recv: addr(recvbuff), count: count, dtype: datatype, comm: handle(comm)}) // arguments first: see addr
}

// occlAllToAllAsync is the non-blocking occlAllToAll. See occl.h.
//
//export occlAllToAllAsync
func occlAllToAllAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlAllToAllAsync", request, &allToAll, args{send: addr(sendbuff), recv: addr(recvbuff), count: count, dtype: datatype, comm: handle(comm)}) // arguments first: see addr
}

// ---- AllToAllv ----------------------------------------------------------

// prepareAllToAllv checks the arguments of occlAllToAllv and copies its
// counts and displacements.
func prepareAllToAllv(k *call, o *groupOp, a *args) {
	c := k.op(o, a.comm)
	if c == nil {
		return
	}
	dt := k.dtype(a.dtype)
	n := c.Size()
	o.x.countsBuf = countsPool.Get().(*[]int)
	if cap(*o.x.countsBuf) < 4*n {
		*o.x.countsBuf = make([]int, 4*n)
	}
	buf := (*o.x.countsBuf)[:4*n]
	for i, what := range [4]string{"sendcounts", "sdispls", "recvcounts", "rdispls"} {
		o.x.counts[i] = k.counts(what, a.counts[i], buf[i*n:(i+1)*n:(i+1)*n], dt)
	}
	sc, sd, rc, rd := o.x.counts[0], o.x.counts[1], o.x.counts[2], o.x.counts[3]
	sn, rn := k.extent("sendbuff", sc, sd, dt), k.extent("recvbuff", rc, rd, dt)
	o.x.send, o.x.recv = k.buffer("sendbuff", a.send, sn, dt), k.buffer("recvbuff", a.recv, rn, dt)
	o.issue, o.run = issueAllToAllv, runAllToAllv
}

func issueAllToAllv(ctx context.Context, c *comm.Communicator, x operands) *comm.Request {
	return c.AllToAllVAsync(ctx, x.send, x.counts[0], x.counts[1], x.recv, x.counts[2], x.counts[3])
}

func runAllToAllv(ctx context.Context, c *comm.Communicator, x operands) error {
	return c.AllToAllV(ctx, x.send, x.counts[0], x.counts[1], x.recv, x.counts[2], x.counts[3])
}

// occlAllToAllv is occlAllToAll with a count and displacement per peer. See occl.h.
//
//export occlAllToAllv
func occlAllToAllv(sendbuff C.occlInternalConstBuf, sendcounts, sdispls C.occlInternalConstCounts, recvbuff unsafe.Pointer, recvcounts, rdispls C.occlInternalConstCounts, datatype C.occlDataType_t, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlAllToAllv", blocking, &allToAllv, args{send: addr(sendbuff), recv: addr(recvbuff), counts: [4]uintptr{addr(sendcounts), addr(sdispls), addr(recvcounts), addr(rdispls)}, dtype: datatype, comm: handle(comm)}) // arguments first: see addr
}

// occlAllToAllvAsync is the non-blocking occlAllToAllv. See occl.h.
//
//export occlAllToAllvAsync
func occlAllToAllvAsync(sendbuff C.occlInternalConstBuf, sendcounts, sdispls C.occlInternalConstCounts, recvbuff unsafe.Pointer, recvcounts, rdispls C.occlInternalConstCounts, datatype C.occlDataType_t, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlAllToAllvAsync", request, &allToAllv, args{send: addr(sendbuff), recv: addr(recvbuff), counts: [4]uintptr{addr(sendcounts), addr(sdispls), addr(recvcounts), addr(rdispls)}, dtype: datatype, comm: handle(comm)}) // arguments first: see addr
}

// ---- Barrier ------------------------------------------------------------

func issueBarrier(ctx context.Context, c *comm.Communicator, _ operands) *comm.Request {
	return c.BarrierAsync(ctx)
}

func runBarrier(ctx context.Context, c *comm.Communicator, _ operands) error { return c.Barrier(ctx) }

// occlBarrier returns once every rank of comm has called it. See occl.h.
//
//export occlBarrier
func occlBarrier(comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlBarrier", blocking, &barrier, args{comm: handle(comm)}) // arguments first: see addr
}

// occlBarrierAsync is the non-blocking occlBarrier. See occl.h.
//
//export occlBarrierAsync
func occlBarrierAsync(comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlBarrierAsync", request, &barrier, args{comm: handle(comm)}) // arguments first: see addr
}

// ---- Send, Recv ---------------------------------------------------------

// prepareP2P checks the arguments of occlSend (send) or occlRecv on c,
// a.send or a.recv being the buffer and a.root the peer.
func prepareP2P(k *call, o *groupOp, c *comm.Communicator, send bool, a *args) {
	dt := k.dtype(a.dtype)
	peer := k.rank("peer", a.root, c)
	n := k.elems("count", a.count, 1, dt)
	what, buf := "recvbuff", a.recv
	if send {
		what, buf = "sendbuff", a.send
	}
	o.send, o.buf, o.peer = send, k.buffer(what, buf, n, dt), peer
}

// occlSend sends count elements to peer (recorded until occlGroupEnd inside a group). See occl.h.
//
//export occlSend
func occlSend(sendbuff C.occlInternalConstBuf, count C.size_t, datatype C.occlDataType_t, peer C.int, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlSend", blocking, &send, args{send: addr(sendbuff), count: count, dtype: datatype, root: peer, comm: handle(comm)}) // arguments first: see addr
}

// occlSendAsync is the non-blocking occlSend. See occl.h.
//
//export occlSendAsync
func occlSendAsync(sendbuff C.occlInternalConstBuf, count C.size_t, datatype C.occlDataType_t, peer C.int, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlSendAsync", request, &send, args{send: addr(sendbuff), count: count, dtype: datatype, root: peer, comm: handle(comm)}) // arguments first: see addr
}

// occlRecv receives count elements from peer (recorded until occlGroupEnd inside a group). See occl.h.
//
//export occlRecv
func occlRecv(recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, peer C.int, comm C.occlComm_t) C.occlResult_t {
	return enqueue("occlRecv", blocking, &recv, args{recv: addr(recvbuff), count: count, dtype: datatype, root: peer, comm: handle(comm)}) // arguments first: see addr
}

// occlRecvAsync is the non-blocking occlRecv. See occl.h.
//
//export occlRecvAsync
func occlRecvAsync(recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, peer C.int, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlRecvAsync", request, &recv, args{recv: addr(recvbuff), count: count, dtype: datatype, root: peer, comm: handle(comm)}) // arguments first: see addr
}

// prepareSendRecv checks a.nops operations at a.ops and prepares them as
// one group.
func prepareSendRecv(k *call, o *groupOp, a *args) {
	if a.nops < 0 {
		k.fail(resInvalidArgument, "nops %d is negative", int(a.nops))
		return
	}
	var list []C.occlP2POp_t
	if a.nops > 0 {
		if k.address("ops", a.ops, uintptr(a.nops)*unsafe.Sizeof(C.occlP2POp_t{})) != resSuccess {
			return
		}
		list = unsafe.Slice((*C.occlP2POp_t)(pointer(a.ops)), int(a.nops))
	}
	c := k.op(o, a.comm)
	if c == nil {
		return
	}
	g := c.NewGroup()
	for _, p := range list {
		pa := args{send: addr(p.buff), recv: addr(p.buff), count: p.count, dtype: p.datatype, root: p.peer, comm: a.comm}
		var one groupOp
		prepareP2P(k, &one, c, p.isSend != 0, &pa)
		switch {
		case k.failed():
			return
		case one.send:
			g.Send(one.buf, one.peer)
		default:
			g.Recv(one.buf, one.peer)
		}
	}
	o.x.group, o.issue = g, issueGroup
}

func issueGroup(ctx context.Context, _ *comm.Communicator, x operands) *comm.Request {
	return x.group.Start(ctx)
}

// occlSendRecvAsync posts sends and receives as one group. See occl.h.
//
//export occlSendRecvAsync
func occlSendRecvAsync(ops C.occlInternalConstP2POps, nops C.int, comm C.occlComm_t, request *C.occlRequest_t) C.occlResult_t {
	return enqueue("occlSendRecvAsync", request, &sendRecvOp, args{ops: addr(ops), nops: nops, comm: handle(comm)}) // arguments first: see addr
}
