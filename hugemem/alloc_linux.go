package hugemem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// sharedSeals are the seals of a shared buffer's memory file: its size can
// neither shrink, which would make a peer's mapping of it fault, nor grow,
// and the seals cannot change.
const sharedSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// allocate maps n bytes, from PageSize up with a huge page's slack so that
// the buffer can start on a huge-page boundary, and advises the buffer for
// huge pages. From SharedMin up the buffer is a sealed memory file's
// (memfd_create) mapping, shared, whose descriptor it returns; should that
// fail (no descriptors left, say) it is private anonymous memory, as
// smaller buffers are, and fd is -1. It returns the buffer and the whole
// mapping.
func allocate(n int) (b, mapping []byte, fd int, err error) {
	if n >= SharedMin {
		if b, mapping, fd, err := allocateShared(n); err == nil {
			return b, mapping, fd, nil
		}
	}
	if n < PageSize {
		m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, nil, -1, err
		}
		return m[:n:n], m, -1, nil
	}
	m, err := unix.Mmap(-1, 0, n+PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, -1, err
	}
	b = aligned(m, n)
	if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
		unix.Munmap(m)
		return nil, nil, -1, err
	}
	return b, m, -1, nil
}

// aligned returns the n bytes of m from its first huge-page boundary.
func aligned(m []byte, n int) []byte {
	off := int((PageSize - addr(m)%PageSize) % PageSize)
	return m[off : off+n : off+n]
}

// allocateShared maps n bytes of a new memory file, sealed (sharedSeals),
// from PageSize up on a huge-page boundary of a reservation with a huge
// page's slack, advised for huge pages (which the kernel honours for
// shared memory only where /sys/kernel/mm/transparent_hugepage/
// shmem_enabled allows it).
func allocateShared(n int) (b, mapping []byte, fd int, err error) {
	size := pageRound(n)
	fd, err = unix.MemfdCreate("occl-hugemem", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, -1, err
	}
	fail := func(err error) ([]byte, []byte, int, error) {
		if mapping != nil {
			unix.Munmap(mapping)
		}
		unix.Close(fd)
		return nil, nil, -1, err
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sharedSeals); err != nil {
		return fail(err)
	}
	slack := 0
	if n >= PageSize {
		slack = PageSize
	}
	// Reserve the range, then map the file over its aligned part.
	mapping, err = unix.Mmap(-1, 0, size+slack, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fail(err)
	}
	at := mapping
	if slack != 0 {
		at = aligned(mapping, size)
	}
	if _, err := unix.MmapPtr(fd, 0, unsafe.Pointer(unsafe.SliceData(at)), uintptr(size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		return fail(err)
	}
	b = at[:n:n]
	if n >= PageSize {
		unix.Madvise(at[:size], unix.MADV_HUGEPAGE) // advice only
	}
	return b, mapping, fd, nil
}

// release unmaps a mapping of allocate and closes its memory file, if any.
func release(mapping []byte, fd int) error {
	err := unix.Munmap(mapping)
	if fd >= 0 {
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
	}
	return err
}
