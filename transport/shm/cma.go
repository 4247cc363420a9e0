package shm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/hugemem"
	"github.com/occl/occl/internal/memcopy"
	"github.com/occl/occl/transport"
)

// Single-copy transfers by cross-memory attach (process_vm_readv).
const (
	// DefaultCMAThreshold is the smallest payload sent by descriptor when
	// Config.CMAThreshold is 0.
	DefaultCMAThreshold = 512 << 10
	// cmaPiece is the most a receiver reads with one process_vm_readv
	// call; between pieces it checks for cancellation and a closed
	// connection. The kernel pins at most 4 MiB of the remote buffer at a
	// time anyway, so larger pieces would gain nothing.
	cmaPiece = 4 << 20

	// A descriptor replaces the payload of a frame in the ring: magic,
	// address and length of the sender's buffer, the ticket of the
	// transfer (1 for the first one on the ring), and, where the payload
	// lies in a shared buffer of hugemem.Alloc, the buffer's ID, address
	// and memory file descriptor in the sender (all 0 otherwise) and the
	// sender's hugemem.Released count (see peermem.go); all uint64 little
	// endian.
	descSize         = 64
	descMagic uint64 = 0x32414d434c43434f // "OCCLCMA2", little endian

	// claimTakenBack marks, in a ring's claim word, the ticket of an
	// offered transfer that its sender took back (see Conn.Offer).
	claimTakenBack uint64 = 1 << 63

	// The probe is a page of the offering process filled with a random
	// pattern, which the peer must read back through process_vm_readv.
	probeSize = 32
)

var errAbandoned = fmt.Errorf("shm: recv: the sender gave up the transfer: %w", transport.ErrPeerClosed)

// probe is the page a side offers to the peer's process_vm_readv at setup.
// It is mapped outside the Go heap so that its address cannot change, and
// unmapped when setup ends.
type probe struct {
	page    []byte
	pattern [probeSize]byte
}

// newProbe maps a page and fills its start with a random pattern.
func newProbe() (*probe, error) {
	b, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, err
	}
	p := &probe{page: b}
	if _, err := rand.Read(p.pattern[:]); err != nil {
		unix.Munmap(b)
		return nil, err
	}
	copy(b, p.pattern[:])
	return p, nil
}

func (p *probe) addr() uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p.page)))) }

func (p *probe) release() {
	if p != nil && p.page != nil {
		unix.Munmap(p.page)
		p.page = nil
	}
}

// cmaReader is what a receiver needs to read the peer's memory.
type cmaReader struct {
	pid int // the peer's process
	// pidfd is a pidfd of it, -1 if it is this process. Close closes it
	// while a Recv may still use it (see Conn.Close), so it is read and
	// written atomically.
	pidfd int32
}

// probePeer checks that this process can read the memory of process pid:
// it reads the probe the peer announced at addr and compares it with the
// pattern from the offer. A pid from another pid namespace, or one reused
// by an unrelated process, fails the comparison; missing privileges fail
// with EPERM, a kernel without the system call with ENOSYS. On success the
// returned reader holds a pidfd of the peer (unless it is this process),
// which Recv uses to make sure the pid still names the peer after each
// transfer.
func probePeer(pid uint32, addr uint64, pattern []byte) (cmaReader, error) {
	r := cmaReader{pid: int(pid), pidfd: -1}
	if pid == 0 || int(pid) < 0 || addr == 0 || len(pattern) != probeSize {
		return r, errors.New("no probe")
	}
	if r.pid != os.Getpid() {
		// Opened before the probe is read: if the probe matches, the
		// process it came from is the one the pidfd designates, as long
		// as that one is still alive afterwards.
		fd, err := unix.PidfdOpen(r.pid, 0)
		if err != nil {
			return r, fmt.Errorf("pidfd_open: %w", err)
		}
		r.pidfd = int32(fd)
	}
	var got [probeSize]byte
	local := []unix.Iovec{{Base: &got[0], Len: probeSize}}
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: probeSize}}
	n, err := unix.ProcessVMReadv(r.pid, local, remote, 0)
	switch {
	case err != nil:
		err = fmt.Errorf("process_vm_readv: %w", err)
	case n != probeSize || !bytes.Equal(got[:], pattern):
		err = errors.New("probe read back differs")
	default:
		err = r.alive()
	}
	if err != nil {
		r.close()
		return cmaReader{pid: r.pid, pidfd: -1}, err
	}
	return r, nil
}

