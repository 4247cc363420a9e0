package hugemem

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestShared: buffers from SharedMin up are mappings of their own sealed
// memory file, which Shared finds for any range inside them and for no
// range that leaves them; smaller buffers are not shared; Free retires the
// region and counts in Released.
func TestShared(t *testing.T) {
	small, err := Alloc(SharedMin - 1)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(small)
	if _, ok := Shared(addr(small), 1); ok {
		t.Errorf("a buffer of %d bytes is shared", len(small))
	}
	ids := map[uint64]bool{}
	for _, n := range []int{SharedMin, 100_000, PageSize + 12345} {
		b, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		a := addr(b)
		r, ok := Shared(a, n)
		if !ok || r.Base != a || r.Size < n || r.Size%4096 != 0 || r.FD < 0 || r.ID == 0 || ids[r.ID] {
			t.Fatalf("Shared(Alloc(%d)) = %+v, %v", n, r, ok)
		}
		ids[r.ID] = true
		if r2, ok := Shared(a+100, n-100); !ok || r2 != r {
			t.Errorf("Alloc(%d): Shared of an inner range = %+v, %v", n, r2, ok)
		}
		for _, out := range [][2]int{{0, r.Size + 1}, {r.Size, 1}, {-1, 1}, {10, -1}} {
			if _, ok := Shared(a+uintptr(out[0]), out[1]); ok {
				t.Errorf("Alloc(%d): Shared(base%+d, %d) found a region", n, out[0], out[1])
			}
		}
		seals, err := unix.FcntlInt(uintptr(r.FD), unix.F_GET_SEALS, 0)
		if err != nil || seals&sharedSeals != sharedSeals {
			t.Errorf("Alloc(%d): seals %#x, %v; want %#x", n, seals, err, sharedSeals)
		}
		var st unix.Stat_t
		if err := unix.Fstat(r.FD, &st); err != nil || st.Size != int64(r.Size) {
			t.Errorf("Alloc(%d): file of %d bytes (%v), region of %d", n, st.Size, err, r.Size)
		}
		// The file is the buffer: a second mapping sees its bytes.
		b[n-1] = 0x5a
		m, err := unix.Mmap(r.FD, 0, r.Size, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		if m[n-1] != 0x5a {
			t.Errorf("Alloc(%d): the file does not hold the buffer's bytes", n)
		}
		unix.Munmap(m)
		before := Released()
		if err := Free(b); err != nil {
			t.Fatal(err)
		}
		if Released() != before+1 {
			t.Errorf("Alloc(%d): Released went from %d to %d on Free", n, before, Released())
		}
		if _, ok := Shared(a, 1); ok {
			t.Errorf("Alloc(%d): still shared after Free", n)
		}
		if _, err := unix.FcntlInt(uintptr(r.FD), unix.F_GET_SEALS, 0); err == nil {
			// The number may name another file by now; ours is gone
			// only if nothing else reused it.
			var st2 unix.Stat_t
			if unix.Fstat(r.FD, &st2) == nil && st2.Ino == st.Ino && st2.Dev == st.Dev {
				t.Errorf("Alloc(%d): the memory file is still open after Free", n)
			}
		}
	}
}

// BenchmarkShared: the lookup a lending connection makes for every block
// it lends (and, below its threshold, asks about), with 8 shared buffers
// live: one inside them, one on the heap.
func BenchmarkShared(b *testing.B) {
	bufs := make([][]byte, 8)
	for i := range bufs {
		buf, err := Alloc(SharedMin)
		if err != nil {
			b.Fatal(err)
		}
		defer Free(buf)
		bufs[i] = buf
	}
	heap := make([]byte, 1<<16)
	for _, tc := range []struct {
		name string
		p    []byte
		want bool
	}{{"shared", bufs[5][100:], true}, {"heap", heap, false}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, ok := Shared(addr(tc.p), 4096); ok != tc.want {
					b.Fatalf("Shared = %v", ok)
				}
			}
		})
	}
}
