package shm

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring geometry.
const (
	// DefaultCapacity is the size of the data area of each ring.
	DefaultCapacity = 4 << 20
	// MinCapacity and MaxCapacity bound Config.Capacity.
	MinCapacity = 4 << 10
	MaxCapacity = 1 << 30
)

// Layout of the control page at the start of every ring file. Fields that
// change while the ring is in use sit in their own 128-byte slot (two cache
// lines, so that the adjacent-line prefetcher does not pair them either), so
// the producer and the consumer never write the same line.
const (
	ctrlSize = 4096
	slot     = 128

	offMagic    = 0  // uint64, ringMagic; stored last by the creator
	offVersion  = 8  // uint32, ringVersion
	offCtrlSize = 12 // uint32, ctrlSize
	offCapacity = 16 // uint64, bytes in the data area
	offPID      = 24 // uint32, process id of the creator
	offNonce    = 32 // [16]byte, random, also sent in the offer

	offTail         = 1 * slot   // uint64, bytes ever written (producer)
	offHead         = 2 * slot   // uint64, bytes ever read (consumer)
	offDataSeq      = 3 * slot   // uint32 futex word the consumer sleeps on
	offDataWaiting  = 4 * slot   // uint32, 1 while the consumer sleeps
	offSpaceSeq     = 5 * slot   // uint32 futex word the producer sleeps on
	offSpaceWaiting = 6 * slot   // uint32, 1 while the producer sleeps
	offSpaceTarget  = 6*slot + 8 // uint64, head value the sleeping producer waits for
	offProdClosed   = 7 * slot   // uint32, nonzero once the producer closed
	offConsClosed   = 8 * slot   // uint32, nonzero once the consumer closed
	offDone         = 9 * slot   // uint64, descriptor transfers completed (consumer)
	offDoneSeq      = 10 * slot  // uint32 futex word the producer sleeps on for a transfer
	offDoneWaiting  = 11 * slot  // uint32, 1 while the producer sleeps for a transfer
	offProdOff      = 12 * slot  // uint32, nonzero while the producer's process is off core (see offCore)
	offConsOff      = 13 * slot  // uint32, nonzero while the consumer's process is off core
	offClaim        = 14 * slot  // uint64, ticket of the last transfer claimed (consumer) or taken back (producer, | claimTakenBack)

	ringMagic   uint64 = 0x314d48534c43434f // "OCCLSHM1", little endian
	ringVersion uint32 = 6
	nonceSize          = 16
	filePrefix         = "occl-"
)

// ring is a view of one mapped ring file. Geometry (cap, mask) is kept in
// process memory, read once and validated at setup; only the counters and
// flags below are read from shared memory afterwards.
type ring struct {
	m    []byte // the whole mapping: control page, then data
	data []byte // m[ctrlSize:], cap bytes
	cap  uint64
	mask uint64

	tail, head                 *atomic.Uint64
	dataSeq, dataWaiting       *atomic.Uint32
	spaceSeq, spaceWaiting     *atomic.Uint32
	spaceTarget                *atomic.Uint64
	prodClosed, consClosed     *atomic.Uint32
	done                       *atomic.Uint64
	claim                      *atomic.Uint64
	doneSeq, doneWaiting       *atomic.Uint32
	prodOff, consOff           *atomic.Uint32
	magic                      *atomic.Uint64
	version, ctrlSz, creatorID *atomic.Uint32
	capField                   *atomic.Uint64
}

// validCapacity reports whether c is a supported data area size.
func validCapacity(c uint64) bool {
	return c >= MinCapacity && c <= MaxCapacity && c&(c-1) == 0
}

// viewRing builds the view of mapping m, which must be ctrlSize+capacity
// bytes long with a valid capacity.
func viewRing(m []byte, capacity uint64) ring {
	if uint64(len(m)) != ctrlSize+capacity || !validCapacity(capacity) {
		panic("shm: bad ring mapping")
	}
	u64 := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&m[off])) }
	u32 := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&m[off])) }
	return ring{
		m:            m,
		data:         m[ctrlSize : ctrlSize+capacity : ctrlSize+capacity],
		cap:          capacity,
		mask:         capacity - 1,
		tail:         u64(offTail),
		head:         u64(offHead),
		dataSeq:      u32(offDataSeq),
		dataWaiting:  u32(offDataWaiting),
		spaceSeq:     u32(offSpaceSeq),
		spaceWaiting: u32(offSpaceWaiting),
		spaceTarget:  u64(offSpaceTarget),
		prodClosed:   u32(offProdClosed),
		consClosed:   u32(offConsClosed),
		done:         u64(offDone),
		claim:        u64(offClaim),
		doneSeq:      u32(offDoneSeq),
		doneWaiting:  u32(offDoneWaiting),
		prodOff:      u32(offProdOff),
		consOff:      u32(offConsOff),
		magic:        u64(offMagic),
		version:      u32(offVersion),
		ctrlSz:       u32(offCtrlSize),
		creatorID:    u32(offPID),
		capField:     u64(offCapacity),
	}
}

