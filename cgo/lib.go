package main

// #include "occl_cgo.h"
import "C"

import (
	"context"
	"strings"
	"time"
	"unsafe"

	"github.com/occl/occl/comm"
	"github.com/occl/occl/topo"
)

// This file: the library-level calls and the life of communicators.

// occlGetVersion stores the library's OCCL_VERSION_CODE in *version. See occl.h.
//
//export occlGetVersion
func occlGetVersion(version *C.int) (res C.occlResult_t) {
	k := begin("occlGetVersion")
	defer k.end(&res)
	if version == nil {
		return k.fail(resInvalidArgument, "version is NULL")
	}
	*version = versionCode
	return resSuccess
}

// occlGetUniqueId makes a fresh communicator id (rendezvous address and secret) for occlCommInitRank. See occl.h.
//
//export occlGetUniqueId
func occlGetUniqueId(uniqueId *C.occlUniqueId) (res C.occlResult_t) {
	k := begin("occlGetUniqueId")
	defer k.end(&res)
	if uniqueId == nil {
		return k.fail(resInvalidArgument, "uniqueId is NULL")
	}
	id, err := comm.NewUniqueID()
	if err != nil {
		return k.fail(resSystemError, "%v", err)
	}
	s := id.String()
	if len(s) >= len(uniqueId.internal) {
		return k.fail(resInvalidArgument, "the id %q does not fit in %d bytes (shorten OCCL_SOCKET_ADDR)", s, len(uniqueId.internal))
	}
	for i := range uniqueId.internal {
		uniqueId.internal[i] = 0
	}
	for i := 0; i < len(s); i++ {
		uniqueId.internal[i] = C.char(s[i])
	}
	return resSuccess
}

// uniqueID decodes the text form an occlUniqueId holds.
func (k *call) uniqueID(id *C.occlUniqueId) (comm.UniqueID, C.occlResult_t) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&id.internal[0])), len(id.internal))
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	if n == len(b) {
		return comm.UniqueID{}, k.fail(resInvalidArgument, "commId is not NUL-terminated (not made by occlGetUniqueId?)")
	}
	u, err := comm.ParseUniqueID(string(b[:n]))
	if err != nil {
		return comm.UniqueID{}, k.fail(resInvalidArgument, "commId: %v", err)
	}
	return u, resSuccess
}

// occlGetErrorString returns a static description of a result code. See occl.h.
//
//export occlGetErrorString
func occlGetErrorString(result C.occlResult_t) (s C.occlInternalConstStr) {
	defer func() {
		if recover() != nil {
			s = C.occlInternalConstStr(C.occlInternalResultString(C.int(resInternalError)))
		}
	}()
	return C.occlInternalConstStr(C.occlInternalResultString(C.int(result)))
}

// occlGetLastError returns the message of the last failure on comm, or of the calling thread's last failed call. See occl.h.
//
//export occlGetLastError
func occlGetLastError(comm C.occlComm_t) (s C.occlInternalConstStr) {
	commH := handle(comm) // first: see handle
	defer func() {
		if recover() != nil {
			s = C.occlInternalConstStr(C.occlInternalResultString(C.int(resInternalError)))
		}
	}()
	if commH != 0 {
		if ce := lookupComm(commH); ce != nil {
			ce.mu.Lock()
			msg := ce.lastErr
			ce.mu.Unlock()
			if c := ce.c.Load(); msg == "" && c != nil && c.Err() != nil {
				msg = "occlCommGetAsyncError: " + c.Err().Error()
			}
			if msg != "" {
				return C.occlInternalConstStr(C.occlInternalReturnError((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg))))
			}
		}
	}
	return C.occlInternalConstStr(C.occlInternalThreadError())
}

// create makes a communicator with mk, or reserves its handle and defers mk
// to occlGroupEnd if the calling thread has a group open. parent is the
// communicator mk runs an operation on (a split's, shrink's or grow's),
// nil if none.
func (k *call) create(out *C.occlComm_t, parent *comm.Communicator, mk maker) C.occlResult_t {
	if g := openGroup(); g != nil {
		ce, h := addComm(nil)
		if ce == nil {
			return k.fail(resSystemError, "%s", noHandles(true))
		}
		g.creates = append(g.creates, pendingCreate{name: k.name, ce: ce, parent: parent, mk: mk})
		*out = h
		return resSuccess
	}
	c, err := mk(context.Background())
	if err != nil {
		return k.failErr(err)
	}
	ce, h := addComm(c)
	if ce == nil {
		c.Abort()
		return k.fail(resSystemError, "%s", noHandles(true))
	}
	*out = h
	return resSuccess
}

