package rdma

import (
	"testing"

	"github.com/occl/occl/transport/rdma/verbs"
)

func newCache(t *testing.T, maxBytes int64, maxEntries int) (*RegCache, *verbs.EmuDevice) {
	t.Helper()
	ed, _ := emuPair(t, verbs.EmuConfig{}, nil)
	pd, err := ed.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return NewRegCache(pd, maxBytes, maxEntries), ed
}

func acquire(t *testing.T, c *RegCache, b []byte) *Reg {
	t.Helper()
	r, err := c.Acquire(b, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Contains(b) {
		t.Fatal("registration does not contain the buffer")
	}
	return r
}

func TestRegCacheHitsAndExtension(t *testing.T) {
	c, _ := newCache(t, 1<<30, 16)
	buf := make([]byte, 1<<20)
	c.Release(acquire(t, c, buf[:4096]))
	// Later parts of the same buffer are inside the extended region.
	for _, sub := range [][]byte{buf[4096:8192], buf[100 : 1<<20], buf} {
		c.Release(acquire(t, c, sub))
	}
	// Less access than registered also hits; more does not.
	r, _ := c.Acquire(buf[10:20], 0)
	c.Release(r)
	s := c.Stats()
	if s.Misses != 1 || s.Hits != 4 || s.Entries != 1 || s.Bytes != 1<<20 {
		t.Fatalf("stats %+v", s)
	}
	other := make([]byte, 100)
	c.Release(acquire(t, c, other))
	if s := c.Stats(); s.Misses != 2 || s.Entries != 2 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := c.Acquire(nil, 0); err == nil {
		t.Fatal("empty buffer registered")
	}
}

func TestRegCacheLRUEviction(t *testing.T) {
	c, _ := newCache(t, 1<<30, 3)
	bufs := make([][]byte, 5)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	for _, b := range bufs[:3] {
		c.Release(acquire(t, c, b))
	}
	// Touch 0, so 1 is the least recently used.
	c.Release(acquire(t, c, bufs[0]))
	c.Release(acquire(t, c, bufs[3])) // evicts 1
	if s := c.Stats(); s.Evictions != 1 || s.Entries != 3 {
		t.Fatalf("stats %+v", s)
	}
	before := c.Stats().Misses
	c.Release(acquire(t, c, bufs[0])) // still cached
	c.Release(acquire(t, c, bufs[2])) // still cached
	if c.Stats().Misses != before {
		t.Fatal("a recently used region was evicted")
	}
	c.Release(acquire(t, c, bufs[1])) // was evicted
	if c.Stats().Misses != before+1 {
		t.Fatal("the least recently used region was not the one evicted")
	}
}

func TestRegCacheByteBound(t *testing.T) {
	c, ed := newCache(t, 64<<10, 100)
	var bufs [][]byte
	for i := 0; i < 10; i++ {
		b := make([]byte, 16<<10)
		bufs = append(bufs, b)
		c.Release(acquire(t, c, b[:16<<10:16<<10]))
		if s := c.Stats(); s.Bytes > 64<<10 {
			t.Fatalf("cache holds %d bytes, bound %d", s.Bytes, 64<<10)
		}
	}
	if s := c.Stats(); s.Entries != 4 || s.Evictions != 6 {
		t.Fatalf("stats %+v", s)
	}
	// Regions in use are never evicted: with all of them held, a new one
	// is registered for its use only.
	held := make([]*Reg, 0, 4)
	for _, b := range bufs[6:] {
		held = append(held, acquire(t, c, b))
	}
	extra := acquire(t, c, make([]byte, 16<<10))
	if s := c.Stats(); s.Uncached != 1 || s.Entries != 4 {
		t.Fatalf("stats %+v", s)
	}
	c.Release(extra) // deregistered now
	for _, r := range held {
		c.Release(r)
	}
	// A buffer larger than the bound is never cached.
	big := acquire(t, c, make([]byte, 128<<10))
	c.Release(big)
	if s := c.Stats(); s.Uncached != 2 || s.Bytes > 64<<10 {
		t.Fatalf("stats %+v", s)
	}
	_ = ed
}

// Invalidation deregisters: a peer holding the old remote key can no
// longer write.
func TestRegCacheInvalidate(t *testing.T) {
	c, _ := newCache(t, 1<<30, 16)
	a, b := make([]byte, 8192), make([]byte, 8192)
	ra := acquire(t, c, a)
	c.Release(acquire(t, c, b))
	c.Invalidate(b[100:200]) // idle: dropped now
	c.Invalidate(a)          // in use: dropped at release
	if s := c.Stats(); s.Entries != 0 || s.Invalidations != 2 {
		t.Fatalf("stats %+v", s)
	}
	if ra.buf == nil {
		t.Fatal("a region in use was deregistered")
	}
	c.Release(ra)
	if ra.buf != nil {
		t.Fatal("an invalidated region survived its release")
	}
	before := c.Stats().Misses
	c.Release(acquire(t, c, a))
	if c.Stats().Misses != before+1 {
		t.Fatal("an invalidated region was reused")
	}
	r := acquire(t, c, a)
	c.InvalidateReg(r)
	c.Release(r)
	c.Release(acquire(t, c, b))
	c.Purge()
	if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
		t.Fatalf("stats after purge %+v", s)
	}
}