// nonce returns the random identity of the ring file.
func (r *ring) nonce() (n [nonceSize]byte) {
	copy(n[:], r.m[offNonce:offNonce+nonceSize])
	return n
}

// mapping is a ring file mapped into this process.
type mapping struct {
	ring
	path string
	fd   int // open (and flock'ed) by the creator until setup ends; -1 otherwise
}

// unmap releases the mapping and, if still open, the file descriptor. It
// does not unlink the file.
func (m *mapping) unmap() {
	if m.fd >= 0 {
		unix.Close(m.fd)
		m.fd = -1
	}
	if m.m != nil {
		unix.Munmap(m.m)
		m.ring = ring{}
	}
}

// retireRings replaces the memory of c's rings, out and in, by private
// zero-filled memory at the same addresses (mmap with MAP_FIXED) and
// closes what they hold open; the replacement is unmapped once c is
// unreachable. A call still running on c then reads zeros and writes into
// memory nobody reads, instead of into the peer's rings or onto unmapped
// pages, and the shared memory is released now.
func retireRings(c *Conn, out, in *mapping) {
	for _, m := range []*mapping{out, in} {
		if m.fd >= 0 {
			unix.Close(m.fd)
			m.fd = -1
		}
		if len(m.m) == 0 {
			continue
		}
		zeroMap(m.m)
		runtime.AddCleanup(c, func(b []byte) { unix.Munmap(b) }, m.m)
	}
}

// zeroMap replaces the memory mapped at b by private zero-filled memory at
// the same addresses (mmap with MAP_FIXED): what b mapped is released,
// and a read or write of b still running stays valid (it reads zeros, or
// writes into memory nobody reads). Should the replacement fail (no memory
// for the kernel's bookkeeping), b keeps its mapping until it is unmapped.
func zeroMap(b []byte) {
	unix.MmapPtr(-1, 0, unsafe.Pointer(&b[0]), uintptr(len(b)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
}

// DefaultDir returns the directory ring files are created in when
// Config.Dir is empty: /dev/shm if it exists, os.TempDir() otherwise.
func DefaultDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// fileName returns the name of the ring written by rank from to rank to.
func fileName(comm uint64, from, to int, epoch uint32, pid int, random string) string {
	return fmt.Sprintf("%s%016x-%d-%d-%d-%d-%s", filePrefix, comm, from, to, epoch, pid, random)
}

// namePrefix is the part of a ring file name that does not depend on the
// creating process.
func namePrefix(comm uint64, from, to int, epoch uint32) string {
	return fmt.Sprintf("%s%016x-%d-%d-%d-", filePrefix, comm, from, to, epoch)
}

// creatorPID parses the creator's pid out of a ring file name.
func creatorPID(name string) (int, bool) {
	if !strings.HasPrefix(name, filePrefix) {
		return 0, false
	}
	f := strings.Split(name, "-")
	// occl, comm, from, to, epoch, pid, random
	if len(f) != 7 {
		return 0, false
	}
	pid, err := strconv.ParseInt(f[5], 10, 32)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return int(pid), true
}

// createRing creates, sizes and maps a new ring file in dir. The file is
// opened exclusively and flock'ed until the caller unmaps or closes the
// descriptor, so that CleanStale never removes a file whose creator is
// still setting it up. On error nothing is left behind.
func createRing(dir string, comm uint64, from, to int, epoch uint32, capacity uint64, populate bool) (m *mapping, err error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, fileName(comm, from, to, epoch, os.Getpid(), hex.EncodeToString(rnd[:])))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	m = &mapping{path: path, fd: fd}
	defer func() {
		if err != nil {
			m.unmap()
			unix.Unlink(path)
		}
	}()
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	size := int64(ctrlSize + capacity)
	// Reserve the pages now: on a full tmpfs a sparse file would map fine
	// and then kill the process with SIGBUS on first touch.
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, &os.PathError{Op: "fallocate", Path: path, Err: err}
		}
		if err := unix.Ftruncate(fd, size); err != nil {
			return nil, &os.PathError{Op: "truncate", Path: path, Err: err}
		}
	}
	b, err := mapRing(fd, size, populate)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	m.ring = viewRing(b, capacity)
	if _, err := rand.Read(b[offNonce : offNonce+nonceSize]); err != nil {
		return nil, err
	}
	m.version.Store(ringVersion)
	m.ctrlSz.Store(ctrlSize)
	m.capField.Store(capacity)
	m.creatorID.Store(uint32(os.Getpid()))
	m.magic.Store(ringMagic)
	return m, nil
}

