package main

// #include "occl_cgo.h"
import "C"

import (
	"context"
	"fmt"
	"math"
	"unsafe"

	"github.com/occl/occl/comm"
)

// This file: argument checks and the operations, each as a blocking call
// and an Async one sharing a prepare function.

// maxBytes bounds the bytes of one buffer: 2^47 (128 TiB), more than any
// host has, and far from where Go slice lengths or address arithmetic
// overflow.
const maxBytes = 1 << 47

// errInternal is the error of a recovered panic.
func errInternal(r any) error { return fmt.Errorf("internal error: %v", r) }

// dtype checks a data type.
func (k *call) dtype(dt C.occlDataType_t) (comm.DType, C.occlResult_t) {
	d := comm.DType(uint8(dt))
	if uint64(dt) >= C.occlNumTypes || !d.Valid() {
		return 0, k.fail(resInvalidArgument, "unknown datatype %d (valid: 0 occlInt8 .. 9 occlBfloat16)", int32(uint32(dt)))
	}
	return d, resSuccess
}

// redop checks a reduction.
func (k *call) redop(op C.occlRedOp_t) (comm.Op, C.occlResult_t) {
	o := comm.Op(uint8(op))
	if uint64(op) >= C.occlNumOps || !o.Valid() {
		return 0, k.fail(resInvalidArgument, "unknown reduction %d (valid: 0 occlSum .. 4 occlAvg)", int32(uint32(op)))
	}
	return o, resSuccess
}

