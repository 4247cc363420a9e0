"""occl for Python: a ctypes binding of liboccl's C ABI (cgo/include/occl.h).

Buffers are NumPy arrays or PyTorch CPU tensors, used in place without
copying: the library reads and writes their memory through
``array.ctypes.data`` / ``tensor.data_ptr()``. They must be C-contiguous, of a
supported element type, and writable where results land.

    import occl
    with occl.Communicator.init_from_env() as comm:   # under occl's launcher,
        comm.all_reduce(grads, op="avg")              # torchrun, mpirun, srun
        work = comm.all_reduce(buf, async_op=True)
        ...                                           # compute meanwhile
        work.wait()

The library is ``$OCCL_LIB`` (the .so itself or its directory), else the
``liboccl.so`` that ``pip install`` built into this package.
``import occl.torch`` registers occl as a torch.distributed backend.

Failures raise :class:`OcclError`, whose message is occlGetLastError's. Blocking
calls release the GIL while they wait. Non-blocking calls (``async_op=True``)
return a :class:`Work` that keeps the buffers alive until it completes, as the
C ABI requires; a Work dropped without ``wait()`` waits when it is collected.
"""

import contextlib
import ctypes
import json
import os
import sys
import threading
import weakref

__all__ = [
    "OcclError",
    "Communicator",
    "Work",
    "UniqueId",
    "get_unique_id",
    "group",
    "version",
    "library",
    "library_path",
    "plan_circuits",
    "empty",
    "mem_alloc",
]

# Result codes, data types and reductions of occl.h.
SUCCESS = 0
_RESULTS = {
    0: "occlSuccess",
    2: "occlSystemError",
    3: "occlInternalError",
    4: "occlInvalidArgument",
    5: "occlInvalidUsage",
    6: "occlRemoteError",
    7: "occlInProgress",
    8: "occlTimeout",
}
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = range(10)
_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
_DTYPE_NAMES = {
    "int8": INT8,
    "uint8": UINT8,
    "int32": INT32,
    "uint32": UINT32,
    "int64": INT64,
    "uint64": UINT64,
    "float16": FLOAT16,
    "float32": FLOAT32,
    "float64": FLOAT64,
    "bfloat16": BFLOAT16,
}
SPLIT_NOCOLOR = -1
UNIQUE_ID_BYTES = 256


class OcclError(RuntimeError):
    """A failed occl call: ``code`` is the occlResult_t, ``name`` its name."""

    def __init__(self, code, message):
        self.code = code
        self.name = _RESULTS.get(code, "occlResult(%d)" % code)
        super().__init__("%s: %s" % (self.name, message))


class UniqueId(ctypes.Structure):
    """occlUniqueId: the NUL-terminated text form of a communicator's id."""

    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]

    def __str__(self):
        return self.internal.decode()

    @classmethod
    def from_string(cls, s):
        uid = cls()
        b = s.encode() if isinstance(s, str) else bytes(s)
        if len(b) >= UNIQUE_ID_BYTES:
            raise ValueError("unique id too long")
        uid.internal = b
        return uid


class _Config(ctypes.Structure):
    """occlConfig_t."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("timeoutMs", ctypes.c_longlong),
        ("fabricRanks", ctypes.POINTER(ctypes.c_int)),
        ("topology", ctypes.c_char_p),
    ]


def _config(topology):
    """An occlConfig_t with topology: an OCCL_TOPO spec (such as
    "hosts=2x2,nics=host") or a topology file's path, JSON text, or a dict
    in occl's topology format (as Communicator.topology returns)."""
    c = _Config()
    c.size = ctypes.sizeof(_Config)
    if topology is not None:
        if isinstance(topology, dict):
            topology = json.dumps(topology)
        c.topology = topology.encode() if isinstance(topology, str) else bytes(topology)
    return c