// openRing maps a ring file created by the peer and checks that it is the
// file the peer described: a regular file of ours, of the announced size,
// with the right magic, version, capacity and nonce.
func openRing(path string, capacity uint64, nonce [nonceSize]byte, populate bool) (m *mapping, err error) {
	if !validCapacity(capacity) {
		return nil, fmt.Errorf("peer announced an invalid ring capacity %d", capacity)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	size := int64(ctrlSize + capacity)
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("%s is not a regular file", path)
	case int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("%s is owned by uid %d, not by this user", path, st.Uid)
	case st.Size != size:
		return nil, fmt.Errorf("%s has %d bytes, expected %d", path, st.Size, size)
	}
	b, err := mapRing(fd, size, populate)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	m = &mapping{ring: viewRing(b, capacity), path: path, fd: -1}
	switch {
	case m.magic.Load() != ringMagic:
		err = fmt.Errorf("%s: bad magic %#x", path, m.magic.Load())
	case m.version.Load() != ringVersion:
		err = fmt.Errorf("%s: unsupported ring version %d", path, m.version.Load())
	case m.ctrlSz.Load() != ctrlSize || m.capField.Load() != capacity:
		err = fmt.Errorf("%s: control page describes a %d+%d byte ring, expected %d+%d",
			path, m.ctrlSz.Load(), m.capField.Load(), ctrlSize, capacity)
	case m.nonce() != nonce:
		err = fmt.Errorf("%s is not the ring the peer created (nonce differs)", path)
	}
	if err != nil {
		m.unmap()
		return nil, err
	}
	return m, nil
}

// mapRing maps a ring file of size bytes, shared. Unless the connection
// is lazy (Config.Lazy), its pages are populated up front (MAP_POPULATE)
// and then written once each (touch), so that the first pass through the
// ring takes no page faults.
//
// MAP_POPULATE alone fills the kernel's page tables; a hypervisor that
// keeps page tables of its own for the guest (shadow paging, as PVM does)
// fills those on the first access of each page from each process, and
// that costs a trap per page: on a 2-core AMD EPYC virtual machine under
// PVM, a first write to each page of a populated 4 MiB ring took 5.3-8.7
// ms (about 6 us per page), a second 10-14 us. After one read of each
// page the first write took 10-14 us too where the file's pages were
// allocated (fallocate, as createRing does), but 4.8 ms where the file was
// only sized (ftruncate, createRing's fallback); after one write, 10-12
// us in both. The touch costs as much as the trap where there is one (6
// ms per 4 MiB ring and process there: Init takes that much longer) and a
// locked add per page where there is none.
func mapRing(fd int, size int64, populate bool) ([]byte, error) {
	flags := unix.MAP_SHARED
	if populate {
		flags |= unix.MAP_POPULATE
	}
	b, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err == nil && populate {
		touch(b)
	}
	return b, err
}

// touch writes the first word of every page of b, adding 0 to it
// atomically: a write that changes nothing, whatever the peer writes to
// the ring meanwhile.
func touch(b []byte) {
	page := os.Getpagesize()
	for i := 0; i+4 <= len(b); i += page {
		atomic.AddUint32((*uint32)(unsafe.Pointer(&b[i])), 0)
	}
}

// Little-endian helpers for the setup messages.
func putU16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }
func putU32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }
func putU64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }
func getU16(b []byte) uint16    { return binary.LittleEndian.Uint16(b) }
func getU32(b []byte) uint32    { return binary.LittleEndian.Uint32(b) }
func getU64(b []byte) uint64    { return binary.LittleEndian.Uint64(b) }