// elems checks a count of elements of dt, times mult (a number of ranks),
// and returns the number of elements.
func (k *call) elems(what string, count C.size_t, mult int, dt comm.DType) (int, C.occlResult_t) {
	n := uint64(count)
	if int64(n) < 0 {
		return 0, k.fail(resInvalidArgument, "%s %d is negative (%d as size_t)", what, int64(n), n)
	}
	limit := uint64(maxBytes / dt.Size() / mult)
	if n > limit {
		if mult > 1 {
			return 0, k.fail(resInvalidArgument, "%s %d too large: %d ranks x %d elements of %d bytes overflow the limit of 2^47 bytes", what, n, mult, n, dt.Size())
		}
		return 0, k.fail(resInvalidArgument, "%s %d too large: %d elements of %d bytes overflow the limit of 2^47 bytes", what, n, n, dt.Size())
	}
	return int(n) * mult, resSuccess
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
// page, not wrapping around.
func (k *call) address(what string, p, n uintptr) C.occlResult_t {
	switch {
	case p == 0:
		return k.fail(resInvalidArgument, "%s is NULL", what)
	case p < minAddress:
		return k.fail(resInvalidArgument, "%s %#x is not a valid address", what, p)
	case p > math.MaxUint64-n:
		return k.fail(resInvalidArgument, "%s %#x + %d bytes wraps around the address space", what, p, n)
	}
	return resSuccess
}

// buffer makes a Buffer over n elements of dt at p, in place, without
// copying. A null p is accepted for 0 elements.
func (k *call) buffer(what string, p uintptr, n int, dt comm.DType) (comm.Buffer, C.occlResult_t) {
	bytes := uintptr(n) * uintptr(dt.Size())
	if bytes == 0 {
		return comm.Raw(nil, dt), resSuccess
	}
	if r := k.address(fmt.Sprintf("%s (of %d elements)", what, n), p, bytes); r != resSuccess {
		return comm.Buffer{}, r
	}
	return comm.Raw(unsafe.Slice((*byte)(C.occlInternalPointer(C.uintptr_t(p))), bytes), dt), resSuccess
}

// counts copies an array of nranks size_t counts or displacements.
func (k *call) counts(what string, p uintptr, n int, dt comm.DType) ([]int, C.occlResult_t) {
	if r := k.address(what, p, uintptr(n)*unsafe.Sizeof(C.size_t(0))); r != resSuccess {
		return nil, r
	}
	src := unsafe.Slice((*C.size_t)(C.occlInternalPointer(C.uintptr_t(p))), n)
	out := make([]int, n)
	for i, v := range src {
		e, r := k.elems(fmt.Sprintf("%s[%d]", what, i), v, 1, dt)
		if r != resSuccess {
			return nil, r
		}
		out[i] = e
	}
	return out, resSuccess
}

// rank checks a root or peer.
func (k *call) rank(what string, r C.int, c *comm.Communicator) C.occlResult_t {
	if r < 0 || int(r) >= c.Size() {
		return k.fail(resInvalidArgument, "%s %d out of range [0, %d)", what, int(r), c.Size())
	}
	return resSuccess
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

// run runs a prepared operation to completion, or records it in the calling
// thread's open group.
func (k *call) run(o *groupOp, r C.occlResult_t) C.occlResult_t {
	if r != resSuccess {
		return r
	}
	if g := openGroup(); g != nil {
		g.ops = append(g.ops, o)
		return resSuccess
	}
	return k.failErr(o.start().Wait(context.Background()))
}

// start issues a prepared operation and returns its request in *request.
func (k *call) start(o *groupOp, r C.occlResult_t, request *C.occlRequest_t) C.occlResult_t {
	if r != resSuccess {
		return r
	}
	if openGroup() != nil {
		return k.fail(resInvalidUsage, "non-blocking calls are not allowed inside a group; use the blocking form (occlGroupEnd waits)")
	}
	req := o.start()
	h := addRequest(k.name, o.ce, req)
	if h == nil {
		_ = req.Wait(context.Background())
		return k.fail(resSystemError, "no address space left for handles")
	}
	*request = h
	return resSuccess
}

// async checks the request pointer of an Async call and clears it.
func (k *call) async(request *C.occlRequest_t) C.occlResult_t {
	if request == nil {
		return k.fail(resInvalidArgument, "request is NULL")
	}
	*request = nil
	return resSuccess
}

// op is the start of every prepare function: the communicator, and the
// groupOp for it.
func (k *call) op(h uintptr) (*groupOp, *comm.Communicator, C.occlResult_t) {
	ce, c, r := k.comm(h)
	if r != resSuccess {
		return nil, nil, r
	}
	return &groupOp{name: k.name, ce: ce, c: c, ctx: opCtx(ce)}, c, resSuccess
}

// ---- AllReduce --------------------------------------------------------

// allReduce checks the arguments of occlAllReduce and prepares it.
func (k *call) allReduce(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, h uintptr) (*groupOp, C.occlResult_t) {
	o, c, r := k.op(h)
	if r != resSuccess {
		return nil, r
	}
	dt, r := k.dtype(datatype)
	if r != resSuccess {
		return nil, r
	}
	red, r := k.redop(op)
	if r != resSuccess {
		return nil, r
	}
	n, r := k.elems("count", count, 1, dt)
	if r != resSuccess {
		return nil, r
	}
	send, r := k.buffer("sendbuff", sendbuff, n, dt)
	if r != resSuccess {
		return nil, r
	}
	recv, r := k.buffer("recvbuff", recvbuff, n, dt)
	if r != resSuccess {
		return nil, r
	}
	o.issue = func(ctx context.Context) *comm.Request { return c.AllReduceAsync(ctx, send, recv, red) }
	return o, resSuccess
}

// occlAllReduce reduces count elements across ranks into recvbuff on every rank. See occl.h.
//
//export occlAllReduce
func occlAllReduce(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlAllReduce", &res)
	defer k.end()
	return k.run(k.allReduce(sendbuffP, recvbuffP, count, datatype, op, h))
}

// occlAllReduceAsync is the non-blocking occlAllReduce. See occl.h.
//
//export occlAllReduceAsync
func occlAllReduceAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlAllReduceAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.allReduce(sendbuffP, recvbuffP, count, datatype, op, h)
	return k.start(o, r, request)
}

// ---- Broadcast --------------------------------------------------------

// broadcast checks the arguments of occlBroadcast and prepares it.
func (k *call) broadcast(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, root C.int, h uintptr) (*groupOp, C.occlResult_t) {
	o, c, r := k.op(h)
	if r != resSuccess {
		return nil, r
	}
	dt, r := k.dtype(datatype)
	if r != resSuccess {
		return nil, r
	}
	if r := k.rank("root", root, c); r != resSuccess {
		return nil, r
	}
	n, r := k.elems("count", count, 1, dt)
	if r != resSuccess {
		return nil, r
	}
	var send comm.Buffer
	if int(root) == c.Rank() {
		if send, r = k.buffer("sendbuff", sendbuff, n, dt); r != resSuccess {
			return nil, r
		}
	}
	recv, r := k.buffer("recvbuff", recvbuff, n, dt)
	if r != resSuccess {
		return nil, r
	}
	o.issue = func(ctx context.Context) *comm.Request { return c.BroadcastAsync(ctx, send, recv, int(root)) }
	return o, resSuccess
}

// occlBroadcast copies count elements of root's sendbuff into recvbuff on every rank. See occl.h.
//
//export occlBroadcast
func occlBroadcast(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlBroadcast", &res)
	defer k.end()
	return k.run(k.broadcast(sendbuffP, recvbuffP, count, datatype, root, h))
}

// occlBroadcastAsync is the non-blocking occlBroadcast. See occl.h.
//
//export occlBroadcastAsync
func occlBroadcastAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlBroadcastAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.broadcast(sendbuffP, recvbuffP, count, datatype, root, h)
	return k.start(o, r, request)
}

