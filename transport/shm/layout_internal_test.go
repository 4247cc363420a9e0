package shm

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkFirstWrite measures the first write to each page of a freshly
// mapped 4 MiB ring file, sized but not allocated (ns/page): what a
// ring's first lap pays per page, mapped the way Init maps it (populated,
// then touched), populated only, and lazily (Config.Lazy). Where the
// hypervisor fills page tables of its own on a page's first access,
// populated-only pays that trap here and touched does not.
func BenchmarkFirstWrite(b *testing.B) {
	const size = 4 << 20
	maps := map[string]func(fd int) ([]byte, error){
		"touched": func(fd int) ([]byte, error) { return mapRing(fd, size, true) },
		"populated": func(fd int) ([]byte, error) {
			return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		},
		"lazy": func(fd int) ([]byte, error) { return mapRing(fd, size, false) },
	}
	for _, name := range []string{"touched", "populated", "lazy"} {
		b.Run(name, func(b *testing.B) {
			page := os.Getpagesize()
			pages := 0
			for b.Loop() {
				b.StopTimer()
				f, err := os.CreateTemp(DefaultDir(), "first-write-")
				if err != nil {
					b.Fatal(err)
				}
				os.Remove(f.Name())
				if err := f.Truncate(size); err != nil {
					b.Fatal(err)
				}
				m, err := maps[name](int(f.Fd()))
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := 0; i < size; i += page {
					m[i] = 1
				}
				pages += size / page
				b.StopTimer()
				unix.Munmap(m)
				f.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pages), "ns/page")
		})
	}
}
