/*
 * occl_cgo.h — not part of the API: declarations that liboccl.so's Go code
 * and liboccl.h (the header cgo generates) need besides occl.h. Programs
 * include occl.h.
 */
#ifndef OCCL_CGO_H_
#define OCCL_CGO_H_

#include <stdint.h>
#include "occl.h"

/* Parameter and result types of the exported functions whose C type has a
 * const qualifier, which a Go signature cannot express. Through these
 * typedefs the prototypes cgo writes into liboccl.h are the very prototypes
 * of occl.h. */
typedef const void* occlInternalConstBuf;
typedef const char* occlInternalConstStr;
typedef const size_t* occlInternalConstCounts;
typedef const occlComm_t* occlInternalConstComms;
typedef const occlConfig_t* occlInternalConstConfig;
typedef const occlP2POp_t* occlInternalConstP2POps;
typedef const double* occlInternalConstDoubles;
typedef const int* occlInternalConstInts;

/* Defined in cgo/internal.c, hidden: liboccl.so does not export them. */
#define OCCL_INTERNAL __attribute__((visibility("hidden")))
OCCL_INTERNAL uint64_t occlInternalHandleCap(void);
OCCL_INTERNAL uintptr_t occlInternalHandleBase(void);
OCCL_INTERNAL void occlInternalSetThreadError(const char* msg, size_t n);
OCCL_INTERNAL const char* occlInternalThreadError(void);
OCCL_INTERNAL const char* occlInternalReturnError(const char* msg, size_t n);
OCCL_INTERNAL uint64_t occlInternalGroup(int* depth);
OCCL_INTERNAL void occlInternalSetGroup(uint64_t id, int depth);
OCCL_INTERNAL const char* occlInternalResultString(int r);

#endif /* OCCL_CGO_H_ */
