package emu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Table layout. A table is a header page followed by int64 words, each the
// time (CLOCK_MONOTONIC nanoseconds) at which one resource is next free:
//
//	word 16*nic + 0   transmit side of NIC nic   (one 64-byte line each)
//	word 16*nic + 8   receive side of NIC nic
//	word 16*nNICs + a*nRanks + b   the link from rank a to rank b
//
// NIC slots have a cache line each because the ranks of a host update them
// from different processes; a link slot is only updated by its sender.
//
// Header page of a shared table, little endian:
//
//	 0 magic "OCCLEMU1"
//	 8 version u32
//	12 header size u32
//	16 ranks u32
//	20 NICs u32
//	24 creator pid u32
//	28 reserved u32
//	32 file size u64
const (
	tableMagic   = 0x31554d454c43434f // "OCCLEMU1"
	tableVersion = 2
	headerSize   = 4096
	nicWords     = 16 // words per NIC: transmit line, receive line (each: bulk, packets)

	filePrefix = "occl-emu-"
)

// Limits of a Fabric's topology.
const (
	// MaxRanks is the largest number of ranks a Fabric accepts. The link
	// table grows with the square of the rank count (128 MiB at the
	// limit, in a sparse file).
	MaxRanks = 4096
	// MaxNICs is the largest number of NICs a Fabric accepts.
	MaxNICs = 1 << 16
)

// Direction of a NIC slot.
const (
	dirTx = 0
	dirRx = 8
)

// table is the set of resource slots of a Fabric, in process memory or in a
// shared file mapped by every process of the job.
type table struct {
	words  []int64
	nRanks int
	nNICs  int

	// Shared tables only.
	mem  []byte
	fd   int
	path string
	dev  uint64
	ino  uint64
}

func tableWords(nRanks, nNICs int) int { return nicWords*nNICs + nRanks*nRanks }

func checkDims(nRanks, nNICs int) error {
	if nRanks < 1 || nRanks > MaxRanks {
		return fmt.Errorf("emu: %d ranks, want 1 to %d", nRanks, MaxRanks)
	}
	if nNICs < 0 || nNICs > MaxNICs {
		return fmt.Errorf("emu: %d NICs, want at most %d", nNICs, MaxNICs)
	}
	return nil
}

// newLocalTable makes a table in process memory.
func newLocalTable(nRanks, nNICs int) *table {
	return &table{words: make([]int64, tableWords(nRanks, nNICs)), nRanks: nRanks, nNICs: nNICs, fd: -1}
}

// nic returns the slots of one side (dirTx or dirRx) of a NIC: the
// next-free time of all its frames, and the one of its packet-sized frames.
func (t *table) nic(nic, dir int) (all, packets *int64) {
	return &t.words[nicWords*nic+dir], &t.words[nicWords*nic+dir+1]
}

// link returns the slot of the link from rank a to rank b.
func (t *table) link(a, b int) *int64 { return &t.words[nicWords*t.nNICs+a*t.nRanks+b] }

// reserve books d nanoseconds on slot, starting at t or when the slot is
// next free if that is later, and returns the start. The slot's next-free
// time only grows, so the intervals booked on one slot never overlap.
func reserve(slot *int64, t, d int64) int64 {
	for {
		v := atomic.LoadInt64(slot)
		s := max(v, t)
		if atomic.CompareAndSwapInt64(slot, v, s+d) {
			return s
		}
	}
}

// reservePacket books d nanoseconds for a packet-sized frame ready at t on
// a NIC side whose frames' next-free time is in all and packet-sized
// frames' in packets, and returns the start. The frame waits for the
// packet-sized frames booked before it, and for larger frames at most wait
// (the time one packet of theirs takes); the larger frames booked after the
// start then wait d longer. Packet-sized frames thus take at most the
// side's bandwidth between them, and every frame's bytes are counted.
func reservePacket(all, packets *int64, t, d, wait int64) int64 {
	var s int64
	for {
		v := atomic.LoadInt64(packets)
		s = packetStart(t, v, atomic.LoadInt64(all), wait)
		if atomic.CompareAndSwapInt64(packets, v, s+d) {
			break
		}
	}
	for {
		v := atomic.LoadInt64(all)
		if atomic.CompareAndSwapInt64(all, v, max(v, s)+d) {
			return s
		}
	}
}

// packetStart is when a packet-sized frame ready at t starts on a NIC side
// whose packet-sized frames are booked until packets and all its frames
// until all: after the earlier packets, and after at most wait of a larger
// frame.
func packetStart(t, packets, all, wait int64) int64 {
	return max(t, packets, min(all, t+wait))
}