// occlCommInitRank joins communicator commId as rank of nranks (deferred to occlGroupEnd inside a group). See occl.h.
//
//export occlCommInitRank
func occlCommInitRank(comm *C.occlComm_t, nranks C.int, commId C.occlUniqueId, rank C.int) (res C.occlResult_t) {
	k := begin("occlCommInitRank")
	defer k.end(&res)
	return k.initRank(comm, nranks, &commId, rank, false, nil)
}

// occlCommInitRankConfig is occlCommInitRank with options. See occl.h.
//
//export occlCommInitRankConfig
func occlCommInitRankConfig(comm *C.occlComm_t, nranks C.int, commId C.occlUniqueId, rank C.int, config C.occlInternalConstConfig) (res C.occlResult_t) {
	k := begin("occlCommInitRankConfig")
	defer k.end(&res)
	return k.initRank(comm, nranks, &commId, rank, true, config)
}

// initRank checks the arguments of occlCommInitRank (and, if configured,
// occlCommInitRankConfig's config) and creates the communicator.
func (k *call) initRank(out *C.occlComm_t, nranks C.int, commID *C.occlUniqueId, rank C.int, configured bool, config C.occlInternalConstConfig) C.occlResult_t {
	if out == nil {
		return k.fail(resInvalidArgument, "comm is NULL")
	}
	*out = nil
	if nranks < 1 {
		return k.fail(resInvalidArgument, "nranks %d is not positive", int(nranks))
	}
	// Before configOptions, which reads nranks entries of fabricRanks.
	if nranks > comm.MaxRanks {
		return k.fail(resInvalidArgument, "nranks %d is more than a communicator can have (%d)", int(nranks), comm.MaxRanks)
	}
	if rank < 0 || rank >= nranks {
		return k.fail(resInvalidArgument, "rank %d out of range [0, %d)", int(rank), int(nranks))
	}
	var opts []comm.Option
	if configured {
		var r C.occlResult_t
		if opts, r = k.configOptions(config, int(nranks)); r != resSuccess {
			return r
		}
	}
	id, r := k.uniqueID(commID)
	if r != resSuccess {
		return r
	}
	return k.create(out, nil, initRank(id, int(rank), int(nranks), opts...))
}

// The sizes of the versions of occlConfig_t: a program built against an
// older occl.h passes a smaller size, and gets the defaults of the fields
// added since.
var (
	configFirstSize    = C.size_t(unsafe.Offsetof(C.occlConfig_t{}.topology)) // size, timeoutMs, fabricRanks
	configTopologySize = C.size_t(unsafe.Offsetof(C.occlConfig_t{}.topology) + unsafe.Sizeof(C.occlConfig_t{}.topology))
)

// maxTimeoutMs is the largest occlConfig_t.timeoutMs (OCCL_MAX_TIMEOUT_MS):
// half of what a time.Duration (nanoseconds in an int64) holds, with room
// for what the runtime adds to a timeout. More would wrap in the
// conversion to a tiny or negative timeout. Larger values are rejected,
// not clamped: the header documents a positive value as that many
// milliseconds, and one above 146 years is a mistake (another unit, an
// unsigned value gone negative and back, an uninitialized field) that
// clamping would hide; a program that wants no timeout passes the maximum.
const maxTimeoutMs = C.OCCL_MAX_TIMEOUT_MS

// Twice the maximum fits in a time.Duration: a compile error otherwise.
const _ = 2 * time.Duration(maxTimeoutMs) * time.Millisecond