_lib = None
_lib_lock = threading.Lock()
_c = ctypes.c_void_p
_sz = ctypes.c_size_t
_i = ctypes.c_int
_p_sz = ctypes.POINTER(ctypes.c_size_t)
_SIGNATURES = {
    "occlGetVersion": [ctypes.POINTER(_i)],
    "occlMemAlloc": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t],
    "occlMemFree": [ctypes.c_void_p],
    "occlGetUniqueId": [ctypes.POINTER(UniqueId)],
    "occlCommInitRank": [ctypes.POINTER(_c), _i, UniqueId, _i],
    "occlCommInitRankConfig": [ctypes.POINTER(_c), _i, UniqueId, _i, ctypes.POINTER(_Config)],
    "occlCommInitFromEnv": [ctypes.POINTER(_c)],
    "occlCommDestroy": [_c],
    "occlCommAbort": [_c],
    "occlCommSplit": [_c, _i, _i, ctypes.POINTER(_c)],
    "occlCommShrink": [_c, ctypes.POINTER(_i), _i, ctypes.POINTER(_c)],
    "occlCommGrow": [_c, UniqueId, _i, ctypes.POINTER(_c)],
    "occlCommGrowConfig": [_c, UniqueId, _i, ctypes.POINTER(_c), ctypes.POINTER(_Config)],
    "occlJoin": [ctypes.POINTER(_c), UniqueId],
    "occlJoinConfig": [ctypes.POINTER(_c), UniqueId, ctypes.POINTER(_Config)],
    "occlCommCount": [_c, ctypes.POINTER(_i)],
    "occlCommUserRank": [_c, ctypes.POINTER(_i)],
    "occlCommGetAsyncError": [_c, ctypes.POINTER(_i)],
    "occlAllReduce": [_c, _c, _sz, _i, _i, _c],
    "occlBroadcast": [_c, _c, _sz, _i, _i, _c],
    "occlReduce": [_c, _c, _sz, _i, _i, _i, _c],
    "occlAllGather": [_c, _c, _sz, _i, _c],
    "occlReduceScatter": [_c, _c, _sz, _i, _i, _c],
    "occlAllToAll": [_c, _c, _sz, _i, _c],
    "occlAllToAllv": [_c, _p_sz, _p_sz, _c, _p_sz, _p_sz, _i, _c],
    "occlGather": [_c, _c, _sz, _i, _i, _c],
    "occlScatter": [_c, _c, _sz, _i, _i, _c],
    "occlBarrier": [_c],
    "occlSend": [_c, _sz, _i, _i, _c],
    "occlRecv": [_c, _sz, _i, _i, _c],
    "occlGroupStart": [],
    "occlGroupEnd": [],
    "occlAllReduceAsync": [_c, _c, _sz, _i, _i, _c, ctypes.POINTER(_c)],
    "occlBroadcastAsync": [_c, _c, _sz, _i, _i, _c, ctypes.POINTER(_c)],
    "occlAllGatherAsync": [_c, _c, _sz, _i, _c, ctypes.POINTER(_c)],
    "occlReduceScatterAsync": [_c, _c, _sz, _i, _i, _c, ctypes.POINTER(_c)],
    "occlAllToAllAsync": [_c, _c, _sz, _i, _c, ctypes.POINTER(_c)],
    "occlBarrierAsync": [_c, ctypes.POINTER(_c)],
    "occlWait": [_c],
    "occlTest": [_c, ctypes.POINTER(_i)],
    "occlRequestFree": [_c],
    "occlRequestOverlap": [_c],
    "occlCommReconfigure": [_c, ctypes.c_char_p],
    "occlCommReconfigureMany": [ctypes.POINTER(_c), _i, ctypes.c_char_p],
    "occlCommSetTrafficTag": [_c, ctypes.c_char_p],
    "occlCommTrafficMatrix": [_c, ctypes.c_char_p, ctypes.c_char_p, _sz, _p_sz],
    "occlCommTopology": [_c, ctypes.c_char_p, _sz, _p_sz],
    "occlCommFlightRecord": [_c, ctypes.c_char_p, _sz, _p_sz],
    "occlPlanCircuits": [ctypes.c_char_p, ctypes.POINTER(ctypes.c_double), _i, ctypes.c_char_p, _sz, _p_sz],
}