// DefaultDir is where shared tables live: /dev/shm, or os.TempDir() on
// systems without it.
func DefaultDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// fileName maps a job key to the name of its table file. Keys made of
// letters, digits, '.', '_' and '-' (up to 64 bytes) are used as they are,
// others are hashed.
func fileName(key string) string {
	ok := len(key) <= 64
	for i := 0; ok && i < len(key); i++ {
		c := key[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if ok && key != "" && key[0] != '.' {
		return filePrefix + key
	}
	h := fnv.New128a()
	h.Write([]byte(key))
	return fmt.Sprintf("%sh%x", filePrefix, h.Sum(nil))
}

// Byte-range locks (open file description locks, released by the kernel
// when the last descriptor of the open file goes away, including when the
// process dies) coordinate the processes sharing a table file:
//
//   - lockSetup is held exclusively while a process attaches or detaches,
//     so those steps never interleave;
//   - lockUsers is held shared by every attached process. Whoever can take
//     it exclusively knows that nobody uses the file: on attach it
//     (re)initialises the file, on detach it removes it.
const (
	lockSetup = 0
	lockUsers = 1

	// lockTimeout bounds the wait for lockSetup, which is only ever held
	// for a few system calls.
	lockTimeout = 10 * time.Second
)

func setLock(fd int, off int64, typ int16, wait bool, deadline time.Time) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: off, Len: 1}
	for sleep := 50 * time.Microsecond; ; sleep = min(2*sleep, 5*time.Millisecond) {
		err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
		if err == nil || !wait || !(errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EINTR)) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lock held for more than %v: %w", lockTimeout, err)
		}
		time.Sleep(sleep)
	}
}

func tryLock(fd int, off int64) (bool, error) {
	err := setLock(fd, off, unix.F_WRLCK, false, time.Time{})
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	return err == nil, err
}

// sameFile reports whether path still names the file open as (dev, ino).
func sameFile(path string, dev, ino uint64) bool {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false
	}
	return st.Dev == dev && st.Ino == ino
}

// openSharedTable attaches to the table file of key in dir, creating or
// reinitialising it if nobody uses it.
func openSharedTable(dir, key string, nRanks, nNICs int) (*table, error) {
	path := filepath.Join(dir, fileName(key))
	words := tableWords(nRanks, nNICs)
	size := int64(headerSize + 8*words)
	deadline := time.Now().Add(lockTimeout)
	for {
		t, retry, err := attach(path, nRanks, nNICs, size, deadline)
		if err != nil {
			return nil, fmt.Errorf("emu: shared table %s: %w", path, err)
		}
		if !retry {
			return t, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("emu: shared table %s keeps being replaced", path)
		}
	}
}

