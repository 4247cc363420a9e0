// The C half of liboccl's internals: the address range handles live in,
// the per-thread state (group and last error) and the static strings. The
// Go half is in the .go files of this directory; the declarations shared by
// both are in the preamble of main.go.

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>

#include "occl_cgo.h"

#define HIDDEN __attribute__((visibility("hidden")))

// ---- Handles ----------------------------------------------------------
//
// A handle (occlComm_t, occlRequest_t) is base + 8*id, an address inside a
// range reserved with PROT_NONE: never dereferenced (touching it faults),
// never part of the Go heap (the range is taken), never returned by malloc,
// and ids are given so that a stale handle is recognised as stale (a
// communicator's id never again, a request's only after all the others of
// its half of the range: see table in main.go). The reservation costs
// address space only.

static uintptr_t handle_base;
static uint64_t handle_cap;  // number of ids, id 0 excluded
static pthread_once_t handle_once = PTHREAD_ONCE_INIT;

static void handle_init(void) {
  // 2^36 bytes of address space is 2^33 ids; smaller if the address space is
  // limited (ulimit -v).
  for (int shift = 36; shift >= 20; shift -= 2) {
    size_t size = (size_t)1 << shift;
    void* p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      handle_base = (uintptr_t)p;
      handle_cap = size / 8 - 1;
      return;
    }
  }
}

// occlInternalHandleCap returns how many ids the handle range holds (0 if it
// could not be reserved).
HIDDEN uint64_t occlInternalHandleCap(void) {
  pthread_once(&handle_once, handle_init);
  return handle_cap;
}

// occlInternalHandleBase returns the address the handle range starts at (0
// if it could not be reserved). Go makes a handle from it (base + 8*id, see
// newID) and finds a handle's id (see handleID) without a call into C.
HIDDEN uintptr_t occlInternalHandleBase(void) {
  pthread_once(&handle_once, handle_init);
  return handle_base;
}

// ---- Per-thread state -------------------------------------------------
//
// Kept in a pthread key, not in __thread variables: the Go runtime's own
// thread pointer makes liboccl.so a static-TLS module, and every __thread
// byte would then come out of the small static TLS surplus glibc reserves
// for libraries loaded by dlopen after the program started (as Python does
// after importing PyTorch, which takes most of it).

struct thread_state {
  char last_error[OCCL_LAST_ERROR_BYTES];
  char returned_error[OCCL_LAST_ERROR_BYTES];
  uint64_t group_id;
  int group_depth;
};

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;
static struct thread_state fallback;  // if malloc fails: shared, but no crash

static void state_init(void) { pthread_key_create(&state_key, free); }

static struct thread_state* state(void) {
  pthread_once(&state_once, state_init);
  struct thread_state* ts = pthread_getspecific(state_key);
  if (ts == NULL) {
    ts = calloc(1, sizeof *ts);
    if (ts == NULL || pthread_setspecific(state_key, ts) != 0) {
      free(ts);
      return &fallback;
    }
  }
  return ts;
}

// occlInternalSetThreadError records msg (n bytes, not NUL-terminated) as
// the calling thread's last error, truncated to fit.
HIDDEN void occlInternalSetThreadError(const char* msg, size_t n) {
  struct thread_state* ts = state();
  if (n >= sizeof ts->last_error) n = sizeof ts->last_error - 1;
  memcpy(ts->last_error, msg, n);
  ts->last_error[n] = 0;
}

// occlInternalThreadError returns a copy of the calling thread's last
// error, in the buffer occlGetLastError returns.
HIDDEN const char* occlInternalThreadError(void) {
  struct thread_state* ts = state();
  memcpy(ts->returned_error, ts->last_error, sizeof ts->returned_error);
  return ts->returned_error;
}

// occlInternalReturnError copies msg (n bytes) into the buffer
// occlGetLastError returns, and returns it.
HIDDEN const char* occlInternalReturnError(const char* msg, size_t n) {
  struct thread_state* ts = state();
  if (n >= sizeof ts->returned_error) n = sizeof ts->returned_error - 1;
  memcpy(ts->returned_error, msg, n);
  ts->returned_error[n] = 0;
  return ts->returned_error;
}

// occlInternalGroup returns the calling thread's open group: its id (0 if
// none) and, in *depth, its nesting depth.
HIDDEN uint64_t occlInternalGroup(int* depth) {
  struct thread_state* ts = state();
  *depth = ts->group_depth;
  return ts->group_id;
}

// occlInternalSetGroup sets the calling thread's open group.
HIDDEN void occlInternalSetGroup(uint64_t id, int depth) {
  struct thread_state* ts = state();
  ts->group_id = id;
  ts->group_depth = depth;
}

// ---- Static strings ---------------------------------------------------

// occlInternalResultString describes a result code.
HIDDEN const char* occlInternalResultString(int r) {
  switch (r) {
    case occlSuccess: return "no error";
    case occlSystemError: return "unhandled system error (network, operating system, OCS controller or reconfiguration)";
    case occlInternalError: return "internal error - please report this issue to the occl developers";
    case occlInvalidArgument: return "invalid argument";
    case occlInvalidUsage: return "invalid usage";
    case occlRemoteError: return "remote process exited, aborted or there was a network error";
    case occlInProgress: return "operation in progress";
    case occlTimeout: return "operation timed out";
  }
  return "unknown result";
}

