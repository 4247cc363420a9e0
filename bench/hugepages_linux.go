package bench

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page with 4 KiB base pages
// (amd64; arm64 with 4 KiB pages).
const hugePage = 2 << 20

// hugeBuffer returns n bytes of anonymous memory starting on a huge-page
// boundary and advised for transparent huge pages (MADV_HUGEPAGE), which
// the kernel then backs with 2 MiB pages as they are touched where
// /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise",
// and the function that releases it. Below a huge page it returns a heap
// slice (nothing to release).
func hugeBuffer(n int) ([]byte, func() error, error) {
	if n < hugePage {
		return make([]byte, n), func() error { return nil }, nil
	}
	m, err := unix.Mmap(-1, 0, n+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: huge-page buffer of %d bytes: mmap: %w", n, err)
	}
	off := (hugePage - int(uintptr(unsafe.Pointer(unsafe.SliceData(m))))%hugePage) % hugePage
	b := m[off : off+n : off+n]
	if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
		unix.Munmap(m)
		return nil, nil, fmt.Errorf("bench: huge-page buffer of %d bytes: madvise: %w", n, err)
	}
	return b, func() error { return unix.Munmap(m) }, nil
}
