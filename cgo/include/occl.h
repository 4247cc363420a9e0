/*
 * occl.h — the C ABI of occl, a collective communication runtime.
 *
 * This is the stable public header: C and C++ programs include it and link
 * against liboccl.so, which is built from the repository root with
 *
 *     go build -buildmode=c-shared -o build/liboccl.so ./cgo
 *
 * and compiled with
 *
 *     cc -I cgo/include prog.c -L build -loccl -Wl,-rpath,$PWD/build
 *
 * (that go build also writes build/liboccl.h, the header cgo generates; it
 * includes this one and declares the same functions, so this header is all a
 * program needs).
 *
 * The API is shaped like NCCL's: ncclFoo becomes occlFoo, without CUDA
 * streams. Buffers are host memory. Every function returns an occlResult_t
 * (except occlGetErrorString and occlGetLastError); on failure
 * occlGetLastError says what went wrong. No function crashes on bad input:
 * null pointers, unknown data types or reductions, counts that are negative
 * when read as signed or whose size in bytes overflows, and unknown or
 * destroyed communicators and requests are reported as occlInvalidArgument.
 *
 * BLOCKING AND NON-BLOCKING CALLS
 *
 * A blocking call (occlAllReduce, occlSend, ...) returns when the operation
 * has completed on this rank: its buffers may be reused at once. It fails with
 * occlTimeout if it takes longer than the communicator's timeout (OCCL_TIMEOUT,
 * default 10 minutes), which also fails the communicator.
 *
 * A non-blocking call (occlAllReduceAsync, ...) queues the operation and
 * returns an occlRequest_t. Exactly as with NCCL operations enqueued on a CUDA
 * stream, the buffers belong to the operation until it has completed: the
 * caller must keep sendbuff and recvbuff allocated, must not write sendbuff
 * and must not read or write recvbuff until occlWait returns or occlTest sets
 * *done to 1 for that request. Count and displacement arrays are copied during
 * the call and may be reused when it returns. Operations on one communicator
 * complete in the order they were issued, so completion of a request implies
 * completion of every earlier one on the same communicator. Operations
 * progress on the library's own threads: the caller may compute between the
 * call and occlWait without calling into the library. A request alone in
 * its communicator's queue and not waited for or tested within 20
 * microseconds of its call starts then on those threads (one queued behind
 * others, when they are done); one waited for sooner runs on the waiting
 * thread.
 *
 * THREAD SAFETY
 *
 *  - occlGetVersion, occlGetUniqueId, occlGetErrorString, occlGetLastError,
 *    occlMemAlloc, occlMemFree and the communicator creation functions may be
 *    called from any thread at any time.
 *  - On one communicator, these may be called from any thread, concurrently
 *    with anything else on it: occlCommCount, occlCommUserRank,
 *    occlCommGetAsyncError, occlGetLastError, occlCommSetTrafficTag,
 *    occlCommFlightRecord, occlCommAbort, and occlTest / occlWait / occlRequestFree on different
 *    requests (also from threads other than the one that issued them).
 *  - Operations (collectives, occlSend/occlRecv, occlBarrier, occlCommSplit,
 *    occlCommGrow, occlCommReconfigure, occlCommTrafficMatrix) may be issued
 *    from several threads without corrupting anything, but they run in the
 *    order they were issued, and every rank must issue the same sequence of
 *    collectives on a communicator. As with NCCL, issue them from one thread
 *    at a time (or order the threads yourself) so that the order is the same
 *    on every rank. Different communicators are independent.
 *  - occlCommDestroy must not race with operations on the same communicator:
 *    a call that loses the race returns occlInvalidArgument (unknown
 *    communicator) or occlInvalidUsage (communicator closed); none crashes.
 *  - A request may be waited for, tested or freed by one thread at a time.
 *  - occlGroupStart / occlGroupEnd are per thread: they group the calls of the
 *    calling thread only.
 *  - The message returned by occlGetLastError is per thread.
 *
 * Do not fork() a process that has loaded liboccl.so and use occl in the child.
 */
#ifndef OCCL_H_
#define OCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header: OCCL_VERSION_CODE == OCCL_MAJOR*10000 +
 * OCCL_MINOR*100 + OCCL_PATCH, the value occlGetVersion returns. */
#define OCCL_MAJOR 0
#define OCCL_MINOR 1
#define OCCL_PATCH 0
#define OCCL_VERSION_CODE (OCCL_MAJOR * 10000 + OCCL_MINOR * 100 + OCCL_PATCH)

