package main

// #include "occl_cgo.h"
import "C"

import (
	"errors"
	"math"
	"unsafe"

	"github.com/occl/occl/hugemem"
)

// This file: buffers for large transfers (package hugemem).

// occlMemAlloc allocates size bytes of zeroed memory for transfers, shared with the peers on the host from 64 KiB (hugemem.SharedMin). See occl.h.
//
//export occlMemAlloc
func occlMemAlloc(ptr *unsafe.Pointer, size C.size_t) (res C.occlResult_t) {
	k := begin("occlMemAlloc")
	defer k.end(&res)
	if ptr == nil {
		return k.fail(resInvalidArgument, "ptr is NULL")
	}
	if size == 0 || uint64(size) > math.MaxInt64/2 {
		return k.fail(resInvalidArgument, "size %d: must be at least 1 and below 2^62", uint64(size))
	}
	b, err := hugemem.Alloc(int(size))
	if err != nil {
		return k.fail(resSystemError, "%v", err)
	}
	*ptr = unsafe.Pointer(unsafe.SliceData(b))
	return resSuccess
}

// occlMemFree releases a buffer of occlMemAlloc. See occl.h.
//
//export occlMemFree
func occlMemFree(ptr unsafe.Pointer) (res C.occlResult_t) {
	k := begin("occlMemFree")
	defer k.end(&res)
	if ptr == nil {
		return k.fail(resInvalidArgument, "ptr is NULL")
	}
	if err := hugemem.FreeAt(uintptr(ptr)); err != nil {
		if errors.Is(err, hugemem.ErrNotAllocated) {
			return k.fail(resInvalidArgument, "%p: %v", ptr, err)
		}
		return k.fail(resSystemError, "%v", err)
	}
	return resSuccess
}