// configOptions checks an occlConfig_t and turns it into options. nranks
// is the size of the communicator fabricRanks describes, 0 if the call
// takes no fabricRanks (a grow or a join).
func (k *call) configOptions(config C.occlInternalConstConfig, nranks int) ([]comm.Option, C.occlResult_t) {
	if config == nil {
		return nil, k.fail(resInvalidArgument, "config is NULL (use OCCL_CONFIG_INITIALIZER)")
	}
	if config.size < configFirstSize {
		return nil, k.fail(resInvalidArgument, "config.size %d is smaller than occlConfig_t (%d bytes): start from OCCL_CONFIG_INITIALIZER",
			int(config.size), int(unsafe.Sizeof(*config)))
	}
	var opts []comm.Option
	if config.timeoutMs < 0 {
		return nil, k.fail(resInvalidArgument, "config.timeoutMs %d is negative", int64(config.timeoutMs))
	}
	if config.timeoutMs > maxTimeoutMs {
		return nil, k.fail(resInvalidArgument, "config.timeoutMs %d is more than the maximum, OCCL_MAX_TIMEOUT_MS (%d, about 146 years)",
			int64(config.timeoutMs), int64(maxTimeoutMs))
	}
	if config.timeoutMs > 0 {
		opts = append(opts, comm.WithTimeout(time.Duration(config.timeoutMs)*time.Millisecond))
	}
	if config.fabricRanks != nil && nranks == 0 {
		return nil, k.fail(resInvalidArgument, "config.fabricRanks must be NULL for %s", k.name)
	}
	if config.fabricRanks != nil {
		fr := unsafe.Slice((*C.int)(config.fabricRanks), nranks)
		ranks := make([]int, len(fr))
		for i, f := range fr {
			ranks[i] = int(f)
		}
		opts = append(opts, comm.WithFabricRanks(ranks))
	}
	if config.size >= configTopologySize && config.topology != nil {
		t, err := parseTopology(C.GoString(config.topology))
		if err != nil {
			return nil, k.fail(resInvalidArgument, "config.topology: %v", err)
		}
		opts = append(opts, comm.WithTopology(t))
	}
	return opts, resSuccess
}

// parseTopology reads a topology given as OCCL_TOPO takes it (a spec such
// as hosts=2x2,nics=host, or the path of a topology file) or as the
// topology itself in occl's JSON format.
func parseTopology(s string) (*topo.Topology, error) {
	if strings.HasPrefix(strings.TrimSpace(s), "{") {
		return topo.Parse([]byte(s))
	}
	return topo.FromSpec(s)
}

// maker creates a communicator. Functions return them because the
// exported functions' parameters, named as in occl.h, shadow package comm.
type maker = func(ctx context.Context) (*comm.Communicator, error)

// initRank returns the maker of comm.Init.
func initRank(id comm.UniqueID, rank, size int, opts ...comm.Option) maker {
	return func(ctx context.Context) (*comm.Communicator, error) { return comm.Init(ctx, id, rank, size, opts...) }
}

// splitter returns the maker of c.Split.
func splitter(c *comm.Communicator, color, key int) maker {
	return func(ctx context.Context) (*comm.Communicator, error) { return c.Split(ctx, color, key) }
}

// occlCommInitFromEnv joins the communicator of the job the launcher's environment describes. See occl.h.
//
//export occlCommInitFromEnv
func occlCommInitFromEnv(comm *C.occlComm_t) (res C.occlResult_t) {
	k := begin("occlCommInitFromEnv")
	defer k.end(&res)
	if comm == nil {
		return k.fail(resInvalidArgument, "comm is NULL")
	}
	*comm = nil
	if r := k.detectLaunch(); r != resSuccess {
		return r
	}
	return k.create(comm, nil, initFromEnv)
}

// detectLaunch checks that the environment describes a job.
func (k *call) detectLaunch() C.occlResult_t {
	if _, err := comm.DetectLaunch(); err != nil {
		return k.fail(resInvalidUsage, "%v", err)
	}
	return resSuccess
}

// initFromEnv is the maker of comm.InitFromEnv.
func initFromEnv(ctx context.Context) (*comm.Communicator, error) { return comm.InitFromEnv(ctx) }

// occlCommDestroy waits for comm's issued operations, leaves cleanly and frees comm. See occl.h.
//
//export occlCommDestroy
func occlCommDestroy(comm C.occlComm_t) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommDestroy")
	defer k.end(&res)
	return k.free(commH, false)
}

// occlCommAbort fails comm on every rank at once and frees it. See occl.h.
//
//export occlCommAbort
func occlCommAbort(comm C.occlComm_t) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommAbort")
	defer k.end(&res)
	return k.free(commH, true)
}

