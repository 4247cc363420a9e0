package memcopy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestLargestUnifiedCache reads a sysfs cache directory made for the test:
// the largest unified cache counts, not the data and instruction caches
// nor what cannot be read.
func TestLargestUnifiedCache(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ index, typ, size string }{
		{"index0", "Data", "64M"}, // larger, but not unified
		{"index1", "Instruction", "32K"},
		{"index2", "Unified", "512K"},
		{"index3", "Unified", "32768K\n"},
		{"index4", "Unified", "lots"},
		{"index5", "", ""}, // no files
	} {
		d := filepath.Join(dir, c.index)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if c.typ == "" {
			continue
		}
		for name, v := range map[string]string{"type": c.typ + "\n", "size": c.size} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := largestUnifiedCache(dir); got != 32<<20 {
		t.Errorf("largestUnifiedCache = %d, want %d", got, 32<<20)
	}
	if got := largestUnifiedCache(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("largestUnifiedCache of a missing directory = %d, want 0", got)
	}
}

func TestStreamFrom(t *testing.T) {
	for _, c := range []struct{ llc, want int }{
		{0, DefaultStream},
		{32 << 20, 8 << 20},
		{8 << 20, 2 << 20},
		{16 << 10, Min}, // never below the string move's own start
	} {
		if got := streamFrom(c.llc); got != c.want {
			t.Errorf("streamFrom(%d) = %d, want %d", c.llc, got, c.want)
		}
	}
	// This machine's: what the kernel says, or the default.
	llc := lastLevelCache()
	if llc != 0 && llc < 64<<10 {
		t.Errorf("lastLevelCache() = %d: not a last-level cache", llc)
	}
	if got := StreamMin(); got != streamFrom(llc) {
		t.Errorf("StreamMin() = %d, want streamFrom(%d) = %d", got, llc, streamFrom(llc))
	}
	t.Logf("last-level cache %d bytes, streaming copies from %d", llc, StreamMin())
}

// TestDeliver checks Deliver on both sides of the streaming threshold,
// lowered so that the test stays small.
func TestDeliver(t *testing.T) {
	defer func(s int) { stream = s }(StreamMin())
	stream = 256 << 10
	src := make([]byte, stream+4096)
	for i := range src {
		src[i] = byte(i*7 + i>>9)
	}
	for _, n := range []int{Min - 1, Min, stream - 1, stream, stream + 1, stream + 4095} {
		for _, off := range []int{0, 3} {
			t.Run(fmt.Sprint(n, "+", off), func(t *testing.T) {
				dst := make([]byte, n+off)
				if k := Deliver(dst[off:], src[:n]); k != n {
					t.Fatalf("copied %d, want %d", k, n)
				}
				if !bytes.Equal(dst[off:], src[:n]) {
					t.Fatal("bytes differ")
				}
			})
		}
	}
}

// BenchmarkCopyLarge copies ranges around Deliver's streaming threshold
// with the built-in copy (non-temporal from 1 MiB), the string move and
// Deliver, from a source to a destination of their own, as an
// all-to-all's own block is copied.
func BenchmarkCopyLarge(b *testing.B) {
	for _, n := range []int{2 << 20, 8 << 20, 32 << 20} {
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		copy(dst, src)
		b.Run("builtin/"+sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				copy(dst, src)
			}
		})
		if fast {
			b.Run("movsb/"+sizeName(n), func(b *testing.B) {
				b.SetBytes(int64(n))
				for range b.N {
					move(&dst[0], &src[0], uintptr(n))
				}
			})
		}
		b.Run("deliver/"+sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				Deliver(dst, src)
			}
		})
	}
}

// TestStream checks Stream against the built-in copy: lengths on both
// sides of its 64-byte rounds, destinations off their 16-byte boundaries,
// unequal lengths, and a range copied onto itself.
func TestStream(t *testing.T) {
	src := make([]byte, 1<<20+200)
	for i := range src {
		src[i] = byte(i*13 + i>>8)
	}
	for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 1000, 4096 + 17, 1 << 20} {
		for _, off := range []int{0, 1, 8, 15, 16, 33} {
			dst := make([]byte, n+off+64)
			want := bytes.Clone(dst)
			copy(want[off:off+n], src[5:5+n])
			if k := Stream(dst[off:off+n], src[5:]); k != n {
				t.Fatalf("n %d off %d: Stream = %d", n, off, k)
			}
			if !bytes.Equal(dst, want) {
				t.Fatalf("n %d off %d: Stream copied other bytes than the built-in copy", n, off)
			}
		}
	}
	b := bytes.Clone(src[:4096])
	if k := Stream(b, b); k != 4096 || !bytes.Equal(b, src[:4096]) {
		t.Fatalf("Stream onto itself = %d, or changed the bytes", k)
	}
}

// BenchmarkStreamPieces copies 32 MiB in 512 KiB pieces, as a block is
// received piece by piece from a ring: with Copy, and with Stream, whose
// stores do not read every destination line first. Run in one process
// the two are alike; run in two processes at once (go test -c, then two
// -test.cpu 1 runs), which share the memory's bandwidth, Stream took
// 2.59-2.68 ms against 3.03-3.17 for Copy and 3.15-3.36 for the built-in
// copy on a 2-core EPYC.
func BenchmarkStreamPieces(b *testing.B) {
	const total, piece = 32 << 20, 512 << 10
	src, dst := make([]byte, total), make([]byte, total)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	for _, c := range []struct {
		name string
		f    func(dst, src []byte) int
	}{{"builtin", func(d, s []byte) int { return copy(d, s) }}, {"copy", Copy}, {"stream", Stream}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(total)
			b.ReportAllocs()
			for range b.N {
				for off := 0; off < total; off += piece {
					c.f(dst[off:off+piece], src[off:off+piece])
				}
			}
		})
	}
}