// ---- Reduce -----------------------------------------------------------

// reduce checks the arguments of occlReduce and prepares it.
func (k *call) reduce(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, root C.int, h uintptr) (*groupOp, C.occlResult_t) {
	o, c, r := k.op(h)
	if r != resSuccess {
		return nil, r
	}
	dt, r := k.dtype(datatype)
	if r != resSuccess {
		return nil, r
	}
	red, r := k.redop(op)
	if r != resSuccess {
		return nil, r
	}
	if r := k.rank("root", root, c); r != resSuccess {
		return nil, r
	}
	n, r := k.elems("count", count, 1, dt)
	if r != resSuccess {
		return nil, r
	}
	send, r := k.buffer("sendbuff", sendbuff, n, dt)
	if r != resSuccess {
		return nil, r
	}
	var recv comm.Buffer
	if int(root) == c.Rank() {
		if recv, r = k.buffer("recvbuff", recvbuff, n, dt); r != resSuccess {
			return nil, r
		}
	}
	o.issue = func(ctx context.Context) *comm.Request { return c.ReduceAsync(ctx, send, recv, red, int(root)) }
	return o, resSuccess
}

// occlReduce reduces count elements across ranks into recvbuff on root. See occl.h.
//
//export occlReduce
func occlReduce(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, root C.int, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlReduce", &res)
	defer k.end()
	return k.run(k.reduce(sendbuffP, recvbuffP, count, datatype, op, root, h))
}

// occlReduceAsync is the non-blocking occlReduce. See occl.h.
//
//export occlReduceAsync
func occlReduceAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, root C.int, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlReduceAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.reduce(sendbuffP, recvbuffP, count, datatype, op, root, h)
	return k.start(o, r, request)
}

// ---- AllGather, ReduceScatter, Gather, Scatter --------------------------

// blocks prepares the collectives whose send and receive sides differ by a
// factor of nranks: the small side holds count elements, the big one nranks
// * count; the small side is sendbuff if smallSend. For a rooted operation
// the big side is used on the root only.
func (k *call) blocks(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, h uintptr, smallSend bool, root C.int, rooted bool,
	issue func(c *comm.Communicator, send, recv comm.Buffer) func(ctx context.Context) *comm.Request) (*groupOp, C.occlResult_t) {
	o, c, r := k.op(h)
	if r != resSuccess {
		return nil, r
	}
	dt, r := k.dtype(datatype)
	if r != resSuccess {
		return nil, r
	}
	if rooted {
		if r := k.rank("root", root, c); r != resSuccess {
			return nil, r
		}
	}
	what := "recvcount"
	if smallSend {
		what = "sendcount"
	}
	small, r := k.elems(what, count, 1, dt)
	if r != resSuccess {
		return nil, r
	}
	big, r := k.elems(what, count, c.Size(), dt)
	if r != resSuccess {
		return nil, r
	}
	bigUsed := !rooted || int(root) == c.Rank()
	var send, recv comm.Buffer
	if smallSend || bigUsed {
		n := small
		if !smallSend {
			n = big
		}
		if send, r = k.buffer("sendbuff", sendbuff, n, dt); r != resSuccess {
			return nil, r
		}
	}
	if !smallSend || bigUsed {
		n := small
		if smallSend {
			n = big
		}
		if recv, r = k.buffer("recvbuff", recvbuff, n, dt); r != resSuccess {
			return nil, r
		}
	}
	o.issue = issue(c, send, recv)
	return o, resSuccess
}

