package rdma

import (
	"errors"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/occl/occl/transport/rdma/verbs"
)

// Default bounds of a registration cache.
const (
	DefaultCacheBytes   = 1 << 30
	DefaultCacheEntries = 256
)

// RegCache registers user buffers with a protection domain once and keeps
// the registrations for reuse, like NCCL's and UCX's registration caches:
// registering memory pins it and costs a system call and page-table work,
// far more than sending a message of a few hundred kilobytes.
//
// A lookup hits when a cached region with the rights asked for contains
// the whole buffer. A miss registers the buffer extended to its capacity
// (b[:cap(b)], at most a quarter of the byte bound), so that the later
// chunks of a large buffer that a pipelined collective sends hit the same
// region. Regions in use (acquired and not yet released) are never
// evicted; the others are evicted least recently used first when the
// cache would exceed its bounds in bytes or entries. A buffer that cannot
// be cached within the bounds is registered for the one use and
// deregistered when released.
//
// Invalidate drops the regions that overlap a buffer (deregistering them
// at once, or at their last release if they are in use): the transport
// invalidates a receive buffer whose rendezvous failed, so that the peer,
// which knows its remote key, can no longer write into it. Purge drops
// everything.
//
// Memory safety in Go: a cached region keeps its buffer referenced, so the
// garbage collector can neither free it nor (with the cgo verbs) move it
// while the device may access it; the cost is that cached buffers stay
// alive until evicted, which the byte bound limits. Since a buffer cannot
// be freed while it is cached, a cached address always names the memory
// it was registered for. That holds for memory the Go runtime allocated
// only: memory from C's malloc, mmap or Python can be freed while cached
// and its address reused for other pages, and a stale registration would
// pin the old pages, so that the peer's writes land there (the problem C
// caches solve with malloc hooks). Such buffers are never cached once
// SetForeignBuffers says they may be given.
type RegCache struct {
	pd         verbs.ProtectionDomain
	maxBytes   int64
	maxEntries int

	mu      sync.Mutex
	head    *Reg // most recently used
	tail    *Reg
	bytes   int64
	entries int
	stats   CacheStats
}

// CacheStats counts what a cache did.
type CacheStats struct {
	Hits, Misses, Evictions, Uncached, Invalidations uint64
	Bytes                                            int64
	Entries                                          int
}

// Reg is a registration acquired from a RegCache.
type Reg struct {
	mr         verbs.MemoryRegion
	buf        []byte // keeps the memory alive
	start, end uint64
	access     verbs.Access
	refs       int
	cached     bool
	dead       bool
	prev, next *Reg
}

// LKey is the region's local key.
func (r *Reg) LKey() uint32 { return r.mr.LKey() }

// RKey is the region's remote key.
func (r *Reg) RKey() uint32 { return r.mr.RKey() }

// Contains reports whether b lies inside the region.
func (r *Reg) Contains(b []byte) bool {
	a := addrOf(b)
	return a >= r.start && a+uint64(len(b)) <= r.end
}

// foreignBuffers is set by SetForeignBuffers.
var foreignBuffers atomic.Bool

// SetForeignBuffers declares whether the user buffers given to this
// process's RDMA connections may be memory the Go runtime did not allocate
// (C's malloc, mmap, the allocators of Python and its array libraries).
// While it is on, registration caches keep no registration of a user
// buffer beyond its use: each Acquire registers the buffer and its Release
// deregisters it, so a freed buffer whose address comes back with other
// pages is registered afresh. The C library sets it when it loads, since
// every buffer it is given is C memory; a Go program that passes such
// memory must set it too.
func SetForeignBuffers(on bool) { foreignBuffers.Store(on) }

// ForeignBuffers reports what SetForeignBuffers last set.
func ForeignBuffers() bool { return foreignBuffers.Load() }

// NewRegCache makes a cache of registrations with pd, bounded to maxBytes
// registered bytes and maxEntries regions (0: the defaults).
func NewRegCache(pd verbs.ProtectionDomain, maxBytes int64, maxEntries int) *RegCache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	if maxEntries <= 0 {
		maxEntries = DefaultCacheEntries
	}
	return &RegCache{pd: pd, maxBytes: maxBytes, maxEntries: maxEntries}
}

// addrOf is the address of b's first byte (of where it would be, for an
// empty slice).
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

var errEmpty = errors.New("rdma: cannot register an empty buffer")