// alive returns an error if the peer's process has been reaped, so that
// its pid may name another process now.
func (r *cmaReader) alive() error {
	fd := atomic.LoadInt32(&r.pidfd)
	if fd < 0 {
		return nil
	}
	return unix.PidfdSendSignal(int(fd), 0, nil, 0)
}

// close closes the pidfd. A Recv that overlaps it may ask a closed, or
// reused, descriptor whether the peer is alive; it then fails, and
// reports transport.ErrClosed (see Conn.afterClose).
func (r *cmaReader) close() {
	if fd := atomic.SwapInt32(&r.pidfd, -1); fd >= 0 {
		unix.Close(int(fd))
	}
}

// sendDesc sends payload by descriptor: the frame header is already in the
// ring; the descriptor follows it, and the call returns once the receiver
// has copied the payload out of this process's memory.
//
// The payload is a caller's buffer and stays referenced (by c.lent and the
// argument) until the call returns. The Go garbage collector does not move
// heap objects, and storing the slice in the Conn makes any buffer passed
// here escape to the heap, so the address in the descriptor stays valid
// for as long as the receiver may use it.
func (c *Conn) sendDesc(ctx context.Context, payload []byte) error {
	err := c.postDesc(ctx, payload)
	if err == nil {
		err = c.wait(ctx, forDone)
	}
	return c.settled(err)
}

// postDesc writes the descriptor of payload after a frame header already
// in the ring and publishes it, keeping payload referenced (c.lent) until
// settled.
func (c *Conn) postDesc(ctx context.Context, payload []byte) error {
	c.sticket++
	p := uintptr(unsafe.Pointer(unsafe.SliceData(payload)))
	putU64(c.sdesc[0:], descMagic)
	putU64(c.sdesc[8:], uint64(p))
	putU64(c.sdesc[16:], uint64(len(payload)))
	putU64(c.sdesc[24:], c.sticket)
	r, _ := hugemem.Shared(p, len(payload)) // all 0 if not shared
	putU64(c.sdesc[32:], r.ID)
	putU64(c.sdesc[40:], uint64(r.Base))
	putU64(c.sdesc[48:], uint64(r.FD))
	putU64(c.sdesc[56:], hugemem.Released())
	c.lent = append(c.lent, payload)
	err := c.put(ctx, c.sdesc[:])
	if err == nil {
		err = c.putPad(ctx)
	}
	if err == nil {
		c.publishTail()
	}
	return err
}

// settled ends the loans (an offer among them) after the wait for them
// returned err: on an error the receiver may still be reading, or read
// later, while the caller reuses the buffers, so this end of the ring is
// closed first (a receiver checks the flag after its copy and discards
// what it read if the flag is set). A connection closed already closed
// it, and its rings are gone: the caller holds mu for reading, so Close,
// which sets closed before it takes mu to unmap them, has not unmapped
// them if closed is not set yet.
func (c *Conn) settled(err error) error {
	if err != nil && !c.closed.Load() {
		c.out.prodClosed.Store(1)
		bump(c.out.dataSeq)
	}
	clear(c.lent)
	c.lent, c.offered = c.lent[:0], 0
	return err
}

// SharedLendMin is the smallest payload a connection that lends lends from
// a shared buffer of hugemem.Alloc whatever its LendMin (see
// Conn.LendsWhole): the receiver copies it from its mapping of the buffer
// with memcpy, which beats the rings' two copies where process_vm_readv
// does not (where processes outnumber the cores, occl's communicators lend
// other payloads taken whole from 32 KiB, and the rest from 64 KiB).
// AllToAll of 64 KiB at 4 processes on 2 cores from shared buffers, 16 KiB
// blocks, 4 rotating rounds, medians: 15.2 us lent against 36.1 through
// the rings (Open MPI's vader 29.4).
const SharedLendMin = 16 << 10