// allGather checks the arguments of occlAllGather and prepares it.
func (k *call) allGather(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, h uintptr) (*groupOp, C.occlResult_t) {
	return k.blocks(sendbuff, recvbuff, count, datatype, h, true, 0, false, func(c *comm.Communicator, send, recv comm.Buffer) func(ctx context.Context) *comm.Request {
		return func(ctx context.Context) *comm.Request { return c.AllGatherAsync(ctx, send, recv) }
	})
}

// occlAllGather gathers sendcount elements of every rank into recvbuff on every rank. See occl.h.
//
//export occlAllGather
func occlAllGather(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.occlDataType_t, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlAllGather", &res)
	defer k.end()
	return k.run(k.allGather(sendbuffP, recvbuffP, sendcount, datatype, h))
}

// occlAllGatherAsync is the non-blocking occlAllGather. See occl.h.
//
//export occlAllGatherAsync
func occlAllGatherAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.occlDataType_t, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlAllGatherAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.allGather(sendbuffP, recvbuffP, sendcount, datatype, h)
	return k.start(o, r, request)
}

// reduceScatter checks the arguments of occlReduceScatter and prepares it.
func (k *call) reduceScatter(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, h uintptr) (*groupOp, C.occlResult_t) {
	red, r := k.redop(op)
	if r != resSuccess {
		return nil, r
	}
	return k.blocks(sendbuff, recvbuff, count, datatype, h, false, 0, false, func(c *comm.Communicator, send, recv comm.Buffer) func(ctx context.Context) *comm.Request {
		return func(ctx context.Context) *comm.Request { return c.ReduceScatterAsync(ctx, send, recv, red) }
	})
}

// occlReduceScatter reduces nranks*recvcount elements and leaves this rank's block in recvbuff. See occl.h.
//
//export occlReduceScatter
func occlReduceScatter(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlReduceScatter", &res)
	defer k.end()
	return k.run(k.reduceScatter(sendbuffP, recvbuffP, recvcount, datatype, op, h))
}

// occlReduceScatterAsync is the non-blocking occlReduceScatter. See occl.h.
//
//export occlReduceScatterAsync
func occlReduceScatterAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.occlDataType_t, op C.occlRedOp_t, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlReduceScatterAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.reduceScatter(sendbuffP, recvbuffP, recvcount, datatype, op, h)
	return k.start(o, r, request)
}

// gather checks the arguments of occlGather and prepares it.
func (k *call) gather(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, root C.int, h uintptr) (*groupOp, C.occlResult_t) {
	return k.blocks(sendbuff, recvbuff, count, datatype, h, true, root, true, func(c *comm.Communicator, send, recv comm.Buffer) func(ctx context.Context) *comm.Request {
		return func(ctx context.Context) *comm.Request { return c.GatherAsync(ctx, send, recv, int(root)) }
	})
}

// scatter checks the arguments of occlScatter and prepares it.
func (k *call) scatter(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, root C.int, h uintptr) (*groupOp, C.occlResult_t) {
	return k.blocks(sendbuff, recvbuff, count, datatype, h, false, root, true, func(c *comm.Communicator, send, recv comm.Buffer) func(ctx context.Context) *comm.Request {
		return func(ctx context.Context) *comm.Request { return c.ScatterAsync(ctx, send, recv, int(root)) }
	})
}