/* Result codes. The values are NCCL's (1, ncclUnhandledCudaError, has no
 * counterpart); occlTimeout is occl's own. */
typedef enum {
  occlSuccess = 0,
  /* An operating system, network or OCS controller call failed, a
   * reconfiguration failed (the communicator then keeps working on its
   * previous topology), or a grow failed (the communicator keeps
   * working). */
  occlSystemError = 2,
  /* A bug in occl, including a recovered panic. */
  occlInternalError = 3,
  /* A null pointer, an unknown data type or reduction, a negative or
   * overflowing count, a rank or peer out of range, or an unknown or
   * destroyed communicator or request. Nothing happened; the communicator
   * is unaffected. */
  occlInvalidArgument = 4,
  /* A call that is not allowed now: on a closed communicator, an
   * occlGroupEnd without occlGroupStart, a non-blocking call inside a group,
   * operations that do not match across ranks, no launcher environment for
   * occlCommInitFromEnv. */
  occlInvalidUsage = 5,
  /* Another rank failed, aborted or lost its connection; the communicator
   * has failed (occlCommGetAsyncError reports the same). */
  occlRemoteError = 6,
  /* The operation has not completed yet (occlCommGetAsyncError never
   * returns it today; reserved as in NCCL). */
  occlInProgress = 7,
  /* The operation did not finish before the communicator's timeout
   * (OCCL_TIMEOUT); the communicator has failed. */
  occlTimeout = 8,
  occlNumResults = 9
} occlResult_t;

/* Element types. The values are NCCL's. */
typedef enum {
  occlInt8 = 0,
  occlChar = 0,
  occlUint8 = 1,
  occlInt32 = 2,
  occlInt = 2,
  occlUint32 = 3,
  occlInt64 = 4,
  occlUint64 = 5,
  occlFloat16 = 6,
  occlHalf = 6,
  occlFloat32 = 7,
  occlFloat = 7,
  occlFloat64 = 8,
  occlDouble = 8,
  occlBfloat16 = 9,
  occlNumTypes = 10
} occlDataType_t;

/* Reductions. The values are NCCL's. occlAvg divides the sum by the number of
 * ranks (integer types truncate). */
typedef enum {
  occlSum = 0,
  occlProd = 1,
  occlMax = 2,
  occlMin = 3,
  occlAvg = 4,
  occlNumOps = 5
} occlRedOp_t;

/* A communicator: one rank's handle on a group of ranks. It is opaque and
 * never dereferenced. No two communicators of a process ever get the same
 * value, and none gets the value of a request, so a destroyed communicator
 * is detected (occlInvalidArgument), never mistaken for a newer one. The
 * values come from a range of 2^32 (fewer when the address space is
 * limited, e.g. by ulimit -v, down to 2^16): once it is used up, creating a
 * communicator fails with occlSystemError ("no handles left"). */
typedef struct occlComm* occlComm_t;

/* A non-blocking operation in progress. Released by occlWait, by occlTest
 * when it reports completion, or by occlRequestFree; after that the handle is
 * invalid (occlInvalidArgument) until its value comes back: a program can
 * make billions of requests, so they take their values in turn from a range
 * of 2^32 - 1 (fewer when the address space is limited, down to 2^16 - 1),
 * skipping those in use and starting again at its beginning after its end:
 * a value comes back only after a whole round of the range since it was
 * last given. A request never has the value of a communicator. */
typedef struct occlRequest* occlRequest_t;

/* The size of an occlUniqueId. */
#define OCCL_UNIQUE_ID_BYTES 256

/* Identifies a communicator before it exists, like ncclUniqueId. internal
 * holds the id's text form, NUL-terminated ("occl1:HOST:PORT/SECRET", the
 * value OCCL_UNIQUE_ID takes): the address where rank 0 serves the rendezvous
 * and a 128-bit secret every rank must present. Pass the whole struct (or
 * the string) to the other ranks. */
typedef struct {
  char internal[OCCL_UNIQUE_ID_BYTES];
} occlUniqueId;

/* The color that makes occlCommSplit create no communicator for a rank. */
#define OCCL_SPLIT_NOCOLOR (-1)

/* The longest message occlGetLastError returns, NUL included. */
#define OCCL_LAST_ERROR_BYTES 1024