// LendsWhole implements transport.WholeLender: this direction lends, and
// payload lies in a shared buffer of hugemem.Alloc, which the receiver
// maps, and has at least SharedLendMin bytes, or it has at least
// Config.WholeLendThreshold bytes (LendMin's where that is 0) and less
// than Config.WholeRingThreshold if that is set.
func (c *Conn) LendsWhole(payload []byte) bool {
	n := len(payload)
	if !c.cmaOut || n < SharedLendMin {
		return false
	}
	whole := c.wholeMin
	if whole == 0 {
		whole = c.cmaOutMin
	}
	if n >= whole && (c.ringMin == 0 || n < c.ringMin) {
		return true
	}
	_, ok := hugemem.Shared(uintptr(unsafe.Pointer(unsafe.SliceData(payload))), n)
	return ok
}

// LendMin returns the smallest payload Lend lends, 0 if this direction
// lends none (see transport.Lender).
func (c *Conn) LendMin() int {
	if !c.cmaOut {
		return 0
	}
	return c.cmaOutMin
}

// LentMin returns the smallest payload the peer lends on this connection,
// 0 if that direction lends none (see transport.Lender): the threshold
// the peer announced, where its reads of this process's memory succeeded.
func (c *Conn) LentMin() int {
	if !c.cmaIn {
		return 0
	}
	return c.cmaInMin
}

// Lend sends payload by descriptor without waiting for the receiver's
// copy (see transport.Lender).
func (c *Conn) Lend(ctx context.Context, h transport.Header, payload []byte) error {
	return c.afterClose(c.lend(ctx, h, payload))
}

func (c *Conn) lend(ctx context.Context, h transport.Header, payload []byte) error {
	if !c.cmaOut {
		return fmt.Errorf("shm: lend: %d bytes to rank %d: this connection lends nothing", len(payload), c.peer)
	}
	if len(payload) < c.cmaOutMin && !c.LendsWhole(payload) {
		whole := c.cmaOutMin
		if c.wholeMin > 0 {
			whole = c.wholeMin
		}
		return fmt.Errorf("shm: lend: %d bytes to rank %d: this connection lends payloads of %d bytes or more, taken whole from %d, in shared buffers from %d", len(payload), c.peer, c.cmaOutMin, whole, min(whole, SharedLendMin))
	}
	if err := c.sendable(); err != nil {
		return err
	}
	if c.offered != 0 {
		if err := c.takeBack(ctx); err != nil {
			return c.settled(err)
		}
	}
	return c.lendFrame(ctx, h, payload)
}

// lendFrame writes the frame of a lent payload: its header, flagged lent,
// and its descriptor.
func (c *Conn) lendFrame(ctx context.Context, h transport.Header, payload []byte) error {
	h.Len = uint64(len(payload))
	h.Encode(c.shdr[:])
	c.shdr[flagsOff] = flagLent
	err := c.putHeader(ctx)
	if err == nil {
		err = c.postDesc(ctx, payload)
	}
	if err != nil {
		return c.settled(err)
	}
	return nil
}

// LendBuffers implements transport.Lender: a lent frame (the header and
// the descriptor) fits in the space the consumer has freed, and this
// direction lends.
func (c *Conn) LendBuffers() bool {
	if !c.cmaOut || c.sendable() != nil {
		return false
	}
	return c.fits(frameEnd(c.tail, descSize) - c.tail + c.offerSpace())
}

// OfferMin returns the smallest payload Offer offers, 0 if this
// direction offers none (see transport.Offerer).
func (c *Conn) OfferMin() int { return c.offerMin }

// Offers implements transport.Offerer: n is at least this direction's
// smallest offer, nothing lent on the connection is unsettled, and the
// space the consumer has freed holds the offer's frame and, should it be
// taken back, its payload.
func (c *Conn) Offers(n int) bool {
	if c.offerMin == 0 || n < c.offerMin || len(c.lent) != 0 || c.sendable() != nil {
		return false
	}
	return c.fits(alignUp(frameEnd(c.tail, descSize)+uint64(n)) - c.tail)
}

// Offer lends payload as Lend does, but only until Settle or the next
// Send or Lend on the connection: whichever comes first takes the payload
// back, unless the receiver has begun to copy it, and writes it into the
// ring after its descriptor instead (see transport.Offerer). The ring's
// claim word decides the race between the two: the receiver stores the
// transfer's ticket there before it copies, the sender the ticket marked
// taken back, each with a compare-and-swap from the value before; where
// the processes share the cores, Settle first gives the receiver a
// bounded moment to claim (awaitClaim). Offers must hold.
func (c *Conn) Offer(ctx context.Context, h transport.Header, payload []byte) error {
	return c.afterClose(c.offer(ctx, h, payload))
}

