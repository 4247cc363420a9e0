"""occl as a torch.distributed backend.

    import occl.torch                               # registers "occl"
    torch.distributed.init_process_group("occl")    # env://, tcp://, file://

These operations of torch.distributed run on occl: all_reduce and
all_reduce_coalesced (SUM, PRODUCT, MIN, MAX, AVG), broadcast, reduce,
all_gather and all_gather_into_tensor, reduce_scatter and
reduce_scatter_tensor, all_to_all and all_to_all_single (with split
sizes), gather, scatter, barrier, send/recv/isend/irecv from a named
source and batch_isend_irecv, on CPU tensors of float16, bfloat16,
float32, float64, int8, uint8, int32 and int64 (bool where nothing is
reduced). Others raise RuntimeError: all_gather_coalesced,
monitored_barrier (Gloo's alone in torch 1.13), recv without a source,
the reductions BAND, BOR, BXOR and PREMUL_SUM, and send/recv tags.
``new_group(ranks)`` makes an occl communicator among the group's members
that knows their place on the fabric, so ``reconfigure`` can move it with
the world group. After a rank died, ``shrink(group)`` gives the survivors
a new group in place, which ``grow`` and ``join`` can extend with spare
processes.

Rank 0 of each group makes occl's unique id (a rendezvous address and a
random secret) and shares it through the store torch gives the backend, as
ProcessGroupNCCL shares ncclUniqueId. The group's ``timeout`` becomes
occl's: an operation that does not complete in time fails, as does every
later one, on every rank, with a RuntimeError naming the rank that failed.

Sends and receives outside ``batch_isend_irecv`` run in the order they are
issued, as with NCCL: two ranks that both ``send`` first to each other
wait for each other's receive; post such exchanges with
``batch_isend_irecv``, whose operations progress together. Messages
between two ranks match in the order they are posted, as NCCL's do, so
tags are not supported: a nonzero ``tag`` raises RuntimeError (in
``batch_isend_irecv``, and none of the batch is posted), where Gloo
matches by tag: tagged messages posted in different orders would
otherwise land in the wrong buffers.

A future (``work.get_future()``, DDP's communication hooks) is completed
on a thread of its own, never on one that waits for operations, so its
callbacks may issue operations and wait for their futures. The
interpreter's exit waits, up to 10 s, for those threads to finish
completing futures and releasing their callbacks and tensors (a thread
that needed the GIL once Python is finalizing would be ended midway).
``abort()`` of the process group frees the communicator at once; later
operations on it raise "occl: the process group was aborted".
"""

import atexit
import ctypes
import json
import sys
import threading
import warnings

import torch
import torch.distributed as dist

import occl
from . import _C

__all__ = ["empty", "shrink", "grow", "join", "reconfigure", "set_traffic_tag", "traffic_matrix", "topology", "plan", "communicator", "Reconfiguration"]

_C.load(occl.library_path())

# How long the interpreter's exit waits for the backend's threads to finish
# completing futures and releasing their callbacks and tensors.
_EXIT_DRAIN_SECONDS = 10.0


@atexit.register
def _drain_at_exit():
    # Registered after torch's own handlers, so it runs before them. A
    # thread of the backend that needed the GIL once the interpreter is
    # finalizing would be ended there by Python, in the middle of a
    # callback or of a destructor (which aborts the process).
    left = _C.drain(_EXIT_DRAIN_SECONDS)
    if left:
        print("occl: exiting while the backend's threads still hold %d operation(s) after %.0f s" %
              (left, _EXIT_DRAIN_SECONDS), file=sys.stderr, flush=True)


_UID_KEY = "occl/unique_id"