/* ---- Library ---------------------------------------------------------- */

/* Stores OCCL_VERSION_CODE of the library in *version. */
occlResult_t occlGetVersion(int* version);

/* Creates a fresh id for occlCommInitRank: a new secret and a port that is
 * free now on this host's address (OCCL_SOCKET_ADDR if set, else the address
 * of OCCL_SOCKET_IFNAME, else the first non-loopback IPv4 address, else
 * 127.0.0.1). Call it on the process that will be rank 0. */
occlResult_t occlGetUniqueId(occlUniqueId* uniqueId);

/* Returns a static description of a result code ("unknown result" for a value
 * that is not one). */
const char* occlGetErrorString(occlResult_t result);

/* Returns the message of the most recent failure: of a call on comm (from any
 * thread) if comm is a valid communicator on which a call has failed, else of
 * the calling thread's most recent failed call (which is where failures of
 * calls given a null, unknown or destroyed communicator are recorded).
 * Returns "" if nothing failed. The string is in a buffer of the calling
 * thread, valid until that thread's next call of occlGetLastError. */
const char* occlGetLastError(occlComm_t comm);

/* ---- Memory ----------------------------------------------------------- */

/* Allocates size bytes (at least 1) of zeroed host memory for transfers and
 * stores its address in *ptr, as ncclMemAlloc does for NCCL. From 64 KiB up
 * the buffer is shared memory (a sealed memory file of its own), which a
 * peer process on the same host maps once and then copies blocks out of
 * with memcpy, where it would otherwise call process_vm_readv for every
 * block (shared memory's single copy); being shared, it is not copied on
 * write across fork. From 2 MiB up it starts on a 2 MiB boundary and is
 * advised for transparent huge pages (madvise(MADV_HUGEPAGE)), which the
 * kernel honours for shared memory where
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it. Any buffer
 * works with every call; this one makes large transfers faster. Fails with
 * occlSystemError when the memory cannot be mapped (and on systems other
 * than Linux). Release it with occlMemFree. */
occlResult_t occlMemAlloc(void** ptr, size_t size);

/* Releases a buffer of occlMemAlloc, given the address it returned; no
 * operation may still use it. Fails with occlInvalidArgument for any other
 * address (NULL, one inside a buffer, one freed already). */
occlResult_t occlMemFree(void* ptr);

/* ---- Communicators ---------------------------------------------------- */

/* Joins the communicator identified by commId as rank rank of nranks (at
 * most 2^20; more is occlInvalidArgument). Every rank calls it with the same
 * id and nranks; it returns when all have joined and every connection is
 * open and authenticated (or fails after the timeout). Inside
 * occlGroupStart/occlGroupEnd it only reserves *comm and the
 * join happens in occlGroupEnd, concurrently for all the communicators
 * created in the group: one thread can then create several ranks. */
occlResult_t occlCommInitRank(occlComm_t* comm, int nranks, occlUniqueId commId, int rank);

/* Options of occlCommInitRankConfig, occlCommGrowConfig and occlJoinConfig.
 * Start from OCCL_CONFIG_INITIALIZER so that fields added later keep their
 * defaults (a program built against an older occl.h passes a smaller size
 * and gets them too). */
typedef struct {
  size_t size;            /* sizeof(occlConfig_t), set by the initializer */
  long long timeoutMs;    /* 0: OCCL_TIMEOUT, or 10 minutes; > 0: the
                           * communicator's timeout in milliseconds, at
                           * most OCCL_MAX_TIMEOUT_MS */
  const int* fabricRanks; /* NULL, or nranks entries: rank r of the new
                           * communicator is rank fabricRanks[r] of the
                           * communicator that spans the fabric (see below);
                           * NULL for a grow or a join */
  const char* topology;   /* NULL (OCCL_TOPO applies), or the new
                           * communicator's topology, one rank per rank:
                           * what OCCL_TOPO takes (a spec such as
                           * "hosts=2x2,nics=host", or a topology file's
                           * path) or the topology itself in occl's JSON
                           * format, as occlCommTopology writes it. Read
                           * during the call. */
} occlConfig_t;
#define OCCL_CONFIG_INITIALIZER {sizeof(occlConfig_t), 0, NULL, NULL}

/* The largest occlConfig_t.timeoutMs, about 146 years (half of what 64 bits
 * of nanoseconds hold): a larger one is occlInvalidArgument. A program that
 * wants no timeout passes it. */