func (c *Conn) offer(ctx context.Context, h transport.Header, payload []byte) error {
	if !c.Offers(len(payload)) {
		if err := c.sendable(); err != nil {
			return err
		}
		return fmt.Errorf("shm: offer: %d bytes to rank %d: this connection offers payloads of %d bytes or more (none if 0), one at a time, where the ring has room for them", len(payload), c.peer, c.offerMin)
	}
	if err := c.lendFrame(ctx, h, payload); err != nil {
		return err
	}
	c.offered = c.sticket
	return nil
}

// takeBack settles the offer not yet settled: if the receiver has not
// claimed it, it is marked taken back and its payload follows its
// descriptor in the ring (space Offers found free, which only grows);
// otherwise the receiver is copying it, or has, and it stays lent until a
// Settle waits for that copy.
func (c *Conn) takeBack(ctx context.Context) error {
	t := c.offered
	c.offered = 0
	v := c.out.claim.Load()
	if v&^claimTakenBack >= t || !c.out.claim.CompareAndSwap(v, t|claimTakenBack) {
		return nil
	}
	if err := c.put(ctx, c.lent[0]); err != nil {
		return err
	}
	if err := c.putPad(ctx); err != nil {
		return err
	}
	c.publishTail()
	return c.settled(nil)
}

// Settle waits until the receiver has copied every payload lent to it
// (see transport.Lender), after it has taken back an offered payload that
// the receiver has not claimed (see Offer).
func (c *Conn) Settle(ctx context.Context) error {
	return c.afterClose(c.settle(ctx))
}

func (c *Conn) settle(ctx context.Context) error {
	if len(c.lent) == 0 {
		return nil
	}
	if c.closed.Load() {
		return c.settled(transport.ErrClosed)
	}
	if c.offered != 0 {
		c.awaitClaim(ctx)
		if err := c.takeBack(ctx); err != nil || len(c.lent) == 0 {
			return c.settled(err)
		}
	}
	return c.settled(c.wait(ctx, forDone))
}

// claimWaitRate bounds how long awaitClaim waits for an offer of n bytes:
// n / claimWaitRate nanoseconds, what copying it into the ring (taking it
// back) costs at 4 bytes a nanosecond. The rate is a round figure, not a
// measurement of the machine; at 4 processes on 2 cores fewer than 2% of
// the offers of 128 and 256 KiB waited that long.
const claimWaitRate = 4

// awaitClaim gives the receiver of the offer not yet settled a little time
// to claim it, where the processes outnumber the cores (no Config.Spin):
// there the receiver is often waiting for a core rather than busy with
// something else, and this thread's core lets it run meanwhile. It waits
// at most about as long as taking the offer back would cost
// (claimWaitRate), not at all where the peer has sent something this side
// has not read yet (a peer settling its own offer to this side waits for
// nothing here), and it returns early when ctx ends.
func (c *Conn) awaitClaim(ctx context.Context) {
	if c.spin > 0 || c.loadTail() != nil || c.tailC != c.head {
		return
	}
	t, limit := c.offered, time.Duration(len(c.lent[0])/claimWaitRate)
	for start := time.Now(); c.out.claim.Load()&^claimTakenBack < t; {
		if time.Since(start) > limit || ctx.Err() != nil {
			return
		}
		c.schedYield()
	}
}