// free forgets the communicator h and aborts it, or closes it (at
// occlGroupEnd if the calling thread has a group open).
func (k *call) free(h uintptr, abort bool) C.occlResult_t {
	ce, c, r := k.comm(h)
	if r != resSuccess {
		return r
	}
	removeComm(ce)
	if abort {
		c.Abort()
		return resSuccess
	}
	if g := openGroup(); g != nil {
		g.destroys = append(g.destroys, c)
		return resSuccess
	}
	return k.failErr(c.Close())
}

// occlCommSplit creates the communicator of the ranks of comm passing the same color, ranked by key. See occl.h.
//
//export occlCommSplit
func occlCommSplit(comm C.occlComm_t, color, key C.int, newcomm *C.occlComm_t) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommSplit")
	defer k.end(&res)
	c, r := k.parent(commH, newcomm)
	if r != resSuccess {
		return r
	}
	if color < C.OCCL_SPLIT_NOCOLOR {
		return k.fail(resInvalidArgument, "color %d is negative (and not OCCL_SPLIT_NOCOLOR)", int(color))
	}
	split := splitter(c, int(color), int(key))
	if color == C.OCCL_SPLIT_NOCOLOR {
		// No new communicator, but the call takes part in the split.
		if g := openGroup(); g != nil {
			g.creates = append(g.creates, pendingCreate{name: k.name, parent: c, mk: split})
			return resSuccess
		}
		_, err := split(context.Background())
		return k.failErr(err)
	}
	return k.create(newcomm, c, split)
}

// occlCommShrink replaces comm by a communicator of its survivors, without the excluded ranks. See occl.h.
//
//export occlCommShrink
func occlCommShrink(comm C.occlComm_t, excludeRanks C.occlInternalConstInts, excludeCount C.int, newcomm *C.occlComm_t) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommShrink")
	defer k.end(&res)
	c, r := k.parent(commH, newcomm)
	if r != resSuccess {
		return r
	}
	if excludeCount < 0 || excludeCount > C.int(c.Size()) {
		return k.fail(resInvalidArgument, "excludeCount %d out of range [0, %d]", int(excludeCount), c.Size())
	}
	if excludeCount > 0 && excludeRanks == nil {
		return k.fail(resInvalidArgument, "excludeRanks is NULL with excludeCount %d", int(excludeCount))
	}
	var exclude []int
	if excludeCount > 0 {
		for _, x := range unsafe.Slice((*C.int)(unsafe.Pointer(excludeRanks)), int(excludeCount)) {
			exclude = append(exclude, int(x))
		}
	}
	return k.create(newcomm, c, shrinker(c, exclude))
}

// shrinker returns the maker of c.Shrink.
func shrinker(c *comm.Communicator, exclude []int) maker {
	return func(ctx context.Context) (*comm.Communicator, error) { return c.Shrink(ctx, exclude) }
}

// occlCommGrow creates the communicator of comm's ranks and njoin processes that call occlJoin. See occl.h.
//
//export occlCommGrow
func occlCommGrow(comm C.occlComm_t, growId C.occlUniqueId, njoin C.int, newcomm *C.occlComm_t) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommGrow")
	defer k.end(&res)
	return k.grow(commH, &growId, njoin, newcomm, false, nil)
}

// occlCommGrowConfig is occlCommGrow with options for the grown communicator (its topology). See occl.h.
//
//export occlCommGrowConfig
func occlCommGrowConfig(comm C.occlComm_t, growId C.occlUniqueId, njoin C.int, newcomm *C.occlComm_t, config C.occlInternalConstConfig) (res C.occlResult_t) {
	commH := handle(comm) // first: see handle
	k := begin("occlCommGrowConfig")
	defer k.end(&res)
	return k.grow(commH, &growId, njoin, newcomm, true, config)
}

// grow checks the arguments of occlCommGrow (and, if configured,
// occlCommGrowConfig's config) and creates the grown communicator.
func (k *call) grow(commH uintptr, growID *C.occlUniqueId, njoin C.int, newcomm *C.occlComm_t, configured bool, config C.occlInternalConstConfig) C.occlResult_t {
	c, r := k.parent(commH, newcomm)
	if r != resSuccess {
		return r
	}
	if njoin < 1 {
		return k.fail(resInvalidArgument, "njoin %d is not positive", int(njoin))
	}
	var opts []comm.Option
	if configured {
		if opts, r = k.configOptions(config, 0); r != resSuccess {
			return r
		}
	}
	id, r := k.uniqueID(growID)
	if r != resSuccess {
		return r
	}
	return k.create(newcomm, c, grower(c, id, int(njoin), opts...))
}

