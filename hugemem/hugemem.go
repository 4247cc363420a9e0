// Package hugemem allocates buffers for transfers, as ncclMemAlloc hands
// out memory suited to NCCL's transports: from SharedMin bytes shared
// memory that the peer processes of a host map, from PageSize bytes
// advised for transparent huge pages.
//
// A buffer of a few MiB on 4 KiB pages costs a collective twice over: the
// copies walk 512 TLB entries per 2 MiB, and where a peer reads the buffer
// across processes with process_vm_readv (occl lends large blocks on
// shared memory, see transport/shm) the kernel pins it one base page at a
// time. Go's heap and glibc's malloc get transparent huge pages only where
// the system's policy is "always"; with the common "madvise" policy a
// buffer gets them only if it is advised to. Alloc maps the buffer itself,
// from PageSize up on a 2 MiB boundary, and advises it (MADV_HUGEPAGE), so
// the kernel backs it with huge pages as it is touched wherever the policy
// allows (for private memory /sys/kernel/mm/transparent_hugepage/enabled,
// for shared memory .../shmem_enabled; otherwise the buffer works on base
// pages).
//
// The memory is outside Go's heap: C code may keep it (the C ABI's
// occlMemAlloc returns it), and it lives until Free, whatever refers to it.
// Every Alloc maps fresh memory, which the kernel zeroes as it is first
// touched: allocate long-lived buffers once and reuse them.
//
// Buffers of SharedMin bytes or more are shared memory: each is the
// mapping of its own memory file (memfd_create), sealed so that its size
// cannot change, which another process allowed to read this one's memory
// (the same permission process_vm_readv needs) can map too. Shared finds
// the file of a buffer; occl's shared-memory transport sends it with the
// blocks it lends, and the receiver maps it once and then copies lent
// blocks with memcpy instead of a process_vm_readv that pins the pages on
// every call. Being shared, such a buffer is not copied on write across
// fork: a child process writes the parent's buffer. Each holds a file
// descriptor of this process until Free (Go raises the soft limit on open
// files to the hard one as a program starts); where no descriptor or
// memory file can be had, Alloc returns private memory instead, which
// peers read with process_vm_readv. Where the system's shmem_enabled
// policy is "never" (a common default) shared buffers are on base pages.
package hugemem

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"
)

// PageSize is the size of a transparent huge page with 4 KiB base pages
// (amd64; arm64 with 4 KiB pages). Buffers of at least PageSize bytes
// start on a multiple of it.
const PageSize = 2 << 20

// ErrNotAllocated is returned by Free for a slice that does not start
// where a live buffer of Alloc starts (never allocated here, or freed).
var ErrNotAllocated = errors.New("hugemem: not a buffer of Alloc (or freed already)")

// SharedMin is the smallest buffer Alloc makes shared (see the package
// comment); smaller buffers are private.
const SharedMin = 64 << 10

// Region is a shared buffer of Alloc: the memory file it maps, and where.
type Region struct {
	// ID identifies the buffer among every shared buffer this process
	// has allocated; it is never 0 and never reused.
	ID uint64
	// Base is the address of the buffer's first byte, Size the bytes of
	// its file, mapped from Base (its length rounded up to a page).
	Base uintptr
	Size int
	// FD is the file's descriptor in this process, open until Free.
	FD int
}

// buffer is a live buffer of Alloc: its whole mapping and, if shared, its
// region (FD -1 otherwise).
type buffer struct {
	mapping []byte
	region  Region
}

// live maps the address of every buffer Alloc returned and Free has not
// released to it; shared holds the regions of the shared ones, sorted by
// address, replaced (never changed) under live's lock.
var (
	live = struct {
		sync.Mutex
		m      map[uintptr]buffer
		lastID uint64
	}{m: map[uintptr]buffer{}}
	shared   atomic.Pointer[[]Region]
	released atomic.Uint64
)

// Shared returns the region of the shared buffer of Alloc that holds the n
// bytes at p, if there is one. It takes no lock.
func Shared(p uintptr, n int) (Region, bool) {
	rs := shared.Load()
	if rs == nil || n < 0 {
		return Region{}, false
	}
	i := sort.Search(len(*rs), func(i int) bool { return (*rs)[i].Base > p }) - 1
	if i < 0 {
		return Region{}, false
	}
	r := (*rs)[i]
	if p-r.Base > uintptr(r.Size) || uintptr(n) > uintptr(r.Size)-(p-r.Base) {
		return Region{}, false
	}
	return r, true
}

// Released returns how many shared buffers Free has released in this
// process: a process that maps another's buffers drops its mappings when
// this count changes there, rather than keep memory the other has freed.
func Released() uint64 { return released.Load() }

// publishShared replaces the sorted list of shared regions; live's lock is
// held.
func publishShared() {
	rs := make([]Region, 0, len(live.m))
	for _, b := range live.m {
		if b.region.FD >= 0 {
			rs = append(rs, b.region)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Base < rs[j].Base })
	shared.Store(&rs)
}

// Alloc returns n bytes (n > 0) of zeroed memory outside Go's heap. From
// SharedMin bytes up it is shared (see Shared), from PageSize bytes up it
// starts on a huge-page boundary and is advised for transparent huge
// pages; smaller buffers are page-aligned. Release it with Free.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("hugemem: allocate %d bytes: size must be positive", n)
	}
	b, mapping, fd, err := allocate(n)
	if err != nil {
		return nil, fmt.Errorf("hugemem: allocate %d bytes: %w", n, err)
	}
	live.Lock()
	defer live.Unlock()
	e := buffer{mapping: mapping, region: Region{FD: -1}}
	if fd >= 0 {
		live.lastID++
		e.region = Region{ID: live.lastID, Base: addr(b), Size: pageRound(n), FD: fd}
	}
	live.m[addr(b)] = e
	if fd >= 0 {
		publishShared()
	}
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
	e, ok := live.m[p]
	delete(live.m, p)
	if ok && e.region.FD >= 0 {
		publishShared()
		released.Add(1)
	}
	live.Unlock()
	if !ok {
		return ErrNotAllocated
	}
	if err := release(e.mapping, e.region.FD); err != nil {
		return fmt.Errorf("hugemem: free %#x: %w", p, err)
	}
	return nil
}

// pageRound returns n rounded up to a multiple of the base page size: the
// size of a shared buffer's memory file.
func pageRound(n int) int { return (n + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1) }

// addr returns the address of b's first byte.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