// recvDesc receives the payload of a frame sent by descriptor into buf:
// it reads and checks the descriptor, copies the sender's buffer, from a
// mapping of it (see peermem.go) or with process_vm_readv, and publishes
// the completion.
func (c *Conn) recvDesc(ctx context.Context, buf []byte) error {
	if err := c.get(ctx, c.rdesc[:]); err != nil {
		return err
	}
	if err := c.getPad(ctx); err != nil {
		return err
	}
	c.publishHead()
	magic, addr := getU64(c.rdesc[0:]), getU64(c.rdesc[8:])
	n, ticket := getU64(c.rdesc[16:]), getU64(c.rdesc[24:])
	switch {
	case magic != descMagic:
		return &transport.FrameError{Reason: fmt.Sprintf("bad transfer descriptor magic %#x", magic)}
	case n != uint64(len(buf)):
		return &transport.FrameError{Reason: fmt.Sprintf("transfer descriptor of %d bytes for a %d-byte frame", n, len(buf))}
	case ticket != c.rticket+1:
		return &transport.FrameError{Reason: fmt.Sprintf("transfer descriptor %d, expected %d", ticket, c.rticket+1)}
	case addr == 0 || addr+n < addr:
		return &transport.FrameError{Reason: fmt.Sprintf("transfer descriptor at bad address %#x+%d", addr, n)}
	}
	if takenBack, err := c.claim(ticket); err != nil {
		return err
	} else if takenBack {
		// An offer taken back: the payload follows in the ring.
		if err := c.get(ctx, buf); err != nil {
			return err
		}
		if err := c.getPad(ctx); err != nil {
			return err
		}
		c.publishHead()
		c.completed(ticket)
		return nil
	}
	src, err := c.regions.source(atomic.LoadInt32(&c.reader.pidfd), getU64(c.rdesc[32:]), getU64(c.rdesc[40:]), getU64(c.rdesc[48:]), getU64(c.rdesc[56:]), addr, n)
	if err != nil {
		return err
	}
	if err := c.pull(ctx, uintptr(addr), src, buf); err != nil {
		return err
	}
	// The sender sets this flag before it gives up waiting and lets its
	// caller reuse the buffer, so bytes copied while it was still clear
	// are the bytes it sent (the copy's loads precede this load, and the
	// sender's later stores follow its store of the flag).
	if c.in.prodClosed.Load() != 0 {
		return c.peerErr(errAbandoned)
	}
	// Bytes read by pid came from the peer's process only if its pid was
	// not reused during the copy, which holds if the process still
	// exists. A mapping was made through the peer's pidfd, so bytes
	// copied from it need no such check; a Recv that overlapped Close
	// fails as it does where the check meets a closed pidfd.
	if src != nil {
		if c.closed.Load() {
			return transport.ErrClosed
		}
	} else if err := c.reader.alive(); err != nil {
		return c.peerErr(fmt.Errorf("shm: recv: rank %d: %w (process %d is gone: %v)", c.peer, transport.ErrPeerClosed, c.reader.pid, err))
	}
	c.completed(ticket)
	return nil
}

// claim claims the transfer with the given ticket before the receiver
// copies it, unless its sender has taken it back (see Offer). A sender
// offers only once every payload it lent before has been copied, so a
// claim word that says taken back for this ticket or a later one can only
// mean that this transfer, unread, was an offer taken back; one at or past
// the ticket otherwise is a corrupt ring. The sender changes the word at
// most once meanwhile, so a second failed compare-and-swap is corrupt too.
func (c *Conn) claim(ticket uint64) (takenBack bool, err error) {
	w := c.in.claim
	v := w.Load()
	for range 2 {
		switch t := v &^ claimTakenBack; {
		case t >= ticket && v&claimTakenBack != 0:
			return true, nil
		case t >= ticket:
			return false, corrupt("claim", t, 0, ticket-1)
		case w.CompareAndSwap(v, ticket):
			return false, nil
		}
		v = w.Load()
	}
	return false, corrupt("claim", v&^claimTakenBack, 0, ticket-1)
}

// completed publishes the end of the transfer with the given ticket and
// wakes the sender if it sleeps waiting for it.
func (c *Conn) completed(ticket uint64) {
	c.rticket = ticket
	c.in.done.Store(ticket)
	if c.in.doneWaiting.Load() != 0 && c.in.doneWaiting.Swap(0) != 0 {
		bump(c.in.doneSeq)
	}
}

// pull copies len(buf) bytes at addr in the peer's process into buf, in
// pieces of at most cmaPiece bytes: from src, a mapping of them, or with
// process_vm_readv if src is nil.
func (c *Conn) pull(ctx context.Context, addr uintptr, src, buf []byte) error {
	defer func() {
		c.liov[0] = unix.Iovec{}
		c.riov[0] = unix.RemoteIovec{}
	}()
	for off := 0; off < len(buf); {
		n := min(len(buf)-off, cmaPiece)
		if src != nil {
			off += memcopy.Copy(buf[off:off+n], src[off:])
			if off == len(buf) {
				break
			}
			if err := c.betweenPieces(ctx, off); err != nil {
				return err
			}
			continue
		}
		c.liov[0].Base = &buf[off]
		c.liov[0].SetLen(n)
		c.riov[0] = unix.RemoteIovec{Base: addr + uintptr(off), Len: n}
		k, errno := readPeer(c.reader.pid, &c.liov[0], &c.riov[0])
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return c.pullErr(addr+uintptr(off), n, errno)
		case k <= 0 || k > n:
			return fmt.Errorf("shm: recv: process_vm_readv of %d bytes from rank %d returned %d", n, c.peer, k)
		}
		off += k
		if off == len(buf) {
			break
		}
		if err := c.betweenPieces(ctx, off); err != nil {
			return err
		}
	}
	return nil
}

