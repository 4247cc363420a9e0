package rdma

import (
	"bytes"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmapAt maps size bytes of anonymous memory, at addr if it is not nil
// (replacing what is there), as C's malloc does for large blocks.
func mmapAt(t *testing.T, addr unsafe.Pointer, size int) []byte {
	t.Helper()
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if addr != nil {
		flags |= unix.MAP_FIXED
	}
	p, err := unix.MmapPtr(-1, 0, addr, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		t.Fatal(err)
	}
	if addr != nil && p != addr {
		t.Fatalf("mapped at %p, asked for %p", p, addr)
	}
	return unsafe.Slice((*byte)(p), size)
}

func munmap(t *testing.T, b []byte) {
	t.Helper()
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))); err != nil {
		t.Fatal(err)
	}
}

// TestRegCacheForeignMemory: memory the Go runtime does not own is freed
// and mapped again at the same address (free and malloc in C); the cache
// must not hand out the registration of the old pages for it.
func TestRegCacheForeignMemory(t *testing.T) {
	SetForeignBuffers(true)
	defer SetForeignBuffers(false)
	c, _ := newCache(t, 1<<30, 16)
	const size = 1 << 16
	b1 := mmapAt(t, nil, size)
	r1 := acquire(t, c, b1)
	c.Release(r1)
	if s := c.Stats(); s.Entries != 0 {
		t.Fatalf("a registration of foreign memory was kept: %+v", s)
	}
	addr := unsafe.Pointer(unsafe.SliceData(b1))
	munmap(t, b1)
	b2 := mmapAt(t, addr, size)
	defer munmap(t, b2)
	r2 := acquire(t, c, b2)
	defer c.Release(r2)
	if r2 == r1 || r2.mr == r1.mr {
		t.Fatal("the memory mapped again at the same address got the old pages' registration")
	}
	if s := c.Stats(); s.Hits != 0 || s.Misses != 2 {
		t.Fatalf("stats %+v, want two registrations and no hit", s)
	}
}

// TestForeignMemoryAcrossConn: a receiver's buffer of foreign memory is
// freed and mapped again at the same address between two large messages
// (written into it by RDMA WRITE); each message lands in the memory mapped
// at the time, and no registration of it outlives its message.
func TestForeignMemoryAcrossConn(t *testing.T) {
	SetForeignBuffers(true)
	defer SetForeignBuffers(false)
	a, b := pairWith(t, pairOpts{})
	const size = 1 << 20 // beyond the eager limit: written in place
	if size <= b.EagerLimit() {
		t.Fatalf("eager limit %d: the message would not be written in place", b.EagerLimit())
	}
	ctx := ctxT(t, 20*time.Second)
	buf := mmapAt(t, nil, size)
	addr := unsafe.Pointer(unsafe.SliceData(buf))
	for i := range 2 {
		want := pattern(size, byte(0x10*i+1))
		errc := make(chan error, 1)
		go func() { errc <- a.Send(ctx, hdr(uint64(i+1), 0), want) }()
		if err := b.Recv(ctx, hdr(uint64(i+1), 0), buf); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("message %d: send: %v", i, err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("message %d did not land in the buffer", i)
		}
		if s := b.dev.cache.Stats(); s.Entries != 0 || s.Hits != 0 {
			t.Fatalf("message %d: the receiver's cache %+v kept or reused a registration of foreign memory", i, s)
		}
		munmap(t, buf)
		buf = mmapAt(t, addr, size) // the same address, other pages
	}
	munmap(t, buf)
}