def library_path():
    """The path of the liboccl.so this package uses: $OCCL_LIB (the file or
    its directory), else the one built into the package."""
    path = os.environ.get("OCCL_LIB")
    if path and os.path.isdir(path):
        path = os.path.join(path, "liboccl.so")
    if not path:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "liboccl.so")
    if not os.path.exists(path):
        raise OSError(
            "liboccl.so not found at %s: install the package with "
            "'pip install --no-build-isolation ./cgo/python' (needs Go and gcc), or build it with "
            "'go build -buildmode=c-shared -o build/liboccl.so ./cgo' and set OCCL_LIB" % path
        )
    return path


def library():
    """Loads liboccl.so once (see library_path) and returns it."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = library_path()
        lib = ctypes.CDLL(path)
        for name, args in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = _i
        lib.occlGetErrorString.argtypes = [_i]
        lib.occlGetErrorString.restype = ctypes.c_char_p
        lib.occlGetLastError.argtypes = [_c]
        lib.occlGetLastError.restype = ctypes.c_char_p
        _lib = lib
        return lib


def _check(code, comm=None):
    if code != SUCCESS:
        lib = library()
        msg = lib.occlGetLastError(comm) or lib.occlGetErrorString(code)
        raise OcclError(code, msg.decode(errors="replace"))


def version():
    """The library's OCCL_VERSION_CODE (major*10000 + minor*100 + patch)."""
    v = _i()
    _check(library().occlGetVersion(ctypes.byref(v)))
    return v.value


def get_unique_id():
    """A fresh id for Communicator.init_rank; make it on rank 0, pass
    str(id) to the other ranks."""
    uid = UniqueId()
    _check(library().occlGetUniqueId(ctypes.byref(uid)))
    return uid


def _json_out(call, what, comm=None):
    """Runs call(buf, size, needed) of a function that writes JSON, growing
    the buffer if it was too small (with some slack: a flight record can grow
    between two calls), and returns the decoded JSON."""
    needed = ctypes.c_size_t(0)
    size = 1 << 16
    for _ in range(3):
        buf = ctypes.create_string_buffer(size)
        code = call(buf, size, ctypes.byref(needed))
        if code == 4 and needed.value > size:
            size = needed.value + 4096
            continue
        _check(code, comm)
        return json.loads(buf.value.decode())
    raise OcclError(3, "%s: the buffer size changed between calls" % what)


def plan_circuits(topology, demand):
    """Places circuits on topology's free OCS ports for demand (n x n bytes
    rank i sends rank j, e.g. a traffic matrix's "ranks") and returns the
    new topology as a dict, for Communicator.reconfigure. topology is a dict
    or JSON text in occl's topology format."""
    if not isinstance(topology, (str, bytes)):
        topology = json.dumps(topology)
    if isinstance(topology, str):
        topology = topology.encode()
    n = len(demand)
    if any(len(row) != n for row in demand):
        raise ValueError("occl: demand must be a square matrix, got %d rows of lengths %s" % (n, [len(r) for r in demand]))
    flat = (ctypes.c_double * (n * n))(*[float(b) for row in demand for b in row])
    lib = library()
    return _json_out(lambda buf, size, needed: lib.occlPlanCircuits(topology, flat, n, buf, size, needed), "plan_circuits")


# ---- Buffers --------------------------------------------------------------


def mem_alloc(nbytes):
    """nbytes (at least 1) of zeroed memory from occlMemAlloc, as a ctypes
    byte array: from 64 KiB shared memory, which the peer processes on the
    host map once and copy blocks out of with memcpy, from 2 MiB advised
    for transparent huge pages; both make large transfers between
    processes faster (see occl.h). It supports the buffer protocol, so numpy.frombuffer and
    torch.frombuffer view it without a copy; the memory goes back to
    occlMemFree when the array and every view of it are gone."""
    if nbytes < 1:
        raise ValueError("occl: mem_alloc of %d bytes: the size must be at least 1" % nbytes)
    p = ctypes.c_void_p()
    lib = library()
    _check(lib.occlMemAlloc(ctypes.byref(p), nbytes))
    mem = (ctypes.c_ubyte * nbytes).from_address(p.value)
    weakref.finalize(mem, lib.occlMemFree, p.value)
    return mem