// betweenPieces checks, between the pieces of a copy of the peer's memory
// (done bytes copied so far), that the connection, the transfer and ctx
// are still on.
func (c *Conn) betweenPieces(ctx context.Context, done int) error {
	if c.pieceHook != nil {
		c.pieceHook(done)
	}
	switch {
	case c.closed.Load():
		return transport.ErrClosed
	case c.in.prodClosed.Load() != 0:
		return c.peerErr(errAbandoned)
	case c.gone.Load():
		return c.goneErr
	}
	return ctx.Err()
}

// readPeer reads remote, in process pid, into local with one
// process_vm_readv, returning the bytes read.
//
// It is a raw system call: process_vm_readv copies and returns, it does
// not wait for anything, and told of a call that copies for more than
// 20 us (a 512 KiB piece takes about 50 here) the runtime's monitor may
// hand the processor to another thread (with GOMAXPROCS 1 it does), which
// on a rank bound to one CPU takes turns with this one for it. The price:
// a stop-the-world of the garbage collector waits for the call, at most
// one piece (cmaPiece) of copying. AllToAll, 6 interleaved rounds, medians
// before / after / Open MPI's vader: 2 processes, 1 MiB 93 / 79 / 72 us,
// 4 MiB 526 / 424 / 388 us, 16 MiB 1.89 / 1.55 / 1.61 ms; 4 processes on
// 2 cores, 1 MiB 476 / 299 / 293 us, 16 MiB 6.09 / 4.52 / 4.20 ms.
func readPeer(pid int, local *unix.Iovec, remote *unix.RemoteIovec) (int, unix.Errno) {
	r, _, errno := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid),
		uintptr(unsafe.Pointer(local)), 1, uintptr(unsafe.Pointer(remote)), 1, 0)
	return int(r), errno
}

// pullErr describes a failed process_vm_readv. A process that no longer
// exists (ESRCH) or a sender that closed its end (it gave up the transfer,
// so its buffer may be gone: EFAULT) is a closed peer; anything else is
// reported with the errno.
func (c *Conn) pullErr(addr uintptr, n int, err error) error {
	switch {
	case err == unix.ESRCH:
		return c.peerErr(fmt.Errorf("shm: recv: rank %d: %w (process %d is gone)", c.peer, transport.ErrPeerClosed, c.reader.pid))
	case c.in.prodClosed.Load() != 0:
		return c.peerErr(errAbandoned)
	case c.gone.Load():
		return c.goneErr
	}
	return fmt.Errorf("shm: recv: reading %d bytes at %#x in process %d (rank %d): %w", n, addr, c.reader.pid, c.peer, err)
}

// loadDone reads the count of completed transfers from shared memory. A
// value outside [last value seen, last ticket sent] is reported as a
// corrupt ring.
func (c *Conn) loadDone() error {
	d := c.out.done.Load()
	if d-c.doneC > c.sticket-c.doneC {
		return corrupt("completion", d, c.doneC, c.sticket)
	}
	c.doneC = d
	return nil
}

// CMA reports whether payloads of at least the threshold are moved by a
// single cross-memory copy in each direction: send for the frames this
// side sends, recv for the frames it receives. Where it reports false,
// every payload goes through the ring.
func (c *Conn) CMA() (send, recv bool) { return c.cmaOut, c.cmaIn }

// CMAOff returns why payloads do not move by single copies both ways (see
// CMA), found at setup: turned off (Config.NoCMA), the peer offering
// none, this process unable to read the peer's memory (the probe's error:
// ptrace's permission, a seccomp filter, another pid namespace) or the
// peer unable to read this one's; nil where they move both ways.
func (c *Conn) CMAOff() error {
	if c.cmaOut && c.cmaIn {
		return nil
	}
	if c.cmaOff == nil {
		return errors.New("single copies are off")
	}
	return c.cmaOff
}
