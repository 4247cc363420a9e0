package shm

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/transport"
)

// Lent blocks from the peer's shared buffers (hugemem.Region): a sender
// whose lent payload lies in a shared buffer of hugemem.Alloc names the
// buffer's memory file in the descriptor, and the receiver maps that file
// (pidfd_getfd on the peer's pidfd, then mmap, read-only) the first time
// it sees it. From then on it copies such payloads with memcpy, without
// the system call and page pinning of process_vm_readv. A mapping that
// cannot be made (no permission, no descriptors left, a file that is not
// sealed against shrinking) turns this off for the connection, and lent
// payloads come by process_vm_readv as before.

// peerMaps is how many of the peer's buffers a connection keeps mapped;
// the least recently used goes first.
const peerMaps = 16

// peerMap is a mapping of one of the peer's shared buffers.
type peerMap struct {
	id   uint64  // the buffer's hugemem.Region.ID in the peer
	base uintptr // its address in the peer
	mem  []byte  // its mapping here
}

// peerRegions is what a receiver has mapped of the peer's shared buffers.
// Only Recv maps (one at a time). Close retires the mappings (retire):
// the peer's memory is no longer held once it returns, though a Recv may
// still be copying from a mapping then; the replacements are unmapped
// when the connection is garbage (see newConn).
type peerRegions struct {
	mu sync.Mutex // source against retire
	// released is the peer's hugemem.Released count when the mappings
	// were made: when it changes, the peer has freed a shared buffer, and
	// every mapping goes (one of them may hold the freed memory).
	released uint64
	maps     []peerMap // the least recently used first
	off      bool      // a mapping failed: process_vm_readv from now on
	// mapped counts the payloads copied from a mapping (tests read it).
	mapped uint64
}

// source returns the n bytes at addr in the peer's buffer id (at base,
// descriptor fd in the peer), mapping the buffer through the peer's pidfd
// if it is not mapped yet, or nil if the payload is to be read with
// process_vm_readv: the descriptor names no shared buffer, or mapping is
// off. A payload outside the buffer it names is a corrupt descriptor.
func (p *peerRegions) source(pidfd int32, id, base, fd, released, addr, n uint64) ([]byte, error) {
	if p == nil || id == 0 {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off {
		return nil, nil
	}
	if released != p.released {
		p.unmapAll()
		p.released = released
	}
	i := len(p.maps) - 1
	for i >= 0 && p.maps[i].id != id {
		i--
	}
	if i < 0 {
		m, err := mapBuffer(pidfd, fd)
		if err != nil {
			// Reading by process_vm_readv still works.
			p.off = true
			p.unmapAll()
			return nil, nil
		}
		if len(p.maps) == peerMaps {
			unix.Munmap(p.maps[0].mem)
			p.maps = append(p.maps[:0], p.maps[1:]...)
		}
		p.maps = append(p.maps, peerMap{id: id, base: uintptr(base), mem: m})
		i = len(p.maps) - 1
	} else if i != len(p.maps)-1 {
		m := p.maps[i]
		copy(p.maps[i:], p.maps[i+1:])
		p.maps[len(p.maps)-1] = m
		i = len(p.maps) - 1
	}
	m := p.maps[i]
	if m.base != uintptr(base) || addr < base || addr-base > uint64(len(m.mem)) || n > uint64(len(m.mem))-(addr-base) {
		return nil, &transport.FrameError{Reason: fmt.Sprintf("transfer descriptor of %d bytes at %#x in the peer's buffer %d of %d bytes at %#x (known at %#x)", n, addr, id, len(m.mem), base, m.base)}
	}
	p.mapped++
	off := addr - base
	return m.mem[off : off+n : off+n], nil
}

// mapBuffer maps the memory file fd of the process of pidfd, read-only,
// after checking that it is sealed against shrinking, so that no read of
// the mapping can fault.
func mapBuffer(pidfd int32, fd uint64) ([]byte, error) {
	if pidfd < 0 || fd > 1<<31-1 {
		return nil, fmt.Errorf("descriptor %d of pidfd %d", fd, pidfd)
	}
	f, err := unix.PidfdGetfd(int(pidfd), int(fd), 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_getfd: %w", err)
	}
	defer unix.Close(f)
	seals, err := unix.FcntlInt(uintptr(f), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("F_GET_SEALS: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("the file can shrink (seals %#x)", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, err
	}
	if st.Size <= 0 || st.Size > 1<<46 {
		return nil, fmt.Errorf("a file of %d bytes", st.Size)
	}
	return unix.Mmap(f, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
}

// retire turns mapping off and replaces every mapping by zero-filled
// memory (zeroMap): the peer's buffers are no longer mapped here, and a
// Recv still copying from one reads zeros (and fails: the connection is
// closed). unmapAll later unmaps the replacements.
func (p *peerRegions) retire() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.off = true
	for _, m := range p.maps {
		zeroMap(m.mem)
	}
}

// unmapAll unmaps every mapping. The caller holds mu, or is the
// connection's cleanup, when nothing else refers to p.
func (p *peerRegions) unmapAll() {
	for _, m := range p.maps {
		unix.Munmap(m.mem)
	}
	clear(p.maps)
	p.maps = p.maps[:0]
}