def empty(shape, dtype="float32"):
    """A NumPy array of shape and dtype on memory of mem_alloc (zeroed): use
    it for large send and receive buffers. occl.torch.empty makes tensors."""
    np = __import__("numpy")
    dt = np.dtype(dtype)
    _numpy_dtype(dt)
    count = 1
    for d in (shape if isinstance(shape, (tuple, list)) else (shape,)):
        count *= int(d)
    if count * dt.itemsize == 0:
        return np.zeros(shape, dt)
    return np.frombuffer(mem_alloc(count * dt.itemsize), dtype=dt).reshape(shape)


def _numpy_dtype(dt):
    name = dt.name
    if dt.byteorder not in ("=", "|", "<" if sys.byteorder == "little" else ">"):
        raise TypeError("occl: byte-swapped arrays are not supported (%s)" % dt)
    if name in _DTYPE_NAMES:
        return _DTYPE_NAMES[name]
    raise TypeError("occl: unsupported NumPy dtype %s" % dt)


def _torch_dtypes():
    torch = sys.modules["torch"]
    table = {
        torch.int8: INT8,
        torch.uint8: UINT8,
        torch.int32: INT32,
        torch.int64: INT64,
        torch.float16: FLOAT16,
        torch.bfloat16: BFLOAT16,
        torch.float32: FLOAT32,
        torch.float64: FLOAT64,
    }
    for name, code in (("uint32", UINT32), ("uint64", UINT64)):  # torch >= 2.3
        if hasattr(torch, name):
            table[getattr(torch, name)] = code
    return table


class _Buf:
    """A view of an array's or tensor's memory: address, elements, dtype.
    It keeps the object alive while it is in use."""

    __slots__ = ("obj", "ptr", "count", "dtype")

    def __init__(self, obj, writable, what):
        self.obj = obj
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            if obj.device.type != "cpu":
                raise ValueError("occl: %s is on %s; only CPU tensors are supported" % (what, obj.device))
            if not obj.is_contiguous():
                raise ValueError("occl: %s is not contiguous (call .contiguous())" % what)
            if obj.is_sparse or obj.is_quantized or obj.is_complex():
                raise TypeError("occl: %s: unsupported tensor layout or type" % what)
            dt = _torch_dtypes().get(obj.dtype)
            if dt is None:
                raise TypeError("occl: %s: unsupported tensor dtype %s" % (what, obj.dtype))
            self.ptr, self.count, self.dtype = obj.data_ptr(), obj.numel(), dt
            return
        np = sys.modules.get("numpy")
        if np is not None and isinstance(obj, np.ndarray):
            if not obj.flags.c_contiguous:
                raise ValueError("occl: %s is not C-contiguous (use numpy.ascontiguousarray)" % what)
            if writable and not obj.flags.writeable:
                raise ValueError("occl: %s is read-only" % what)
            self.ptr, self.count, self.dtype = obj.ctypes.data, obj.size, _numpy_dtype(obj.dtype)
            return
        raise TypeError("occl: %s must be a numpy.ndarray or a CPU torch.Tensor, not %s" % (what, type(obj).__name__))


def _same_dtype(a, b):
    if a.dtype != b.dtype:
        raise TypeError("occl: send and receive buffers have different element types")


def _op(op):
    try:
        return _OPS[op.lower()] if isinstance(op, str) else int(op)
    except KeyError:
        raise ValueError("occl: unknown reduction %r (sum, prod, max, min, avg)" % (op,)) from None


# ---- Groups ---------------------------------------------------------------

_tls = threading.local()