// attach makes one attempt at attaching; retry says that the file was
// removed or replaced while it was being opened.
func attach(path string, nRanks, nNICs int, size int64, deadline time.Time) (t *table, retry bool, err error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		if t == nil {
			unix.Close(fd)
		}
	}()
	if err := setLock(fd, lockSetup, unix.F_WRLCK, true, deadline); err != nil {
		return nil, false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, err
	}
	if !sameFile(path, st.Dev, st.Ino) {
		return nil, true, nil // removed by its last user after we opened it
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
		return nil, false, errors.New("not a regular file owned by this user")
	}
	unused, err := tryLock(fd, lockUsers)
	if err != nil {
		return nil, false, err
	}
	if unused {
		// Nobody is attached: a new file, or one left by processes that
		// were killed. Start from zero.
		if err := unix.Ftruncate(fd, 0); err != nil {
			return nil, false, err
		}
		if err := unix.Ftruncate(fd, size); err != nil {
			return nil, false, err
		}
		var hdr [40]byte
		binary.LittleEndian.PutUint64(hdr[0:], tableMagic)
		binary.LittleEndian.PutUint32(hdr[8:], tableVersion)
		binary.LittleEndian.PutUint32(hdr[12:], headerSize)
		binary.LittleEndian.PutUint32(hdr[16:], uint32(nRanks))
		binary.LittleEndian.PutUint32(hdr[20:], uint32(nNICs))
		binary.LittleEndian.PutUint32(hdr[24:], uint32(os.Getpid()))
		binary.LittleEndian.PutUint64(hdr[32:], uint64(size))
		if _, err := unix.Pwrite(fd, hdr[:], 0); err != nil {
			return nil, false, err
		}
	} else {
		var hdr [40]byte
		if n, err := unix.Pread(fd, hdr[:], 0); err != nil || n != len(hdr) {
			return nil, false, fmt.Errorf("reading header: %d bytes, %v", n, err)
		}
		switch {
		case binary.LittleEndian.Uint64(hdr[0:]) != tableMagic:
			return nil, false, errors.New("not an emulated-fabric table")
		case binary.LittleEndian.Uint32(hdr[8:]) != tableVersion || binary.LittleEndian.Uint32(hdr[12:]) != headerSize:
			return nil, false, fmt.Errorf("table version %d, want %d", binary.LittleEndian.Uint32(hdr[8:]), tableVersion)
		case binary.LittleEndian.Uint32(hdr[16:]) != uint32(nRanks) || binary.LittleEndian.Uint32(hdr[20:]) != uint32(nNICs):
			return nil, false, fmt.Errorf("in use for a topology of %d ranks and %d NICs (pid %d), this one has %d ranks and %d NICs",
				binary.LittleEndian.Uint32(hdr[16:]), binary.LittleEndian.Uint32(hdr[20:]), binary.LittleEndian.Uint32(hdr[24:]), nRanks, nNICs)
		case binary.LittleEndian.Uint64(hdr[32:]) != uint64(size) || st.Size != size:
			return nil, false, fmt.Errorf("file size %d, want %d", st.Size, size)
		}
	}
	// Join the users (this converts the exclusive lock taken above), then
	// let the next process attach or detach.
	if err := setLock(fd, lockUsers, unix.F_RDLCK, false, deadline); err != nil {
		return nil, false, err
	}
	if err := setLock(fd, lockSetup, unix.F_UNLCK, false, deadline); err != nil {
		return nil, false, err
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, false, err
	}
	words := int(size-headerSize) / 8
	t = &table{
		words:  unsafe.Slice((*int64)(unsafe.Pointer(&mem[headerSize])), words),
		nRanks: nRanks,
		nNICs:  nNICs,
		mem:    mem,
		fd:     fd,
		path:   path,
		dev:    st.Dev,
		ino:    st.Ino,
	}
	return t, false, nil
}

// close detaches from a shared table, removing the file if this was its
// last user. It must not be called while any slot may still be accessed.
func (t *table) close() error {
	if t.mem == nil {
		return nil
	}
	var errs []error
	if err := unix.Munmap(t.mem); err != nil {
		errs = append(errs, err)
	}
	t.mem, t.words = nil, nil
	if err := setLock(t.fd, lockSetup, unix.F_WRLCK, true, time.Now().Add(lockTimeout)); err != nil {
		errs = append(errs, err)
	} else if err := setLock(t.fd, lockUsers, unix.F_UNLCK, false, time.Time{}); err != nil {
		errs = append(errs, err)
	} else if last, err := tryLock(t.fd, lockUsers); err != nil {
		errs = append(errs, err)
	} else if last && sameFile(t.path, t.dev, t.ino) {
		if err := unix.Unlink(t.path); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	if err := unix.Close(t.fd); err != nil {
		errs = append(errs, err)
	}
	t.fd = -1
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("emu: closing shared table %s: %w", t.path, err)
	}
	return nil
}

// CleanStale removes the table files in dir ("" means DefaultDir()) that
// no process uses: those whose users were all killed before they could
// close their Fabric. A file is removed only if it is a regular file owned
// by this user and nobody holds its locks, so tables of live jobs, in this
// or another pid namespace, are left alone. (New reuses a stale file of the
// same key by itself; CleanStale is for keys that will not come back.)
//
// It returns how many files it removed; errors about single files are
// joined and do not stop the scan.
func CleanStale(dir string) (removed int, err error) {
	if dir == "" {
		dir = DefaultDir()
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), filePrefix) || !e.Type().IsRegular() {
			continue
		}
		ok, err := removeUnused(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

func removeUnused(path string) (bool, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EACCES) {
			return false, nil
		}
		return false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
		return false, nil
	}
	for _, off := range []int64{lockSetup, lockUsers} {
		if ok, err := tryLock(fd, off); !ok {
			if err != nil {
				return false, &os.PathError{Op: "lock", Path: path, Err: err}
			}
			return false, nil
		}
	}
	if !sameFile(path, st.Dev, st.Ino) {
		return false, nil
	}
	if err := unix.Unlink(path); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, &os.PathError{Op: "remove", Path: path, Err: err}
	}
	return true, nil
}