// occlGather gathers sendcount elements of every rank into recvbuff on root. See occl.h.
//
//export occlGather
func occlGather(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlGather", &res)
	defer k.end()
	return k.run(k.gather(sendbuffP, recvbuffP, sendcount, datatype, root, h))
}

// occlScatter sends block j of root's sendbuff to rank j's recvbuff. See occl.h.
//
//export occlScatter
func occlScatter(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlScatter", &res)
	defer k.end()
	return k.run(k.scatter(sendbuffP, recvbuffP, recvcount, datatype, root, h))
}

// occlGatherAsync is the non-blocking occlGather. See occl.h.
//
//export occlGatherAsync
func occlGatherAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, sendcount C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlGatherAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.gather(sendbuffP, recvbuffP, sendcount, datatype, root, h)
	return k.start(o, r, request)
}

// occlScatterAsync is the non-blocking occlScatter. See occl.h.
//
//export occlScatterAsync
func occlScatterAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, recvcount C.size_t, datatype C.occlDataType_t, root C.int, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlScatterAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.scatter(sendbuffP, recvbuffP, recvcount, datatype, root, h)
	return k.start(o, r, request)
}

// ---- AllToAll, AllToAllv ------------------------------------------------

// allToAll checks the arguments of occlAllToAll and prepares it.
func (k *call) allToAll(sendbuff, recvbuff uintptr, count C.size_t, datatype C.occlDataType_t, h uintptr) (*groupOp, C.occlResult_t) {
	o, c, r := k.op(h)
	if r != resSuccess {
		return nil, r
	}
	dt, r := k.dtype(datatype)
	if r != resSuccess {
		return nil, r
	}
	n, r := k.elems("count", count, c.Size(), dt)
	if r != resSuccess {
		return nil, r
	}
	send, r := k.buffer("sendbuff", sendbuff, n, dt)
	if r != resSuccess {
		return nil, r
	}
	recv, r := k.buffer("recvbuff", recvbuff, n, dt)
	if r != resSuccess {
		return nil, r
	}
	o.issue = func(ctx context.Context) *comm.Request { return c.AllToAllAsync(ctx, send, recv) }
	return o, resSuccess
}

// occlAllToAll sends block j (count elements) of sendbuff to rank j and receives rank j's block. See occl.h.
//
//export occlAllToAll
func occlAllToAll(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlAllToAll", &res)
	defer k.end()
	return k.run(k.allToAll(sendbuffP, recvbuffP, count, datatype, h))
}

// occlAllToAllAsync is the non-blocking occlAllToAll. See occl.h.
//
//export occlAllToAllAsync
func occlAllToAllAsync(sendbuff C.occlInternalConstBuf, recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, recvbuffP, h := addr(sendbuff), addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlAllToAllAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.allToAll(sendbuffP, recvbuffP, count, datatype, h)
	return k.start(o, r, request)
}

// extent is the number of elements counts/displs address: the largest
// displ + count (0 if every count is 0).
func (k *call) extent(what string, counts, displs []int, dt comm.DType) (int, C.occlResult_t) {
	n := 0
	for j := range counts {
		if counts[j] == 0 {
			continue
		}
		end := counts[j] + displs[j] // both < 2^47
		if end > maxBytes/dt.Size() {
			return 0, k.fail(resInvalidArgument, "%s: block %d ends at element %d: more than %d bytes", what, j, end, uint64(maxBytes))
		}
		n = max(n, end)
	}
	return n, resSuccess
}

