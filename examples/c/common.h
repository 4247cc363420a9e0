//go:build ignore

// Helpers shared by the C examples. (The build line above keeps the Go tool
// from treating the C files of this directory as part of a Go package; to
// a C compiler it is a comment.)

#ifndef OCCL_EXAMPLES_COMMON_H_
#define OCCL_EXAMPLES_COMMON_H_

#include <stdio.h>
#include <stdlib.h>

#include "occl.h"

// OCCLCHECK calls an occl function and exits with its message on failure,
// as NCCLCHECK does in NCCL's examples.
#define OCCLCHECK(call)                                                                             \
  do {                                                                                              \
    occlResult_t r_ = (call);                                                                       \
    if (r_ != occlSuccess) {                                                                        \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call, occlGetErrorString(r_), \
              occlGetLastError(NULL));                                                              \
      exit(2);                                                                                      \
    }                                                                                               \
  } while (0)

#endif