#define OCCL_MAX_TIMEOUT_MS 4611686018427LL

/* Like occlCommInitRank, with options. With fabricRanks the new
 * communicator is a group of the fabric-wide one made among its members
 * only (occlCommSplit needs every rank of the parent): the topology
 * (config.topology or OCCL_TOPO), which then describes the whole fabric,
 * is narrowed to these ranks, and occlCommReconfigureMany rewires it as a
 * sub-communicator. The array is copied during the call. */
occlResult_t occlCommInitRankConfig(occlComm_t* comm, int nranks, occlUniqueId commId, int rank,
                                    const occlConfig_t* config);

/* Joins the communicator of a job started by occl's launcher, torchrun,
 * mpirun, srun or a PMI launcher, reading rank, size and rendezvous from the
 * environment (OCCL_RANK, OCCL_WORLD_SIZE, OCCL_UNIQUE_ID; RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT; ...). occlInvalidUsage if no launcher is found.
 * Inside a group it only reserves *comm, like occlCommInitRank. */
occlResult_t occlCommInitFromEnv(occlComm_t* comm);

/* Waits for the operations already issued on comm (at most the timeout),
 * tells the other ranks this rank leaves cleanly, and frees the communicator.
 * The handle is invalid afterwards (even if an error is returned). Rank 0
 * waits up to 5 seconds for the other ranks to leave: a thread that owns
 * several ranks destroys them inside a group, where the destruction happens
 * in occlGroupEnd, after the group's operations, for all ranks at once. */
occlResult_t occlCommDestroy(occlComm_t comm);

/* Fails comm at once, on every rank: pending and later operations of the
 * other ranks return occlRemoteError. It does not wait for them, then frees
 * the communicator like occlCommDestroy. Safe from any thread, e.g. a
 * watchdog. */
occlResult_t occlCommAbort(occlComm_t comm);

/* Partitions comm like ncclCommSplit and MPI_Comm_split: ranks that pass the
 * same color form a new communicator, ranked by key (ties broken by rank in
 * comm). Every rank of comm must call it. A rank passing OCCL_SPLIT_NOCOLOR
 * gets *newcomm = NULL. Inside a group it only reserves *newcomm, like
 * occlCommInitRank. */
occlResult_t occlCommSplit(occlComm_t comm, int color, int key, occlComm_t* newcomm);

/* Replaces comm by a communicator without its failed ranks and without the
 * excludeCount ranks of excludeRanks, like ncclCommShrink. Every rank of
 * comm that is alive and not excluded must call it, with the same list,
 * typically after a call returned occlRemoteError or occlTimeout, or on a
 * healthy comm to drop ranks on purpose; the excluded ranks do not call it.
 * The operations issued on comm finish first (on a failed comm they have
 * failed already); comm then ends on every rank once the survivors agree on
 * who is left (the ranks the failure named and those unreachable are out; a
 * rank alive but not calling yet is waited for, up to comm's timeout) and
 * make *newcomm: its ranks are the survivors in their order in comm, with
 * comm's options. comm can no longer be used for operations; free it with
 * occlCommDestroy as usual. A rank the others excluded, or that finds too
 * few ranks to go on (half of them or more lost at once), gets
 * *newcomm = NULL and occlRemoteError. Communicators split from comm are
 * not rebuilt. excludeRanks may be NULL if excludeCount is 0; it is copied
 * during the call. Inside a group it only reserves *newcomm, like
 * occlCommInitRank. */
occlResult_t occlCommShrink(occlComm_t comm, const int* excludeRanks, int excludeCount, occlComm_t* newcomm);

/* Creates the communicator of comm's ranks and njoin processes that call
 * occlJoin with growId, like comm.Grow: a spare process replaces a failed
 * rank or adds capacity to a running job. Every rank of comm calls it with
 * the same growId and njoin; it is an operation of comm, run after those
 * issued before it. Rank 0 of comm serves the rendezvous at growId's
 * address: make growId on rank 0's host (occlGetUniqueId) and hand it to
 * the joiners (a file, a store, the launcher). The members keep their ranks
 * 0..n-1 in *newcomm; the joiners get n..n+njoin-1 in the order they
 * arrive. A process without growId's secret is refused without taking a
 * joiner's place. comm stays usable (destroy it once done with it). If the
 * joiners do not all arrive before the timeout, every member returns
 * occlSystemError with a message saying how many came, and comm keeps
 * working. A communicator with a topology (OCCL_TOPO, or config.topology)
 * grows with occlCommGrowConfig, which is given the grown one; through
 * this call it gets occlInvalidArgument, as does one made with
 * fabricRanks (it cannot grow). Inside a group it only reserves *newcomm,
 * like occlCommInitRank. */