// allToAllv checks the arguments of occlAllToAllv, copies its counts and displacements, and prepares it.
func (k *call) allToAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls uintptr, datatype C.occlDataType_t, h uintptr) (*groupOp, C.occlResult_t) {
	o, c, r := k.op(h)
	if r != resSuccess {
		return nil, r
	}
	dt, r := k.dtype(datatype)
	if r != resSuccess {
		return nil, r
	}
	n := c.Size()
	sc, r := k.counts("sendcounts", sendcounts, n, dt)
	if r != resSuccess {
		return nil, r
	}
	sd, r := k.counts("sdispls", sdispls, n, dt)
	if r != resSuccess {
		return nil, r
	}
	rc, r := k.counts("recvcounts", recvcounts, n, dt)
	if r != resSuccess {
		return nil, r
	}
	rd, r := k.counts("rdispls", rdispls, n, dt)
	if r != resSuccess {
		return nil, r
	}
	sn, r := k.extent("sendbuff", sc, sd, dt)
	if r != resSuccess {
		return nil, r
	}
	rn, r := k.extent("recvbuff", rc, rd, dt)
	if r != resSuccess {
		return nil, r
	}
	send, r := k.buffer("sendbuff", sendbuff, sn, dt)
	if r != resSuccess {
		return nil, r
	}
	recv, r := k.buffer("recvbuff", recvbuff, rn, dt)
	if r != resSuccess {
		return nil, r
	}
	o.issue = func(ctx context.Context) *comm.Request { return c.AllToAllVAsync(ctx, send, sc, sd, recv, rc, rd) }
	return o, resSuccess
}

// occlAllToAllv is occlAllToAll with a count and displacement per peer. See occl.h.
//
//export occlAllToAllv
func occlAllToAllv(sendbuff C.occlInternalConstBuf, sendcounts, sdispls C.occlInternalConstCounts, recvbuff unsafe.Pointer, recvcounts, rdispls C.occlInternalConstCounts, datatype C.occlDataType_t, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, sendcountsP, sdisplsP, recvbuffP, recvcountsP, rdisplsP, h := addr(sendbuff), addr(sendcounts), addr(sdispls), addr(recvbuff), addr(recvcounts), addr(rdispls), handle(comm) // first: see addr
	k := begin("occlAllToAllv", &res)
	defer k.end()
	return k.run(k.allToAllv(sendbuffP, sendcountsP, sdisplsP, recvbuffP, recvcountsP, rdisplsP, datatype, h))
}

