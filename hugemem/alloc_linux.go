package hugemem

import "golang.org/x/sys/unix"

// allocate maps n bytes, from PageSize up with a huge page's slack so that
// the buffer can start on a huge-page boundary, and advises the buffer for
// huge pages. It returns the buffer and the whole mapping.
func allocate(n int) (b, mapping []byte, err error) {
	if n < PageSize {
		m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, nil, err
		}
		return m[:n:n], m, nil
	}
	m, err := unix.Mmap(-1, 0, n+PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, err
	}
	off := int((PageSize - addr(m)%PageSize) % PageSize)
	b = m[off : off+n : off+n]
	if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
		unix.Munmap(m)
		return nil, nil, err
	}
	return b, m, nil
}

// release unmaps a mapping of allocate.
func release(mapping []byte) error { return unix.Munmap(mapping) }