occlResult_t occlCommGrow(occlComm_t comm, occlUniqueId growId, int njoin, occlComm_t* newcomm);

/* occlCommGrow with options for the grown communicator, like comm.Grow's:
 * config->topology is its topology, of comm's ranks plus njoin (the members
 * keep their places in it, the joiners take the ranks after them), given
 * to every member and to every joiner (occlJoinConfig); a topology of
 * another size fails at once (occlInvalidArgument). config->timeoutMs, if
 * set, is its timeout; config->fabricRanks must be NULL. Otherwise the
 * grown communicator has comm's options. For example, 4 ranks on 2
 * emulated hosts (OCCL_TOPO=hosts=2x2) grown by 2 spares on a third host:
 *
 *   occlConfig_t config = OCCL_CONFIG_INITIALIZER;
 *   config.topology = "hosts=3x2";
 *   occlCommGrowConfig(comm, growId, 2, &grown, &config);   // the members
 *   occlJoinConfig(&grown, growId, &config);                // each spare
 */
occlResult_t occlCommGrowConfig(occlComm_t comm, occlUniqueId growId, int njoin, occlComm_t* newcomm,
                                const occlConfig_t* config);

/* Joins, as a new rank, the communicator that the ranks of a running one
 * create with occlCommGrow(comm, growId, njoin, ...): presents growId's
 * secret like any rank and learns its rank and size (occlCommUserRank,
 * occlCommCount). It may be called before the members call occlCommGrow: it
 * retries until rank 0 serves the rendezvous. Fails with occlSystemError
 * when rank 0 refuses it (every joiner's place is taken, or the grow gave
 * up), or after the timeout. Inside a group it only reserves *comm, like
 * occlCommInitRank. */
occlResult_t occlJoin(occlComm_t* comm, occlUniqueId growId);

/* occlJoin with options: config->topology is the grown communicator's, the
 * one its members pass to occlCommGrowConfig; config->timeoutMs, if set,
 * bounds the join and is the communicator's timeout; config->fabricRanks
 * must be NULL. */
occlResult_t occlJoinConfig(occlComm_t* comm, occlUniqueId growId, const occlConfig_t* config);

/* Stores the number of ranks of comm in *count. */
occlResult_t occlCommCount(occlComm_t comm, int* count);

/* Stores this process's rank in comm in *rank. */
occlResult_t occlCommUserRank(occlComm_t comm, int* rank);

/* Stores occlSuccess in *asyncError while comm is healthy, else the code of
 * the failure that failed it (occlRemoteError, occlTimeout, ...); the message
 * is then available from occlGetLastError(comm). */
occlResult_t occlCommGetAsyncError(occlComm_t comm, occlResult_t* asyncError);

/* ---- Collectives ------------------------------------------------------ *
 * Counts are numbers of elements. sendbuff may equal recvbuff where noted
 * (in place). A null buffer is accepted only where it is not used: when its
 * count is 0, and where the description says so. */

/* Reduces count elements of sendbuff across ranks with op into recvbuff on
 * every rank. In place if sendbuff == recvbuff. */
occlResult_t occlAllReduce(const void* sendbuff, void* recvbuff, size_t count, occlDataType_t datatype,
                           occlRedOp_t op, occlComm_t comm);

/* Copies count elements of root's sendbuff into recvbuff on every rank.
 * sendbuff is read on root only (may be NULL elsewhere). In place on root if
 * sendbuff == recvbuff. */
occlResult_t occlBroadcast(const void* sendbuff, void* recvbuff, size_t count, occlDataType_t datatype, int root,
                           occlComm_t comm);

/* Reduces count elements across ranks with op into recvbuff on root;
 * recvbuff is used on root only (may be NULL elsewhere). */
occlResult_t occlReduce(const void* sendbuff, void* recvbuff, size_t count, occlDataType_t datatype, occlRedOp_t op,
                        int root, occlComm_t comm);

/* Gathers sendcount elements from every rank into recvbuff (nranks *
 * sendcount elements, in rank order) on every rank. In place if sendbuff ==
 * recvbuff + rank * sendcount elements. */