@contextlib.contextmanager
def group():
    """Groups the calls of this thread like occlGroupStart / occlGroupEnd:
    sends and receives inside progress together; they run, and the buffers
    are released, when the outermost group exits."""
    lib = library()
    _check(lib.occlGroupStart())
    keep = getattr(_tls, "keep", None)
    outer = keep is None
    if outer:
        _tls.keep = []
    try:
        yield
    finally:
        if outer:
            kept, _tls.keep = _tls.keep, None
        code = lib.occlGroupEnd()
        if outer:
            del kept
    _check(code)


def _kept(*bufs):
    """Keeps buffers alive until the thread's group ends (no-op outside)."""
    keep = getattr(_tls, "keep", None)
    if keep is not None:
        keep.extend(bufs)


# ---- Requests ---------------------------------------------------------------


class Work:
    """A non-blocking operation: wait() for it, or poll is_completed(). It
    holds the buffers until the operation has completed."""

    def __init__(self, comm, req, bufs):
        self._comm = comm
        self._req = req
        self._bufs = bufs

    def is_completed(self):
        if self._req is None:
            return True
        done = _i()
        code = library().occlTest(self._req, ctypes.byref(done))
        if done.value:
            self._req = None
            self._bufs = None
        _check(code, self._comm)
        return bool(done.value)

    def overlap(self):
        """Tells occl that the caller computes until it waits: the
        operation's waits on shared memory and TCP then leave the cores to
        that computation instead of polling (see occlRequestOverlap)."""
        if self._req is None:
            return
        _check(library().occlRequestOverlap(self._req), self._comm)

    def wait(self):
        if self._req is None:
            return
        req, self._req = self._req, None
        code = library().occlWait(req)
        self._bufs = None
        _check(code, self._comm)

    def __del__(self):
        # The operation may still use the buffers: wait rather than free them.
        if getattr(self, "_req", None) is not None and _lib is not None:
            try:
                _lib.occlWait(self._req)
            except Exception:
                pass
            self._req = None


# ---- Communicators ----------------------------------------------------------