// occlAllToAllvAsync is the non-blocking occlAllToAllv. See occl.h.
//
//export occlAllToAllvAsync
func occlAllToAllvAsync(sendbuff C.occlInternalConstBuf, sendcounts, sdispls C.occlInternalConstCounts, recvbuff unsafe.Pointer, recvcounts, rdispls C.occlInternalConstCounts, datatype C.occlDataType_t, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, sendcountsP, sdisplsP, recvbuffP, recvcountsP, rdisplsP, h := addr(sendbuff), addr(sendcounts), addr(sdispls), addr(recvbuff), addr(recvcounts), addr(rdispls), handle(comm) // first: see addr
	k := begin("occlAllToAllvAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.allToAllv(sendbuffP, sendcountsP, sdisplsP, recvbuffP, recvcountsP, rdisplsP, datatype, h)
	return k.start(o, r, request)
}

// ---- Barrier ------------------------------------------------------------

// barrier prepares occlBarrier.
func (k *call) barrier(h uintptr) (*groupOp, C.occlResult_t) {
	o, c, r := k.op(h)
	if r != resSuccess {
		return nil, r
	}
	o.issue = c.BarrierAsync
	return o, resSuccess
}

// occlBarrier returns once every rank of comm has called it. See occl.h.
//
//export occlBarrier
func occlBarrier(comm C.occlComm_t) (res C.occlResult_t) {
	h := handle(comm) // first: see addr
	k := begin("occlBarrier", &res)
	defer k.end()
	return k.run(k.barrier(h))
}

// occlBarrierAsync is the non-blocking occlBarrier. See occl.h.
//
//export occlBarrierAsync
func occlBarrierAsync(comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	h := handle(comm) // first: see addr
	k := begin("occlBarrierAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.barrier(h)
	return k.start(o, r, request)
}

// ---- Send, Recv ---------------------------------------------------------

// p2p checks the arguments of occlSend (send) or occlRecv and prepares it.
func (k *call) p2p(send bool, buf uintptr, count C.size_t, datatype C.occlDataType_t, peer C.int, h uintptr) (*groupOp, C.occlResult_t) {
	o, c, r := k.op(h)
	if r != resSuccess {
		return nil, r
	}
	dt, r := k.dtype(datatype)
	if r != resSuccess {
		return nil, r
	}
	if r := k.rank("peer", peer, c); r != resSuccess {
		return nil, r
	}
	n, r := k.elems("count", count, 1, dt)
	if r != resSuccess {
		return nil, r
	}
	what := "recvbuff"
	if send {
		what = "sendbuff"
	}
	b, r := k.buffer(what, buf, n, dt)
	if r != resSuccess {
		return nil, r
	}
	o.send, o.buf, o.peer = send, b, int(peer)
	return o, resSuccess
}

// occlSend sends count elements to peer (recorded until occlGroupEnd inside a group). See occl.h.
//
//export occlSend
func occlSend(sendbuff C.occlInternalConstBuf, count C.size_t, datatype C.occlDataType_t, peer C.int, comm C.occlComm_t) (res C.occlResult_t) {
	sendbuffP, h := addr(sendbuff), handle(comm) // first: see addr
	k := begin("occlSend", &res)
	defer k.end()
	return k.run(k.p2p(true, sendbuffP, count, datatype, peer, h))
}

// occlRecv receives count elements from peer (recorded until occlGroupEnd inside a group). See occl.h.
//
//export occlRecv
func occlRecv(recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, peer C.int, comm C.occlComm_t) (res C.occlResult_t) {
	recvbuffP, h := addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlRecv", &res)
	defer k.end()
	return k.run(k.p2p(false, recvbuffP, count, datatype, peer, h))
}

// occlSendAsync is the non-blocking occlSend. See occl.h.
//
//export occlSendAsync
func occlSendAsync(sendbuff C.occlInternalConstBuf, count C.size_t, datatype C.occlDataType_t, peer C.int, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	sendbuffP, h := addr(sendbuff), handle(comm) // first: see addr
	k := begin("occlSendAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.p2p(true, sendbuffP, count, datatype, peer, h)
	return k.start(o, r, request)
}

// occlRecvAsync is the non-blocking occlRecv. See occl.h.
//
//export occlRecvAsync
func occlRecvAsync(recvbuff unsafe.Pointer, count C.size_t, datatype C.occlDataType_t, peer C.int, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	recvbuffP, h := addr(recvbuff), handle(comm) // first: see addr
	k := begin("occlRecvAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	o, r := k.p2p(false, recvbuffP, count, datatype, peer, h)
	return k.start(o, r, request)
}

// occlSendRecvAsync posts sends and receives as one group. See occl.h.
//
//export occlSendRecvAsync
func occlSendRecvAsync(ops C.occlInternalConstP2POps, nops C.int, comm C.occlComm_t, request *C.occlRequest_t) (res C.occlResult_t) {
	opsP, h := addr(ops), handle(comm) // first: see addr
	k := begin("occlSendRecvAsync", &res)
	defer k.end()
	if r := k.async(request); r != resSuccess {
		return r
	}
	if nops < 0 {
		return k.fail(resInvalidArgument, "nops %d is negative", int(nops))
	}
	if nops > 0 {
		if r := k.address("ops", opsP, uintptr(nops)*unsafe.Sizeof(C.occlP2POp_t{})); r != resSuccess {
			return r
		}
	}
	o, c, r := k.op(h)
	if r != resSuccess {
		return r
	}
	var list []C.occlP2POp_t
	if nops > 0 {
		list = unsafe.Slice((*C.occlP2POp_t)(C.occlInternalPointer(C.uintptr_t(opsP))), int(nops))
	}
	g := c.NewGroup()
	for _, p := range list {
		one, r := k.p2p(p.isSend != 0, addr(p.buff), p.count, p.datatype, p.peer, h)
		if r != resSuccess {
			return r
		}
		if one.send {
			g.Send(one.buf, one.peer)
		} else {
			g.Recv(one.buf, one.peer)
		}
	}
	o.issue = g.Start
	return k.start(o, resSuccess, request)
}