occlResult_t occlAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, occlDataType_t datatype,
                           occlComm_t comm);

/* Reduces nranks * recvcount elements of sendbuff across ranks with op and
 * leaves block rank (recvcount elements) in recvbuff. In place if recvbuff ==
 * sendbuff + rank * recvcount elements. */
occlResult_t occlReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, occlDataType_t datatype,
                               occlRedOp_t op, occlComm_t comm);

/* Sends block j (count elements) of sendbuff to rank j and receives rank j's
 * block into block j of recvbuff; both hold nranks * count elements. In place
 * if sendbuff == recvbuff, on every rank or on none (as MPI_IN_PLACE). */
occlResult_t occlAllToAll(const void* sendbuff, void* recvbuff, size_t count, occlDataType_t datatype,
                          occlComm_t comm);

/* AllToAll with a count and displacement (in elements) per peer, each array
 * of nranks entries: sendcounts[j] elements from sendbuff + sdispls[j] go to
 * rank j, recvcounts[j] elements from rank j land at recvbuff + rdispls[j].
 * recvcounts[j] must equal sendcounts[this rank] on rank j. In place if
 * sendbuff == recvbuff, on every rank or on none. */
occlResult_t occlAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[], void* recvbuff,
                           const size_t recvcounts[], const size_t rdispls[], occlDataType_t datatype,
                           occlComm_t comm);

/* Gathers sendcount elements of every rank into recvbuff on root (nranks *
 * sendcount elements, in rank order; may be NULL elsewhere). */
occlResult_t occlGather(const void* sendbuff, void* recvbuff, size_t sendcount, occlDataType_t datatype, int root,
                        occlComm_t comm);

/* Sends block j (recvcount elements) of root's sendbuff (may be NULL
 * elsewhere) to rank j's recvbuff. */
occlResult_t occlScatter(const void* sendbuff, void* recvbuff, size_t recvcount, occlDataType_t datatype, int root,
                         occlComm_t comm);

/* Returns once every rank of comm has called it. */
occlResult_t occlBarrier(occlComm_t comm);

/* ---- Point to point --------------------------------------------------- *
 * The k-th message this rank sends to peer is received by peer's k-th
 * occlRecv from this rank, and the two must agree on count and datatype.
 * Outside a group, occlSend and occlRecv block until the message has been
 * sent or received; two ranks that both send first may deadlock, as with
 * NCCL: post exchanges inside occlGroupStart / occlGroupEnd. */

/* Sends count elements of sendbuff to peer. */
occlResult_t occlSend(const void* sendbuff, size_t count, occlDataType_t datatype, int peer, occlComm_t comm);

/* Receives count elements from peer into recvbuff. */
occlResult_t occlRecv(void* recvbuff, size_t count, occlDataType_t datatype, int peer, occlComm_t comm);

/* Opens a group on the calling thread (groups nest; the outermost
 * occlGroupEnd closes it). Until then, the blocking calls of this thread only
 * check their arguments and are recorded (they return occlSuccess or an
 * argument error); their buffers must stay valid until occlGroupEnd returns.
 * The creation calls (occlCommInitRank, occlCommInitFromEnv, occlCommSplit,
 * occlCommGrow, occlJoin) only reserve the new handle, usable once
 * occlGroupEnd has returned; occlCommDestroy invalidates the handle at once
 * and destroys the communicator in occlGroupEnd. Non-blocking calls,
 * occlCommReconfigure and occlCommTrafficMatrix are rejected with
 * occlInvalidUsage. */
occlResult_t occlGroupStart(void);

/* Closes the calling thread's group and runs what was recorded, like
 * ncclGroupEnd: first the communicator creations, concurrently; then, per
 * communicator in call order, the collectives, with all of a communicator's
 * sends and receives posted as one group (they progress together, so a ring
 * or all-to-all exchange cannot deadlock) at the position of its first send
 * or receive; then the destructions, concurrently. It returns when
 * everything has completed, with the first failure (occlInvalidUsage if no
 * group is open). Every rank must record the same sequence. */
occlResult_t occlGroupEnd(void);

/* ---- Non-blocking operations ------------------------------------------ *
 * Same arguments as the blocking call plus *request, which receives the
 * handle. The buffers belong to the operation until it completes (see
 * "BLOCKING AND NON-BLOCKING CALLS" above). An argument error is returned at
 * once and *request is set to NULL; a failure of the operation itself is
 * returned by occlWait / occlTest. */