// occlJoin joins, as a new rank, the communicator that the ranks of a running one create with occlCommGrow. See occl.h.
//
//export occlJoin
func occlJoin(comm *C.occlComm_t, growId C.occlUniqueId) (res C.occlResult_t) {
	k := begin("occlJoin")
	defer k.end(&res)
	return k.join(comm, &growId, false, nil)
}

// occlJoinConfig is occlJoin with options (the grown communicator's topology). See occl.h.
//
//export occlJoinConfig
func occlJoinConfig(comm *C.occlComm_t, growId C.occlUniqueId, config C.occlInternalConstConfig) (res C.occlResult_t) {
	k := begin("occlJoinConfig")
	defer k.end(&res)
	return k.join(comm, &growId, true, config)
}

// join checks the arguments of occlJoin (and, if configured,
// occlJoinConfig's config) and joins.
func (k *call) join(out *C.occlComm_t, growID *C.occlUniqueId, configured bool, config C.occlInternalConstConfig) C.occlResult_t {
	if out == nil {
		return k.fail(resInvalidArgument, "comm is NULL")
	}
	*out = nil
	var opts []comm.Option
	if configured {
		var r C.occlResult_t
		if opts, r = k.configOptions(config, 0); r != resSuccess {
			return r
		}
	}
	id, r := k.uniqueID(growID)
	if r != resSuccess {
		return r
	}
	return k.create(out, nil, joiner(id, opts...))
}

// grower returns the maker of c.Grow.
func grower(c *comm.Communicator, id comm.UniqueID, n int, opts ...comm.Option) maker {
	return func(ctx context.Context) (*comm.Communicator, error) { return c.Grow(ctx, id, n, opts...) }
}

// joiner returns the maker of comm.Join.
func joiner(id comm.UniqueID, opts ...comm.Option) maker {
	return func(ctx context.Context) (*comm.Communicator, error) { return comm.Join(ctx, id, opts...) }
}

// query is a call that stores a property of a communicator in *out (what
// its occl.h parameter is called): it checks out, then the communicator,
// and stores get's answer.
func query[T any](name string, h uintptr, what string, out *T, get func(k *call, c *comm.Communicator) T) (res C.occlResult_t) {
	k := begin(name)
	defer k.end(&res)
	if out == nil {
		return k.fail(resInvalidArgument, "%s is NULL", what)
	}
	_, c, r := k.comm(h)
	if r != resSuccess {
		return r
	}
	*out = get(k, c)
	return resSuccess
}

// occlCommCount stores the number of ranks of comm in *count. See occl.h.
//
//export occlCommCount
func occlCommCount(comm C.occlComm_t, count *C.int) C.occlResult_t {
	return query("occlCommCount", handle(comm), "count", count, commSize) // arguments first: see handle
}

// occlCommUserRank stores this process's rank in comm in *rank. See occl.h.
//
//export occlCommUserRank
func occlCommUserRank(comm C.occlComm_t, rank *C.int) C.occlResult_t {
	return query("occlCommUserRank", handle(comm), "rank", rank, commRank) // arguments first: see handle
}

// occlCommGetAsyncError stores occlSuccess or the code of the failure that failed comm in *asyncError. See occl.h.
//
//export occlCommGetAsyncError
func occlCommGetAsyncError(comm C.occlComm_t, asyncError *C.occlResult_t) C.occlResult_t {
	return query("occlCommGetAsyncError", handle(comm), "asyncError", asyncError, commError) // arguments first: see handle
}

func commSize(_ *call, c *comm.Communicator) C.int { return C.int(c.Size()) }

func commRank(_ *call, c *comm.Communicator) C.int { return C.int(c.Rank()) }

// commError is the result code of c's failure, which it records as the
// call's last error.
func commError(k *call, c *comm.Communicator) C.occlResult_t {
	err := c.Err()
	if err != nil {
		k.record(k.name + ": " + err.Error())
	}
	return resultOf(err)
}
