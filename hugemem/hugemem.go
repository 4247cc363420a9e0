// Package hugemem allocates buffers for large transfers on transparent huge
// pages, as ncclMemAlloc hands out memory suited to NCCL's transports.
//
// A buffer of a few MiB on 4 KiB pages costs a collective twice over: the
// copies walk 512 TLB entries per 2 MiB, and where a peer reads the buffer
// across processes (occl lends large blocks on shared memory, see
// transport/shm) the kernel pins it one base page at a time. Go's heap and
// glibc's malloc get transparent huge pages only where the system's policy
// is "always"; with the common "madvise" policy a buffer gets them only if
// it is advised to. Alloc maps the buffer itself, on a 2 MiB boundary, and
// advises it (MADV_HUGEPAGE), so the kernel backs it with huge pages as it
// is touched wherever /sys/kernel/mm/transparent_hugepage/enabled is
// "always" or "madvise" (with "never" the buffer works on base pages).
//
// The memory is outside Go's heap: C code may keep it (the C ABI's
// occlMemAlloc returns it), and it lives until Free, whatever refers to it.
// Every Alloc maps fresh memory, which the kernel zeroes as it is first
// touched: allocate long-lived buffers once and reuse them.
package hugemem

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// PageSize is the size of a transparent huge page with 4 KiB base pages
// (amd64; arm64 with 4 KiB pages). Buffers of at least PageSize bytes
// start on a multiple of it.
const PageSize = 2 << 20

// ErrNotAllocated is returned by Free for a slice that does not start
// where a live buffer of Alloc starts (never allocated here, or freed).
var ErrNotAllocated = errors.New("hugemem: not a buffer of Alloc (or freed already)")

// live maps the address of every buffer Alloc returned and Free has not
// released to its mapping.
var live = struct {
	sync.Mutex
	m map[uintptr][]byte
}{m: map[uintptr][]byte{}}

// Alloc returns n bytes (n > 0) of zeroed memory outside Go's heap. From
// PageSize bytes up it starts on a huge-page boundary and is advised for
// transparent huge pages; smaller buffers are page-aligned. Release it
// with Free.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("hugemem: allocate %d bytes: size must be positive", n)
	}
	b, mapping, err := allocate(n)
	if err != nil {
		return nil, fmt.Errorf("hugemem: allocate %d bytes: %w", n, err)
	}
	live.Lock()
	live.m[addr(b)] = mapping
	live.Unlock()
	return b, nil
}

// Free releases a buffer of Alloc; b must start where it starts (its
// length does not matter). Any use of the buffer afterwards faults.
func Free(b []byte) error {
	if cap(b) == 0 {
		return ErrNotAllocated
	}
	return FreeAt(addr(b))
}

// FreeAt releases the buffer of Alloc that starts at p, for callers that
// hold its address only (the C ABI).
func FreeAt(p uintptr) error {
	live.Lock()
	mapping, ok := live.m[p]
	delete(live.m, p)
	live.Unlock()
	if !ok {
		return ErrNotAllocated
	}
	if err := release(mapping); err != nil {
		return fmt.Errorf("hugemem: free %#x: %w", p, err)
	}
	return nil
}

// addr returns the address of b's first byte.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