class Communicator:
    """One rank's handle on a group of ranks (occlComm_t)."""

    def __init__(self, handle, owned=True):
        self._h = ctypes.c_void_p(handle)
        self._owned = owned
        self._lib = library()
        n, r = _i(), _i()
        _check(self._lib.occlCommCount(self._h, ctypes.byref(n)), self._h)
        _check(self._lib.occlCommUserRank(self._h, ctypes.byref(r)), self._h)
        self.size, self.rank = n.value, r.value

    @classmethod
    def init_from_env(cls):
        """Joins the job's communicator: occl's launcher, torchrun, mpirun,
        srun (occlCommInitFromEnv)."""
        h = ctypes.c_void_p()
        _check(library().occlCommInitFromEnv(ctypes.byref(h)))
        return cls(h.value)

    @classmethod
    def init_rank(cls, nranks, unique_id, rank, topology=None):
        """Joins the communicator unique_id (a UniqueId or its string) as
        rank of nranks (occlCommInitRank). topology, if given, is its
        topology instead of OCCL_TOPO's: a spec such as "hosts=2x2", a
        topology file's path, JSON text or a dict in occl's topology format
        (occlCommInitRankConfig)."""
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId.from_string(unique_id)
        h = ctypes.c_void_p()
        if topology is None:
            _check(library().occlCommInitRank(ctypes.byref(h), int(nranks), unique_id, int(rank)))
        else:
            config = _config(topology)
            _check(library().occlCommInitRankConfig(ctypes.byref(h), int(nranks), unique_id, int(rank), ctypes.byref(config)))
        return cls(h.value)

    @classmethod
    def join(cls, unique_id, topology=None):
        """Joins, as a new rank, the communicator the ranks of a running one
        make with grow(unique_id, njoin) (occlJoin): rank and size come from
        rank 0, the joiners taking the ranks after the members' in the order
        they arrive. It may be called before the members call grow.
        topology, if the members grow with one, must be the same: the grown
        communicator's (occlJoinConfig; forms as for init_rank)."""
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId.from_string(unique_id)
        h = ctypes.c_void_p()
        if topology is None:
            _check(library().occlJoin(ctypes.byref(h), unique_id))
        else:
            config = _config(topology)
            _check(library().occlJoinConfig(ctypes.byref(h), unique_id, ctypes.byref(config)))
        return cls(h.value)

    # -- life

    def _handle(self):
        if self._h is None:
            raise OcclError(4, "communicator destroyed")
        return self._h

    def destroy(self):
        """Waits for issued operations and frees the communicator."""
        if not self._owned:
            raise OcclError(5, "this communicator belongs to a torch.distributed group: destroy the group")
        if self._h is not None:
            h, self._h = self._h, None
            _check(self._lib.occlCommDestroy(h))

    def abort(self):
        """Fails the communicator on every rank at once and frees it."""
        if not self._owned:
            raise OcclError(5, "this communicator belongs to a torch.distributed group: destroy the group")
        if self._h is not None:
            h, self._h = self._h, None
            _check(self._lib.occlCommAbort(h))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.destroy()
        else:
            self.abort()
        return False

    def async_error(self):
        """None while healthy, else the OcclError that failed the communicator."""
        e = _i()
        h = self._handle()
        _check(self._lib.occlCommGetAsyncError(h, ctypes.byref(e)), h)
        if e.value == SUCCESS:
            return None
        return OcclError(e.value, (self._lib.occlGetLastError(h) or b"").decode(errors="replace"))

    def split(self, color, key=None):
        """A sub-communicator of the ranks passing the same color, ranked by
        key (default: this rank); None for color None or SPLIT_NOCOLOR."""
        h = self._handle()
        out = ctypes.c_void_p()
        color = SPLIT_NOCOLOR if color is None else int(color)
        _check(self._lib.occlCommSplit(h, color, self.rank if key is None else int(key), ctypes.byref(out)), h)
        return None if not out.value else Communicator(out.value)

    def shrink(self, exclude=()):
        """A communicator of the survivors, without the failed ranks and the
        ranks in exclude (occlCommShrink). Every rank that is alive and not
        in exclude calls it, after an operation raised (or to drop ranks on
        purpose); its ranks are the survivors in their order here. This
        communicator runs no more operations: destroy it. A rank the others
        excluded gets an OcclError (occlRemoteError)."""
        if not self._owned:
            raise OcclError(5, "this communicator belongs to a torch.distributed group: destroy the group")
        h = self._handle()
        ex = [int(r) for r in exclude]
        out = ctypes.c_void_p()
        _check(self._lib.occlCommShrink(h, (_i * len(ex))(*ex) if ex else None, len(ex), ctypes.byref(out)), h)
        return Communicator(out.value)

    def grow(self, unique_id, njoin, topology=None):
        """A communicator of this one's ranks (keeping their ranks) and njoin
        processes that call Communicator.join(unique_id) (occlCommGrow).
        Collective: every rank calls it with the same unique_id, made on rank
        0's host (get_unique_id) and handed to the joiners. This communicator
        stays usable. Raises OcclError (occlSystemError) on every member,
        saying how many joiners came, if they do not all arrive before the
        timeout; this communicator then keeps working. A communicator with a
        topology grows only given the grown one, of size + njoin ranks in
        which the members keep their places (occlCommGrowConfig; forms as
        for init_rank); the joiners pass the same to join."""
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId.from_string(unique_id)
        h = self._handle()
        out = ctypes.c_void_p()
        if topology is None:
            _check(self._lib.occlCommGrow(h, unique_id, int(njoin), ctypes.byref(out)), h)
        else:
            config = _config(topology)
            _check(self._lib.occlCommGrowConfig(h, unique_id, int(njoin), ctypes.byref(out), ctypes.byref(config)), h)
        return Communicator(out.value)

    # -- helpers

    def _call(self, fn, *args, bufs=(), async_op=False, asyncfn=None):
        h = self._handle()
        if async_op:
            req = ctypes.c_void_p()
            _check(asyncfn(*args, h, ctypes.byref(req)), h)
            return Work(h, req, bufs)
        _kept(*bufs)
        _check(fn(*args, h), h)
        return None

    # -- collectives (in place when out is None)

    def all_reduce(self, tensor, out=None, op="sum", async_op=False):
        """Reduces tensor across ranks with op (sum, prod, max, min, avg) into
        out, or in place. Returns out (or a Work if async_op)."""
        s = _Buf(tensor, out is None, "tensor")
        r = _Buf(out, True, "out") if out is not None else s
        _same_dtype(s, r)
        if s.count != r.count:
            raise ValueError("occl: all_reduce of %d elements into %d" % (s.count, r.count))
        w = self._call(self._lib.occlAllReduce, s.ptr, r.ptr, s.count, s.dtype, _op(op),
                       bufs=(s, r), async_op=async_op, asyncfn=self._lib.occlAllReduceAsync)
        return w if async_op else r.obj

    def broadcast(self, tensor, root=0, async_op=False):
        """Copies root's tensor into tensor on every rank."""
        b = _Buf(tensor, True, "tensor")
        w = self._call(self._lib.occlBroadcast, b.ptr, b.ptr, b.count, b.dtype, int(root),
                       bufs=(b,), async_op=async_op, asyncfn=self._lib.occlBroadcastAsync)
        return w if async_op else tensor

    def reduce(self, tensor, out=None, op="sum", root=0):
        """Reduces tensor across ranks into out (or tensor) on root."""
        s = _Buf(tensor, out is None, "tensor")
        r = _Buf(out, True, "out") if out is not None else s
        _same_dtype(s, r)
        self._call(self._lib.occlReduce, s.ptr, r.ptr, s.count, s.dtype, _op(op), int(root), bufs=(s, r))
        return r.obj

    def all_gather(self, tensor, out, async_op=False):
        """Gathers every rank's tensor into out (size * tensor elements, in
        rank order)."""
        s, r = _Buf(tensor, False, "tensor"), _Buf(out, True, "out")
        _same_dtype(s, r)
        if r.count != s.count * self.size:
            raise ValueError("occl: all_gather of %d elements needs out of %d, got %d" % (s.count, s.count * self.size, r.count))
        w = self._call(self._lib.occlAllGather, s.ptr, r.ptr, s.count, s.dtype,
                       bufs=(s, r), async_op=async_op, asyncfn=self._lib.occlAllGatherAsync)
        return w if async_op else out

    def reduce_scatter(self, tensor, out, op="sum", async_op=False):
        """Reduces tensor (size * out elements) across ranks and leaves this
        rank's block in out."""
        s, r = _Buf(tensor, False, "tensor"), _Buf(out, True, "out")
        _same_dtype(s, r)
        if s.count != r.count * self.size:
            raise ValueError("occl: reduce_scatter into %d elements needs %d, got %d" % (r.count, r.count * self.size, s.count))
        w = self._call(self._lib.occlReduceScatter, s.ptr, r.ptr, r.count, s.dtype, _op(op),
                       bufs=(s, r), async_op=async_op, asyncfn=self._lib.occlReduceScatterAsync)
        return w if async_op else out

    def all_to_all(self, tensor, out=None, async_op=False):
        """Sends block j of tensor to rank j, receives rank j's block into
        block j of out (or tensor, in place)."""
        s = _Buf(tensor, out is None, "tensor")
        r = _Buf(out, True, "out") if out is not None else s
        _same_dtype(s, r)
        if s.count != r.count or s.count % self.size:
            raise ValueError("occl: all_to_all needs equal buffers of a multiple of %d elements" % self.size)
        w = self._call(self._lib.occlAllToAll, s.ptr, r.ptr, s.count // self.size, s.dtype,
                       bufs=(s, r), async_op=async_op, asyncfn=self._lib.occlAllToAllAsync)
        return w if async_op else r.obj

    def all_to_all_v(self, tensor, send_counts, out, recv_counts):
        """Uneven all-to-all: send_counts[j] elements to rank j (packed in
        rank order), recv_counts[j] from rank j into out."""
        s, r = _Buf(tensor, False, "tensor"), _Buf(out, True, "out")
        _same_dtype(s, r)
        n = self.size
        if len(send_counts) != n or len(recv_counts) != n:
            raise ValueError("occl: all_to_all_v needs %d counts per side" % n)
        arr = ctypes.c_size_t * n
        sc, rc = arr(*send_counts), arr(*recv_counts)
        sd, rd = arr(), arr()
        for j in range(1, n):
            sd[j] = sd[j - 1] + sc[j - 1]
            rd[j] = rd[j - 1] + rc[j - 1]
        if sum(send_counts) > s.count or sum(recv_counts) > r.count:
            raise ValueError("occl: all_to_all_v counts exceed the buffers")
        self._call(self._lib.occlAllToAllv, s.ptr, sc, sd, r.ptr, rc, rd, s.dtype, bufs=(s, r))
        return out

    def barrier(self, async_op=False):
        """Returns once every rank has called it."""
        h = self._handle()
        if async_op:
            req = ctypes.c_void_p()
            _check(self._lib.occlBarrierAsync(h, ctypes.byref(req)), h)
            return Work(h, req, ())
        _check(self._lib.occlBarrier(h), h)
        return None

    def send(self, tensor, peer):
        """Sends tensor to peer (inside occl.group() to pair with recv)."""
        b = _Buf(tensor, False, "tensor")
        self._call(self._lib.occlSend, b.ptr, b.count, b.dtype, int(peer), bufs=(b,))

    def recv(self, tensor, peer):
        """Receives peer's next message into tensor."""
        b = _Buf(tensor, True, "tensor")
        self._call(self._lib.occlRecv, b.ptr, b.count, b.dtype, int(peer), bufs=(b,))
        return tensor

    # -- reconfiguration and traffic

    def reconfigure(self, topology, subcomms=()):
        """Rewires the communicator to topology (JSON text or a dict, occl's
        topology format), through the OCS controller at OCCL_OCS_ADDR if set.
        subcomms are communicators split from this one that this rank belongs
        to: they move to the new circuits with it, on their part of topology
        (collective on each)."""
        if not isinstance(topology, (str, bytes)):
            topology = json.dumps(topology)
        if isinstance(topology, str):
            topology = topology.encode()
        h = self._handle()
        if not subcomms:
            _check(self._lib.occlCommReconfigure(h, topology), h)
            return
        hs = [h] + [c._handle() for c in subcomms]
        _check(self._lib.occlCommReconfigureMany((_c * len(hs))(*hs), len(hs), topology), h)

    def set_traffic_tag(self, tag):
        """Counts later all-to-alls under tag (None: the default tag)."""
        h = self._handle()
        _check(self._lib.occlCommSetTrafficTag(h, None if tag is None else tag.encode()), h)

    def topology(self):
        """The communicator's current topology, as a dict (local)."""
        h = self._handle()
        return _json_out(lambda buf, size, needed: self._lib.occlCommTopology(h, buf, size, needed), "topology", h)

    def flight_record(self):
        """This rank's flight record (local, also on a failed communicator):
        its last operations (OCCL_FLIGHT_RECORDER of them, 256 by default),
        oldest first, then those still queued, as a list of dicts with keys
        seq, op, bytes, dtype, schedule, state ("queued", "running", "done"
        or "failed"), start, end, peer (the rank it waited on, -1 if none)
        and error."""
        h = self._handle()
        d = _json_out(lambda buf, size, needed: self._lib.occlCommFlightRecord(h, buf, size, needed), "flight_record", h)
        return d["ops"]

    def traffic_matrix(self, tag=""):
        """The all-to-all traffic of tag on every rank, as a dict (collective)."""
        h = self._handle()
        t = (tag or "").encode()
        needed = ctypes.c_size_t(0)
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            code = self._lib.occlCommTrafficMatrix(h, t, buf, size, ctypes.byref(needed))
            if code == 4 and needed.value > size:  # kept: retry locally
                size = needed.value
                continue
            _check(code, h)
            return json.loads(buf.value.decode())

    def __repr__(self):
        return "<occl.Communicator rank %d of %d>" % (self.rank, self.size)