occlResult_t occlAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count, occlDataType_t datatype,
                                occlRedOp_t op, occlComm_t comm, occlRequest_t* request);
occlResult_t occlBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count, occlDataType_t datatype, int root,
                                occlComm_t comm, occlRequest_t* request);
occlResult_t occlReduceAsync(const void* sendbuff, void* recvbuff, size_t count, occlDataType_t datatype,
                             occlRedOp_t op, int root, occlComm_t comm, occlRequest_t* request);
occlResult_t occlAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount, occlDataType_t datatype,
                                occlComm_t comm, occlRequest_t* request);
occlResult_t occlReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount, occlDataType_t datatype,
                                    occlRedOp_t op, occlComm_t comm, occlRequest_t* request);
occlResult_t occlAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count, occlDataType_t datatype,
                               occlComm_t comm, occlRequest_t* request);
occlResult_t occlAllToAllvAsync(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                                void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                                occlDataType_t datatype, occlComm_t comm, occlRequest_t* request);
occlResult_t occlBarrierAsync(occlComm_t comm, occlRequest_t* request);
occlResult_t occlSendAsync(const void* sendbuff, size_t count, occlDataType_t datatype, int peer, occlComm_t comm,
                           occlRequest_t* request);
occlResult_t occlRecvAsync(void* recvbuff, size_t count, occlDataType_t datatype, int peer, occlComm_t comm,
                           occlRequest_t* request);

occlResult_t occlGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount, occlDataType_t datatype, int root,
                             occlComm_t comm, occlRequest_t* request);
occlResult_t occlScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount, occlDataType_t datatype, int root,
                              occlComm_t comm, occlRequest_t* request);

/* One send or receive of occlSendRecvAsync. */
typedef struct {
  int isSend;               /* 1: send buff to peer; 0: receive into buff from peer */
  void* buff;
  size_t count;
  occlDataType_t datatype;
  int peer;
} occlP2POp_t;

/* Posts nops sends and receives on comm as one group (what occlGroupStart /
 * occlGroupEnd do for blocking occlSend and occlRecv): they progress
 * together, so an exchange in which both ranks send first cannot deadlock.
 * The ops array is copied during the call; the buffers belong to the
 * operation until the request completes. */
occlResult_t occlSendRecvAsync(const occlP2POp_t* ops, int nops, occlComm_t comm, occlRequest_t* request);

/* Waits for the operation, releases the request and returns the operation's
 * result. A NULL request returns occlSuccess at once (like MPI_REQUEST_NULL). */
occlResult_t occlWait(occlRequest_t request);

/* Stores 1 in *done and releases the request if the operation has completed
 * (returning its result), else stores 0 and returns occlSuccess. */
occlResult_t occlTest(occlRequest_t request, int* done);

/* Releases a request without waiting. The operation goes on; its buffers stay
 * in use until it completes, which a later blocking call or completed request
 * on the same communicator implies. */
occlResult_t occlRequestFree(occlRequest_t request);

/* Tells the library that the caller computes on its process's cores while
 * the request's operation runs, as a training step's backward pass does
 * while its gradients are reduced. The operation's waits on shared memory
 * then wait as where the processes outnumber the cores (they poll on only
 * while the peer runs, then give the core away and sleep), instead of
 * polling for OCCL_SHM_SPIN, and its TCP reads and writes sleep until the
 * socket is ready instead of polling it: a polling wait takes the core from
 * that computation. It may be called before or while the operation runs (a
 * polling wait looks again every 16th poll on shared memory, before every
 * poll over TCP), from any thread,
 * also while another waits for or tests the request; a request already
 * released returns occlInvalidArgument. */
occlResult_t occlRequestOverlap(occlRequest_t request);

/* ---- Reconfiguration and traffic -------------------------------------- */

/* Rewires comm to the topology described by targetTopologyJSON (occl's
 * topology file format, as occl-topo writes it): pauses the communicator at
 * an operation boundary, has the OCS controller switch the target's circuits,
 * opens and verifies the new links and resumes on them. Collective: every
 * rank calls it with the same target. The controller is the occl-ocsd at
 * OCCL_OCS_ADDR (host:port), authenticated with OCCL_OCS_TOKEN, over TLS
 * if OCCL_OCS_TLS_CA (the authorities that sign the controller's
 * certificate, PEM) or a client certificate (OCCL_OCS_TLS_CERT and
 * OCCL_OCS_TLS_KEY) is given, if OCCL_OCS_ADDR is set; else the fabric is assumed to be switched already
 * and only the communicator is rewired. On failure (occlSystemError) every
 * rank gets the same error and comm keeps working on its previous topology. */