// Acquire returns a registration that contains b with at least the rights
// access. The caller must Release it.
func (c *RegCache) Acquire(b []byte, access verbs.Access) (*Reg, error) {
	if len(b) == 0 {
		return nil, errEmpty
	}
	if foreignBuffers.Load() {
		return c.acquireUncached(b, access)
	}
	a, n := addrOf(b), uint64(len(b))
	c.mu.Lock()
	for r := c.head; r != nil; r = r.next {
		if r.start <= a && a+n <= r.end && r.access&access == access {
			r.refs++
			c.toFront(r)
			c.stats.Hits++
			c.mu.Unlock()
			return r, nil
		}
	}
	c.stats.Misses++
	c.mu.Unlock()

	span := b
	if ext := min(cap(b), int(min(c.maxBytes/4, int64(^uint(0)>>1)))); ext > len(b) {
		span = b[:ext]
	}
	mr, err := c.pd.RegisterMemory(span, access)
	if err != nil && len(span) > len(b) {
		span = b
		mr, err = c.pd.RegisterMemory(span, access)
	}
	if err != nil {
		return nil, err
	}
	r := &Reg{mr: mr, buf: span, start: addrOf(span), access: access, refs: 1}
	r.end = r.start + uint64(len(span))
	size := int64(len(span))

	c.mu.Lock()
	defer c.mu.Unlock()
	var victims []*Reg
	for c.bytes+size > c.maxBytes || c.entries+1 > c.maxEntries {
		v := c.lruIdle()
		if v == nil {
			break
		}
		c.unlink(v)
		victims = append(victims, v)
		c.stats.Evictions++
	}
	if c.bytes+size <= c.maxBytes && c.entries+1 <= c.maxEntries {
		r.cached = true
		c.pushFront(r)
	} else {
		c.stats.Uncached++
	}
	for _, v := range victims {
		v.mr.Deregister()
		v.buf = nil
	}
	return r, nil
}

// acquireUncached registers b for one use: its Release deregisters it.
func (c *RegCache) acquireUncached(b []byte, access verbs.Access) (*Reg, error) {
	mr, err := c.pd.RegisterMemory(b, access)
	if err != nil {
		return nil, err
	}
	r := &Reg{mr: mr, buf: b, start: addrOf(b), access: access, refs: 1}
	r.end = r.start + uint64(len(b))
	c.mu.Lock()
	c.stats.Misses++
	c.stats.Uncached++
	c.mu.Unlock()
	return r, nil
}

// Release returns a registration acquired from the cache.
func (c *RegCache) Release(r *Reg) {
	c.mu.Lock()
	r.refs--
	drop := r.refs == 0 && (!r.cached || r.dead)
	c.mu.Unlock()
	if drop {
		r.mr.Deregister()
		r.buf = nil
	}
}

// Invalidate drops every region that overlaps b: idle ones are
// deregistered now, regions in use when they are released.
func (c *RegCache) Invalidate(b []byte) {
	a, n := addrOf(b), uint64(max(len(b), 1))
	c.mu.Lock()
	var victims []*Reg
	for r := c.head; r != nil; {
		next := r.next
		if r.start < a+n && a < r.end {
			c.unlink(r)
			c.stats.Invalidations++
			if r.refs == 0 {
				victims = append(victims, r)
			} else {
				r.dead = true
			}
		}
		r = next
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.mr.Deregister()
		v.buf = nil
	}
}

// InvalidateReg drops one registration, as Invalidate does for the
// regions overlapping a buffer. It also applies to uncached ones.
func (c *RegCache) InvalidateReg(r *Reg) {
	c.mu.Lock()
	if r.cached && !r.dead {
		c.unlink(r)
		c.stats.Invalidations++
	}
	r.dead = true
	drop := r.refs == 0 && r.buf != nil
	c.mu.Unlock()
	if drop {
		r.mr.Deregister()
		r.buf = nil
	}
}

// Purge drops every cached region.
func (c *RegCache) Purge() {
	c.mu.Lock()
	var victims []*Reg
	for r := c.head; r != nil; {
		next := r.next
		c.unlink(r)
		if r.refs == 0 {
			victims = append(victims, r)
		} else {
			r.dead = true
		}
		r = next
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.mr.Deregister()
		v.buf = nil
	}
}

// Stats returns the cache's counters.
func (c *RegCache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Bytes, s.Entries = c.bytes, c.entries
	return s
}

func (c *RegCache) lruIdle() *Reg {
	for r := c.tail; r != nil; r = r.prev {
		if r.refs == 0 {
			return r
		}
	}
	return nil
}

func (c *RegCache) pushFront(r *Reg) {
	r.prev, r.next = nil, c.head
	if c.head != nil {
		c.head.prev = r
	}
	c.head = r
	if c.tail == nil {
		c.tail = r
	}
	c.bytes += int64(len(r.buf))
	c.entries++
}

func (c *RegCache) unlink(r *Reg) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		c.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		c.tail = r.prev
	}
	r.prev, r.next = nil, nil
	r.cached = false
	c.bytes -= int64(len(r.buf))
	c.entries--
}

func (c *RegCache) toFront(r *Reg) {
	if c.head == r {
		return
	}
	r.prev.next = r.next
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		c.tail = r.prev
	}
	r.prev, r.next = nil, c.head
	c.head.prev = r
	c.head = r
}