def empty(*size, dtype=None):
    """A CPU tensor of size (as torch.empty takes it) on memory of
    occl.mem_alloc, zeroed: from 64 KiB shared memory, which a peer process
    on the host maps once and copies blocks out of with memcpy instead of
    a process_vm_readv per block, from 2 MiB advised for transparent huge
    pages; both make large collectives between processes faster. The
    memory is not copied on write across fork. The memory goes back
    to the library when the tensor and every view of it are gone. Each call
    maps fresh memory: allocate a loop's buffers once and reuse them."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    dtype = dtype or torch.get_default_dtype()
    count = 1
    for d in size:
        count *= int(d)
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.zeros(size, dtype=dtype)
    with warnings.catch_warnings():
        # torch.frombuffer warns about buffers it cannot tell are writable.
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(occl.mem_alloc(nbytes), dtype=dtype).view(size)


def _create_process_group(*args):
    """The backend's constructor, called by torch.distributed for the world
    group and every new_group. torch 1.13 and 2.x call it either with
    (_DistributedBackendOptions, options) (extended API) or with (store,
    rank, size, timeout)."""
    if len(args) >= 1 and hasattr(args[0], "group_rank"):
        o = args[0]
        store, rank, size, timeout = o.store, o.group_rank, o.group_size, o.timeout
        global_ranks = list(o.global_ranks_in_group or [])
    else:
        store, rank, size, timeout = args[:4]
        global_ranks = []
    if rank == 0:
        uid = str(occl.get_unique_id())
        store.set(_UID_KEY, uid)
    else:
        uid = store.get(_UID_KEY).decode()
    return _C.ProcessGroupOccl(rank, size, uid, timeout, global_ranks)


def _register():
    try:
        dist.Backend.register_backend("occl", _create_process_group, extended_api=True)
    except TypeError:  # a torch without the extended API
        dist.Backend.register_backend("occl", _create_process_group)


_register()


def _group(group):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if pg is dist.GroupMember.NON_GROUP_MEMBER:
        raise ValueError("occl: this rank is not a member of the group")
    if not isinstance(pg, _C.ProcessGroupOccl):
        raise ValueError("occl: the group uses backend %r, not occl" % dist.get_backend(pg))
    return pg


def communicator(group=None):
    """The occl.Communicator of a group (the world group if None), borrowed:
    it lives as long as the group."""
    return occl.Communicator(_group(group).handle, owned=False)


def shrink(group=None, exclude=()):
    """A new process group of the survivors of group (the world group if
    None), without its failed ranks and the ranks in exclude (group ranks),
    made in place by occl's Shrink: no process restarts. Every rank of group
    that is alive and not in exclude calls it, typically after an operation
    on group raised a RuntimeError naming a dead rank; the excluded ranks do
    not. Its ranks are the survivors in their order in group (rank() and
    size() give this rank's place); group runs no more operations.

    Pass it as group= to the torch.distributed calls that take no rank:
    all_reduce, all_gather(_into_tensor), reduce_scatter(_tensor),
    all_to_all(_single), barrier, get_world_size. torch 1.13 translates
    the ranks given to the others (broadcast's src, reduce's dst, gather,
    scatter, send, recv, get_rank) through the groups new_group registered,
    which this one is not: call the group's own methods with ranks of the
    new group there, e.g. pg.broadcast(t, root).wait() or
    pg.send([t], dst, 0).wait()."""
    return _group(group).shrink([int(r) for r in exclude])


def _topology_text(topology):
    if topology is None:
        return ""
    if isinstance(topology, dict):
        return json.dumps(topology)
    return topology.decode() if isinstance(topology, bytes) else topology


def grow(unique_id, njoin, group=None, topology=None):
    """A new process group of group's ranks (the world group if None), which
    keep their ranks, and njoin processes that call join(unique_id), which
    take the ranks after them (occl's Grow): a spare takes a dead rank's
    place, e.g. in a group made by shrink. Every rank of group calls it with
    the same unique_id (occl.get_unique_id() on group's rank 0, handed to
    the joiners); group stays usable. A group with a topology (OCCL_TOPO)
    grows only given the grown one, of size() + njoin ranks in which the
    members keep their places (a dict, JSON text, a spec or a file); the
    joiners pass the same. Use the new group as shrink's (group=, or its
    own methods for calls that name a rank)."""
    return _group(group).grow(str(unique_id), int(njoin), _topology_text(topology))


def join(unique_id, topology=None):
    """Joins, as a new rank, the process group that the ranks of a running
    one make with grow(unique_id, njoin): no init_process_group is needed.
    It may be called before they grow. topology: the grown group's, as the
    members give it."""
    return _C.ProcessGroupOccl.join(str(unique_id), _topology_text(topology))


def set_traffic_tag(tag, group=None):
    """Counts the bytes of later all-to-alls on group under tag, e.g.
    "layer3/dispatch" (None: the default tag). Local: no communication."""
    communicator(group).set_traffic_tag(tag)


def traffic_matrix(group=None, tag=""):
    """The all-to-all traffic of tag on group, gathered from every rank
    (collective): a dict with "ranks" (bytes rank i sent to rank j),
    "hosts" (bytes host a sent to host b), "host" and "ops"."""
    return communicator(group).traffic_matrix(tag)


def topology(group=None):
    """The group's current topology, as a dict (local): the fabric-wide one
    for the world group."""
    return communicator(group).topology()


def plan(traffic, topology=None):
    """Circuits for a demand: topology (the world group's current one if
    None) with its circuits re-placed for traffic, a traffic_matrix result
    or an n x n list of bytes rank i sends rank j. Pass the result to
    reconfigure. Pure: no communication."""
    if isinstance(traffic, dict):
        traffic = traffic["ranks"]
    return occl.plan_circuits(topology if topology is not None else communicator(None).topology(), traffic)


class Reconfiguration:
    """A reconfiguration in progress (reconfigure with async_op=True): wait()
    returns when the groups run on the new fabric, or raises the error
    every rank gets; is_completed() does not block."""

    def __init__(self, run):
        self._err = None
        self._done = threading.Event()

        def body():
            try:
                run()
            except BaseException as e:  # re-raised by wait
                self._err = e
            finally:
                self._done.set()

        self._thread = threading.Thread(target=body, name="occl-reconfigure", daemon=True)
        self._thread.start()

    def is_completed(self):
        return self._done.is_set()

    def wait(self, timeout=None):
        if not self._done.wait(timeout):
            raise TimeoutError("occl: reconfiguration still in progress")
        self._thread.join()
        if self._err is not None:
            raise self._err
        return True


def reconfigure(topology, groups=(), async_op=False, group=None):
    """Rewires group (the world group if None; a group made by shrink
    rewires the survivors' fabric) and groups (made by new_group, of which
    this rank is a member) onto topology: a dict, JSON text or the path of a JSON
    file in occl's topology format (what occl-topo writes). The OCS
    controller at OCCL_OCS_ADDR switches the circuits once; every group then
    opens, checks and agrees on its new links. All or nothing: on failure
    every rank raises the same occl.OcclError and the groups keep working on
    their previous topology. Collective on group and on each of groups.

    With async_op=True it returns a Reconfiguration at once, so that the
    switch overlaps with computation (expert compute between all-to-alls);
    issue no operation on these groups before its wait() returns."""
    if isinstance(topology, dict):
        text = json.dumps(topology)
    elif isinstance(topology, bytes):
        text = topology.decode()
    elif isinstance(topology, str) and not topology.lstrip().startswith("{"):
        with open(topology) as f:
            text = f.read()
    else:
        text = topology
    world = communicator(group)
    subs = [communicator(g) for g in groups]
    run = lambda: world.reconfigure(text, subs)
    if not async_op:
        run()
        return None
    return Reconfiguration(run)