occlResult_t occlCommReconfigure(occlComm_t comm, const char* targetTopologyJSON);

/* Like occlCommReconfigure for comms[0..ncomms): the communicator that spans
 * the fabric (made by occlCommInitRank or occlCommInitFromEnv) and the
 * sub-communicators split from it that this rank belongs to, so that they all
 * move to the new circuits together. targetTopologyJSON describes the whole
 * fabric; the spanning communicator has the controller switch it once, and
 * each sub-communicator then rewires its own links on its part of it.
 * Collective on each of the communicators. On failure every rank of a
 * communicator gets the same error; if the switch itself failed, every
 * communicator keeps its previous topology. */
occlResult_t occlCommReconfigureMany(const occlComm_t* comms, int ncomms, const char* targetTopologyJSON);

/* Counts the bytes of later all-to-all operations issued through this API on
 * comm (occlAllToAll, occlAllToAllv and their Async forms) under tag, e.g.
 * "layer3/dispatch"; "" or NULL is the default tag. Local: no communication. */
occlResult_t occlCommSetTrafficTag(occlComm_t comm, const char* tag);

/* Gathers the all-to-all traffic of tag ("" or NULL: the default tag) from
 * every rank and writes it as NUL-terminated JSON into buf:
 *   {"tag":..., "ops":[per rank], "ranks":[[bytes i->j]], "hosts":[[bytes
 *    host a->b]], "host":[host of each rank]}
 * *needed receives the size the JSON needs, NUL included. Collective: every
 * rank calls it. If buf is NULL or len < *needed, it returns
 * occlInvalidArgument and keeps the matrix: the next call on comm with the
 * same tag returns it without communicating, so retry with a buffer of
 * *needed bytes on the ranks that got the error only. */
occlResult_t occlCommTrafficMatrix(occlComm_t comm, const char* tag, char* buf, size_t len, size_t* needed);

/* Writes comm's current topology (occl's topology format: the fabric-wide
 * one for a communicator that spans the fabric, its part for a
 * sub-communicator) as NUL-terminated JSON into buf. *needed receives the
 * size it needs, NUL included; occlInvalidArgument if len is smaller. Local:
 * no communication. occlInvalidUsage without a topology (OCCL_TOPO). */
occlResult_t occlCommTopology(occlComm_t comm, char* buf, size_t len, size_t* needed);

/* Plans circuits for a demand: takes topologyJSON, drops its circuits and
 * places new ones on its free OCS ports for demand (nranks x nranks,
 * row-major: bytes rank i sends rank j, e.g. the "ranks" of a traffic
 * matrix), favouring the host pairs whose traffic the circuits speed up
 * most; writes the result as NUL-terminated JSON into buf, for
 * occlCommReconfigure. *needed and len as for occlCommTopology. Pure: no
 * communicator, no controller. */
occlResult_t occlPlanCircuits(const char* topologyJSON, const double* demand, int nranks, char* buf, size_t len,
                              size_t* needed);

/* Writes comm's flight record, its last operations (OCCL_FLIGHT_RECORDER of
 * them, 256 by default) followed by those still queued, as NUL-terminated
 * JSON into buf:
 *   {"rank":..., "size":..., "comm":"<hex id>", "error":"<the failure, if
 *    any>", "time":..., "ops":[{"seq":..., "op":"AllReduce", "bytes":...,
 *    "dtype":"float32", "schedule":"ring", "state":"queued|running|done|
 *    failed", "start":..., "end":..., "peer":<rank waited on or -1>,
 *    "error":...}]}
 * *needed receives the size it needs, NUL included; occlInvalidArgument if
 * buf is NULL or len is smaller (the record of a running communicator may
 * grow between two calls: retry with more). Local: no communication; it
 * works on a failed communicator too, which is when it is most useful. */
occlResult_t occlCommFlightRecord(occlComm_t comm, char* buf, size_t len, size_t* needed);

#ifdef __cplusplus
}
#endif

#endif /* OCCL_H_ */
