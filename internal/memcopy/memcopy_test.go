package memcopy

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestCopyMatchesBuiltin checks Copy against the built-in copy over sizes
// on both sides of Min, unaligned offsets and unequal lengths.
func TestCopyMatchesBuiltin(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 1<<20+64)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for _, n := range []int{0, 1, 63, Min - 1, Min, Min + 1, 100000, 1 << 20} {
		for _, off := range []int{0, 1, 7, 63} {
			for _, short := range []int{0, 1} {
				want := make([]byte, n+64)
				got := make([]byte, n+64)
				dl := max(n-short, 0)
				w := copy(want[off:off+dl], src[off:off+n])
				g := Copy(got[off:off+dl], src[off:off+n])
				if g != w || !bytes.Equal(got, want) {
					t.Fatalf("n %d offset %d dst short by %d: copied %d (want %d), bytes differ: %v", n, off, short, g, w, !bytes.Equal(got, want))
				}
			}
		}
	}
}

func BenchmarkCopy(b *testing.B) {
	for _, n := range []int{4 << 10, 64 << 10, 256 << 10} {
		src, dst := make([]byte, 8<<20), make([]byte, 8<<20)
		for _, c := range []struct {
			name string
			f    func(dst, src []byte) int
		}{{"builtin", func(d, s []byte) int { return copy(d, s) }}, {"memcopy", Copy}} {
			b.Run(c.name+"/"+sizeName(n), func(b *testing.B) {
				b.SetBytes(int64(n))
				off := 0
				for range b.N {
					if off+n > len(src) {
						off = 0
					}
					c.f(dst[off:off+n], src[off:off+n])
					off += n
				}
			})
		}
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
