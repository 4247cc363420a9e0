package shm

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/internal/membarrier"
	"github.com/occl/occl/internal/memcopy"
	"github.com/occl/occl/internal/spin"
	"github.com/occl/occl/transport"
)

// Tuning of the data path.
const (
	// chunk is how many bytes a side copies before it publishes its
	// counter, so that the other side can work on a large frame while it
	// is still being copied. It is kept below the size at which the
	// runtime's memmove switches to non-temporal stores (1 MiB on amd64),
	// so that data written into the ring is still in cache when the
	// consumer reads it. 256 KiB measured best among 64 KiB to 512 KiB.
	chunk = 256 << 10
	// spinTight is how many times a waiting side re-reads the shared
	// counter, with a spin.Pause after each look, before it looks at the
	// clock. Then it keeps polling for the
	// connection's spin time (none when the processes outnumber the
	// cores: the one awaited may need this core) before it sleeps on the
	// futex. Where the processes outnumber the cores, a wait that gives
	// its core away (transport.WithCoreYield) skips these polls: 4
	// processes on 2 cores, 10 interleaved rounds, 64 B AllToAll 18%
	// faster, 8 B AllReduce 16%.
	spinTight = 64
	// spinYield is how many more rounds a wait yields to other goroutines
	// before it sleeps when the processes outnumber the cores.
	spinYield = 128
	// sleepSlice bounds a single futex sleep, so that cancellation of a
	// context without a deadline and a dead peer that nobody reported are
	// noticed within that time even without a wake-up.
	sleepSlice = 100 * time.Microsecond
)

var (
	errPeerClosedSend = fmt.Errorf("shm: send: %w", transport.ErrPeerClosed)
	errPeerClosedRecv = fmt.Errorf("shm: recv: %w", transport.ErrPeerClosed)
)

// pad keeps the fields the sender and the receiver update on separate cache
// lines.
type pad [128]byte

// Conn is one end of a shared-memory connection. It implements
// transport.Conn. Create one with Connect.
type Conn struct {
	out   ring // the ring Send writes (this side is its producer)
	in    ring // the ring Recv reads (this side is its consumer)
	outM  *mapping
	inM   *mapping
	eager int
	peer  int
	// spin is how long a wait keeps polling before it sleeps
	// (Config.Spin); 0 yields the core instead.
	spin time.Duration
	// local: the peer is in this process (both rings were made here), so
	// a wait always lets other goroutines run: the peer is one of them.
	local bool
	// plain: both sides publish their counters (tail, head) with plain
	// stores (storePlain), and a wait fences (membarrier.Global) between storing
	// its waiting flag and its last look before it sleeps. An atomic
	// store would order the publication before the publisher's read of
	// the peer's waiting flag; a plain one may still sit in the store
	// buffer then, and the sleeper's fence makes up for it, at the cost
	// of one fence per sleep instead of a locked store per publication.
	// Set where both processes can fence and both poll (Config.Spin),
	// as processes with a core each do: there sleeps are rare and every
	// publication is on an operation's critical path.
	plain bool

	// Single-copy transfers: payloads of at least cmaOutMin bytes that
	// this side sends, and of at least cmaInMin bytes that it receives,
	// travel by descriptor when cmaOut, respectively cmaIn, is set.
	cmaOut, cmaIn       bool
	cmaOff              error // why they are not both set (see CMAOff)
	cmaOutMin, cmaInMin int
	// descSend: Send, not only Lend, sends payloads of cmaOutMin bytes
	// or more by descriptor (Config.SendByDescriptor).
	descSend bool
	// offerMin is the smallest payload Offer offers, 0 if it offers none
	// (Config.OfferThreshold); descInMin the smallest payload the peer
	// may send by descriptor, lent or offered.
	offerMin, descInMin int
	// wholeMin is the smallest payload lent where the receiver takes it
	// whole (see LendsWhole), 0 for cmaOutMin.
	wholeMin int
	// ringMin is the smallest payload taken whole that is not lent but
	// sent through the ring unless it lies in a shared buffer
	// (Config.WholeRingThreshold); 0 for none.
	ringMin int
	reader  cmaReader // the peer's process, when cmaIn
	// pieceHook, if set (by tests), runs between the pieces of a
	// cross-memory read with the number of bytes copied so far.
	pieceHook func(done int)
	// yieldHook, if set (by tests), runs whenever a polling wait lets
	// other goroutines run; coreYieldHook after every sched_yield;
	// lockHook when a wait locks its goroutine to its thread (true) and
	// unlocks it (false); sleepHook before a wait sleeps on its futex word.
	yieldHook, coreYieldHook, sleepHook func()
	lockHook                            func(locked bool)
	// coreYield decides whether waits give their core away.
	coreYield transport.CoreYield
	// peerSpin is how many rounds a wait that would yield its core polls
	// on while the peer is marked running (see offCore); tests change it.
	peerSpin int

	_ pad
	// Producer state, used only by Send.
	tail  uint64 // bytes written into out; authoritative copy
	ptail uint64 // value of tail last published to shared memory
	headC uint64 // last head read from shared memory (validated)
	// cleared: the seal words of the lines from the tail's frame boundary
	// up to here are cleared (see clearAhead).
	cleared uint64
	// headAt: the producer reads the consumer's head to rewind or to
	// clear ahead (lookHead) only from this tail on.
	headAt uint64
	// hot is the offset of the out ring from which a small frame rewinds,
	// and hotRoom the bytes of the current lap the consumer must have
	// read for it to (see rewind).
	hot, hotRoom uint64
	sticket      uint64   // descriptors sent on out
	doneC        uint64   // last completion count read from shared memory (validated)
	lent         [][]byte // the payloads the peer may be reading
	offered      uint64   // ticket of the offer (lent[0]) not yet settled, 0 if none
	shdr         [transport.HeaderSize]byte
	sdesc        [descSize]byte

	_ pad
	// Consumer state, used only by Recv.
	head  uint64 // bytes read from in; authoritative copy
	phead uint64 // value of head last published to shared memory
	tailC uint64 // bytes known written: the last tail read, or the end of a sealed frame read
	tailL uint64 // last tail read from shared memory (validated)
	// armed: the seal word of the frame at head was cleared before the
	// frame was written, so a non-zero seal there means that all of the
	// frame is there (see sealed).
	armed   bool
	rticket uint64 // descriptors completed on in
	rhdr    [transport.HeaderSize]byte
	rdesc   [descSize]byte
	// regions maps the peer's shared buffers whose blocks it lends (see
	// peermem.go); nil where the peer is this process or lends nothing.
	regions *peerRegions
	rpad    [frameAlign]byte
	liov    [1]unix.Iovec
	riov    [1]unix.RemoteIovec
	// view, while RecvView runs, takes the payload in pieces instead of
	// buf (see view.go); valign is its alignment, and vcarry holds the
	// vn bytes of an element that a piece's end split.
	view   transport.Consumer
	valign int
	vn     int
	vcarry [maxViewAlign]byte

	_ pad

	closed  atomic.Bool
	gone    atomic.Bool // the control connection reported the peer gone
	goneErr error       // why; written before gone is set

	ctl       transport.Conn
	monitored chan struct{} // closed when the liveness monitor returns
	closeOnce sync.Once

	// copyWaitYield is how long a copy wait gives its core away
	// (transport.CopyWaitYield; changed by tests). Last, so that the
	// fields the frames' paths use keep their places in their lines.
	copyWaitYield time.Duration
}

var (
	_ transport.Conn     = (*Conn)(nil)
	_ transport.Buffered = (*Conn)(nil)
	_ transport.Viewer   = (*Conn)(nil)

	_ transport.WholeLender = (*Conn)(nil)
)

// cmaSetup is what Connect agreed on about single-copy transfers.
type cmaSetup struct {
	out, in       bool
	outMin, inMin int
	// outOffer and inOffer are the smallest payloads this side and the
	// peer offer (Config.OfferThreshold), 0 if none.
	outOffer, inOffer int
	// outWhole is the smallest payload this side lends where its
	// receiver takes it whole (Config.WholeLendThreshold), 0 for outMin.
	outWhole int
	// outRing is the smallest payload taken whole that this side sends
	// through the ring unless it lies in a shared buffer
	// (Config.WholeRingThreshold), 0 for none.
	outRing int
	send    bool      // Send uses descriptors too (Config.SendByDescriptor)
	reader  cmaReader // owned by the Conn from newConn on
	off     error     // why single copies are off, if they are (see Conn.CMAOff)
}

// newConn joins two mapped rings into a Conn. ctl, if not nil, becomes the
// liveness monitor of the connection and is closed with it.
func newConn(out, in *mapping, peer int, ctl transport.Conn, want transport.Header, cma cmaSetup) *Conn {
	c := &Conn{out: out.ring, in: in.ring, outM: out, inM: in, peer: peer, ctl: ctl, peerSpin: peerSpin, copyWaitYield: transport.CopyWaitYield}
	c.cmaOut, c.cmaOutMin = cma.out && cma.outMin > 0, cma.outMin
	c.cmaIn, c.cmaInMin = cma.in && cma.inMin > 0, cma.inMin
	c.cmaOff = cma.off
	if c.cmaOut {
		c.offerMin, c.wholeMin, c.ringMin = max(cma.outOffer, 0), max(cma.outWhole, 0), max(cma.outRing, 0)
	}
	c.descInMin = c.cmaInMin
	if cma.inOffer > 0 {
		c.descInMin = min(c.descInMin, cma.inOffer)
	}
	if c.cmaIn {
		// The peer lends payloads in its shared buffers from here.
		c.descInMin = min(c.descInMin, SharedLendMin)
	}
	c.reader = cma.reader
	pid := uint32(os.Getpid())
	c.local = out.creatorID.Load() == pid && in.creatorID.Load() == pid
	if !c.cmaIn {
		c.reader.close()
	}
	if c.cmaIn && c.reader.pidfd >= 0 {
		c.regions = &peerRegions{}
		runtime.AddCleanup(c, (*peerRegions).unmapAll, c.regions)
	}
	c.eager = max(0, int(c.out.cap/4)-transport.HeaderSize)
	c.descSend = c.cmaOut && cma.send
	if c.descSend {
		// A frame sent by descriptor waits for the receiver.
		c.eager = min(c.eager, c.cmaOutMin-1)
	}
	c.hotRoom = max(armWindow, smallFrame+frameEnd(0, c.eager))
	c.hot = max(hotWindow, c.hotRoom)
	// The rings may not start at zero (they always do after Connect, but
	// tests start them anywhere): adopt the counters once, then own them.
	c.tail = c.out.tail.Load()
	c.ptail, c.headC, c.cleared = c.tail, c.tail, alignUp(c.tail)
	c.head = c.in.head.Load()
	c.phead, c.tailC, c.tailL = c.head, c.head, c.head
	c.clearAhead()
	c.sticket = c.out.done.Load()
	c.doneC = c.sticket
	c.rticket = c.in.done.Load()
	if ctl != nil {
		c.monitored = make(chan struct{})
		go c.monitor(want)
	}
	return c
}

// EagerLimit implements transport.Conn: a quarter of the ring this side
// writes, the same slack the other transports give, but less than the
// threshold of single-copy transfers when they are used, since those wait
// for the receiver.
func (c *Conn) EagerLimit() int { return c.eager }

// Peer returns the rank at the other end.
func (c *Conn) Peer() int { return c.peer }

// Send implements transport.Conn.
func (c *Conn) Send(ctx context.Context, h transport.Header, payload []byte) error {
	return c.afterClose(c.send(ctx, h, payload))
}

func (c *Conn) send(ctx context.Context, h transport.Header, payload []byte) error {
	if err := c.sendable(); err != nil {
		return err
	}
	if c.offered != 0 {
		// The frame goes after the offered payload's, in the ring if
		// the peer has not claimed it.
		if err := c.takeBack(ctx); err != nil {
			return c.settled(err)
		}
	}
	h.Len = uint64(len(payload))
	if c.tail&c.out.mask >= c.hot {
		c.rewind(len(payload))
	}
	if off, end, ok := c.room(len(payload)); ok {
		// A small frame that fits before the ring's end: written in
		// place, in one piece, and sealed. Its first line, which the
		// consumer may be polling for the seal, is written last and
		// at once: the header, the payload's first bytes, the seal.
		b := c.out.data[off : off+(end-c.tail)]
		var flags byte
		if shortFits(len(payload)) {
			// One line instead of the two a full header needs.
			end = c.tail + frameAlign
			encodeShort(b, &h, payload)
			flags = flagShort
		} else {
			first := min(len(payload), frameAlign-transport.HeaderSize)
			copy(b[frameAlign:], payload[first:])
			h.Encode(b)
			copy(b[transport.HeaderSize:], payload[:first])
		}
		if int64(c.cleared-end) > 0 {
			flags |= flagArmed
		}
		// Stored, not or-ed in: the line's flags byte is not read back.
		b[flagsOff] = flags
		c.out.seal(off, sealOf(c.tail))
		size := end - c.tail
		c.tail = end
		c.publishTail()
		if size <= sealMax {
			c.clearAhead()
		}
		return nil
	}
	desc := c.descSend && len(payload) >= c.cmaOutMin
	h.Encode(c.shdr[:])
	if desc {
		c.shdr[flagsOff] = flagLent
	}
	if err := c.putHeader(ctx); err != nil {
		return err
	}
	if desc {
		return c.sendDesc(ctx, payload)
	}
	if err := c.putPayload(ctx, payload); err != nil {
		return err
	}
	if err := c.putPad(ctx); err != nil {
		return err
	}
	c.publishTail()
	return nil
}

// putHeader puts the frame header in shdr at the tail, a frame boundary,
// for a frame the general path writes. Where the seal words ahead were
// cleared, its consumer may be armed for it, polling its seal word and not
// the tail: it marks the header there (markOf) once the header is in
// place, so that the consumer turns to the tail.
func (c *Conn) putHeader(ctx context.Context) error {
	start := c.tail
	if err := c.put(ctx, c.shdr[:]); err != nil {
		return err
	}
	// Frames start on a frame boundary; the check keeps a tail that is
	// not on one (a corrupted Conn, see FuzzSendCorrupt) from storing
	// the mark outside a seal word.
	if start%frameAlign == 0 && int64(c.cleared-start) > 0 {
		c.out.seal(start&c.out.mask, markOf(start))
	}
	return nil
}

// Buffers implements transport.Buffered: the frame of a payload of n
// bytes fits in the space the consumer has freed (looked up afresh if the
// last head seen leaves too little), and the payload does not go by
// descriptor, whose Send waits for the consumer's copy.
func (c *Conn) Buffers(n int) bool {
	if n < 0 || c.sendable() != nil || (c.descSend && n >= c.cmaOutMin) {
		return false
	}
	return c.fits(frameEnd(c.tail, n) - c.tail + c.offerSpace())
}

// offerSpace is the space of the ring that the offer not yet settled
// keeps for its payload, in case it is taken back (see Offer).
func (c *Conn) offerSpace() uint64 {
	if c.offered == 0 {
		return 0
	}
	return alignUp(uint64(len(c.lent[0])))
}

// fits reports whether need bytes of the out ring are free, looking up
// the consumer's head afresh if the last one seen leaves too few.
func (c *Conn) fits(need uint64) bool {
	if c.out.cap-(c.tail-c.headC) >= need {
		return true
	}
	return c.loadHead() == nil && c.out.cap-(c.tail-c.headC) >= need
}

// putPad pads the frame written last to its end (see frameEnd).
func (c *Conn) putPad(ctx context.Context) error {
	return c.put(ctx, zeroPad[:alignUp(c.tail)-c.tail])
}

// getPad skips the padding of the frame read last.
func (c *Conn) getPad(ctx context.Context) error {
	return c.get(ctx, c.rpad[:alignUp(c.head)-c.head])
}

// clearAhead keeps the seal words of the lines ahead of the tail cleared,
// up to armWindow bytes ahead and within the space the consumer has freed:
// a small frame that ends where they are cleared arms the frame after it
// (flagArmed). Once fewer than armWindow-clearBatch bytes ahead are
// clear, it clears the lines up to armWindow ahead with plain stores: in a
// run of small frames, clearBatch bytes' worth at a time.
func (c *Conn) clearAhead() {
	r := &c.out
	from := c.cleared
	if int64(alignUp(c.tail)-from) > 0 {
		from = alignUp(c.tail)
	}
	if int64(from-c.tail) >= armWindow-clearBatch {
		return
	}
	to := alignUp(c.tail) + armWindow
	if free := (c.headC + r.cap) &^ (frameAlign - 1); int64(to-free) > 0 {
		// The last head seen may be old: after a rewind, it is where
		// the consumer was then.
		if c.lookHead() {
			free = (c.headC + r.cap) &^ (frameAlign - 1)
		}
		to = min(to, free)
	}
	for p := from; int64(to-p) > 0; p += frameAlign {
		r.clearSeal(p & r.mask)
	}
	if int64(to-from) > 0 {
		c.cleared = to
	}
}

// rewind starts the out ring's next lap with a skip frame (see hotWindow)
// if a frame with a payload of n bytes is small, the tail is a frame
// boundary, and the consumer has read the first hotRoom bytes of this
// lap: after the skip and the frame, the ring then still has room for a
// frame of EagerLimit bytes, which a schedule may send before the
// consumer reads on (a rewind must not turn a send that fits into one
// that waits), and the next lap's first armWindow bytes are free. Before
// the skip frame it clears the seal words of those lines, so that the
// skip arms the frame after it. Where it does not rewind, the frame
// goes where it would have gone.
func (c *Conn) rewind(n int) {
	r := &c.out
	if c.tail%frameAlign != 0 || frameEnd(c.tail, n)-c.tail > smallFrame || (c.cmaOut && n >= c.cmaOutMin) {
		return
	}
	off := c.tail & r.mask
	lap := c.tail - off + r.cap
	if need := lap - r.cap + c.hotRoom; int64(need-c.headC) > 0 && (!c.lookHead() || int64(need-c.headC) > 0) {
		return
	}
	for p := lap; p < lap+armWindow; p += frameAlign {
		r.clearSeal(p & r.mask)
	}
	b := r.data[off : off+frameAlign]
	h := skipHeader(c.tail, r.cap)
	h.Encode(b)
	b[flagsOff] = flagSkip | flagArmed
	r.seal(off, sealOf(c.tail))
	c.tail, c.cleared = lap, lap+armWindow
}

// lookHead reads the consumer's head afresh, unless it did less than
// armWindow/2 bytes ago: each look is a miss of the line the consumer
// writes, and where the consumer is behind, a look at every frame would
// find it behind just the same. It reports whether it read the head.
func (c *Conn) lookHead() bool {
	if int64(c.tail-c.headAt) < 0 {
		return false
	}
	c.headAt = c.tail + armWindow/2
	return c.loadHead() == nil
}

// Recv implements transport.Conn. The header is decoded and checked before
// any payload byte is copied into buf.
func (c *Conn) Recv(ctx context.Context, want transport.Header, buf []byte) error {
	return c.afterClose(c.recv(ctx, want, buf))
}

func (c *Conn) recv(ctx context.Context, want transport.Header, buf []byte) error {
	for {
		skipped, err := c.recvFrame(ctx, want, buf)
		if !skipped || err != nil {
			return err
		}
	}
}

// recvFrame receives the frame at the head into buf, or moves the head
// past a skip frame (see flagSkip) and reports that it did.
func (c *Conn) recvFrame(ctx context.Context, want transport.Header, buf []byte) (skipped bool, err error) {
	if c.closed.Load() {
		return false, transport.ErrClosed
	}
	want.Len = uint64(len(buf))
	if off, end, ok, err := c.frameAt(ctx, len(buf)); err != nil {
		return false, err
	} else if ok {
		// A small frame, all there and in one piece: checked and
		// copied out in place.
		flags, err := decodeFrame(c.in.data[off:off+transport.HeaderSize], &want, c.head, c.in.cap)
		if err != nil {
			return false, err
		}
		if flags&flagSkip != 0 {
			return true, c.skip(c.head, flags)
		}
		if flags&flagLent != 0 {
			return false, &transport.FrameError{Reason: fmt.Sprintf("shared ring: a lent frame of %d bytes, below this direction's smallest loan", len(buf))}
		}
		start := off + transport.HeaderSize
		if flags&flagShort != 0 {
			start, end = off+shortPayloadOff, c.head+frameAlign
		}
		if c.view != nil {
			c.view.Consume(0, c.in.data[start:start+uint64(len(buf))])
		} else {
			copy(buf, c.in.data[start:start+uint64(len(buf))])
		}
		c.head, c.armed = end, flags&flagArmed != 0
		if int64(end-c.tailC) > 0 {
			c.tailC = end
		}
		c.publishHead()
		return false, nil
	}
	// The general path: the frame is read as a stream. Its header
	// arms nothing, and what follows it is found by the tail.
	c.armed = false
	start := c.head
	if err := c.get(ctx, c.rhdr[:]); err != nil {
		return false, err
	}
	flags, err := decodeFrame(c.rhdr[:], &want, start, c.in.cap)
	if err != nil {
		return false, err
	}
	if flags&flagShort != 0 {
		// Written in place as a small frame, which a consumer that
		// expects the same payload takes in place too (see frameAt).
		return false, &transport.FrameError{Reason: fmt.Sprintf("shared ring: a short frame at %d, read as a stream", start)}
	}
	if flags&flagSkip != 0 {
		return true, c.skip(start, flags)
	}
	if flags&flagLent != 0 {
		// The frame carries a descriptor instead of the payload.
		if !c.cmaIn || len(buf) < c.descInMin {
			return false, &transport.FrameError{Reason: fmt.Sprintf("shared ring: a lent frame of %d bytes, where this direction lends nothing or nothing below %d bytes", len(buf), c.descInMin)}
		}
		if err := c.recvDesc(ctx, buf); err != nil {
			return false, err
		}
		if c.view != nil {
			c.view.Consume(0, buf)
		}
		return false, nil
	}
	if c.view != nil {
		if err := c.getView(ctx, len(buf)); err != nil {
			return false, err
		}
	} else if err := c.get(ctx, buf); err != nil {
		return false, err
	}
	if err := c.getPad(ctx); err != nil {
		return false, err
	}
	c.publishHead()
	return false, nil
}

// skip moves the head past the skip frame that starts at stream position
// start (see flagSkip), whose header decodeFrame checked, to the start of
// the next lap, where the producer wrote the next frame. A skip frame at
// the start of a lap skips nothing and cannot come from a working peer, so
// that every skip moves the head to a lap no skip has started yet.
func (c *Conn) skip(start uint64, flags byte) error {
	r := &c.in
	if start&r.mask == 0 {
		return &transport.FrameError{Reason: fmt.Sprintf("shared ring: skip frame at the start of a lap (%d)", start)}
	}
	lap := start - start&r.mask + r.cap
	c.head, c.armed = lap, flags&flagArmed != 0
	if int64(lap-c.tailC) > 0 {
		// The skipped bytes count as there, as a sealed frame's do.
		c.tailC = lap
	}
	return nil
}

// afterClose returns the error of a call that has just returned err:
// transport.ErrClosed if Close has begun meanwhile. Such a call may have
// read or written the retired rings (private memory, zeros to a reader),
// so that neither what it received nor what it sent can be trusted. Close
// marks the connection closed before it retires the rings, so a call that
// touched retired memory finds the mark when it looks afterwards.
func (c *Conn) afterClose(err error) error {
	if c.closed.Load() {
		return transport.ErrClosed
	}
	return err
}

// sendable returns why nothing can be sent now, if anything: this end or
// the peer's closed.
func (c *Conn) sendable() error {
	if c.closed.Load() {
		return transport.ErrClosed
	}
	if c.out.consClosed.Load() != 0 || c.gone.Load() {
		return c.peerErr(errPeerClosedSend)
	}
	return nil
}

// room returns where in the out ring a small frame with a payload of n
// bytes goes (see smallSlot), and where it ends, if the space free now
// holds it. Otherwise the general path writes the frame, waiting for space
// as needed.
func (c *Conn) room(n int) (off, end uint64, ok bool) {
	r := &c.out
	off, end, ok = smallSlot(r, c.tail, n, c.cmaOut && n >= c.cmaOutMin)
	if !ok {
		return 0, 0, false
	}
	if end-c.headC > r.cap {
		if c.loadHead() != nil || end-c.headC > r.cap {
			// An error shows again on the general path.
			return 0, 0, false
		}
	}
	return off, end, true
}

// frameAt returns where the next frame starts in the in ring, and where
// it ends, if it is a small frame with a payload of n bytes (see
// smallSlot) and all of it is there, waiting for the producer to publish
// anything as the general path does. A small frame is all there once its
// seal is (when armed), or once the tail covers it; when fewer bytes are
// there (a ring that was full while it was written, or a larger frame
// being streamed: a mismatch), or the frame is not small, the general
// path reads it and reports what is wrong with it.
func (c *Conn) frameAt(ctx context.Context, n int) (off, end uint64, ok bool, err error) {
	off, end, ok = smallSlot(&c.in, c.head, n, c.cmaIn && n >= c.descInMin)
	if !ok {
		return 0, 0, false, nil
	}
	if ok, err := c.sealed(); ok || err != nil {
		return off, end, ok, err
	}
	if c.tailC == c.head && !c.armed {
		if err := c.loadTail(); err != nil {
			return 0, 0, false, err
		}
	}
	if c.tailC == c.head {
		c.publishHead()
		if err := c.wait(ctx, forData); err != nil {
			return 0, 0, false, err
		}
		if ok, err := c.sealed(); ok || err != nil {
			return off, end, ok, err
		}
	}
	if c.tailC-c.head >= end-c.head {
		return off, end, true, nil
	}
	// A short frame (flagShort) ends with its first line, which the
	// tail covers here if it covers the flags.
	return off, end, shortFits(n) && c.tailC-c.head >= frameAlign && c.in.data[off+flagsOff]&flagShort != 0, nil
}

// sealed reports whether the frame at head is armed and sealed: then all
// of it is there. A seal that is neither clear nor the frame's own cannot
// come from a working peer.
func (c *Conn) sealed() (bool, error) {
	if !c.armed || c.head%frameAlign != 0 {
		return false, nil
	}
	s := c.in.sealWord(c.head & c.in.mask).Load()
	if s == 0 {
		return false, nil
	}
	if s == markOf(c.head) {
		// Written by the general path: found by the tail.
		c.armed = false
		return false, nil
	}
	if s != sealOf(c.head) {
		return false, &transport.FrameError{Reason: fmt.Sprintf("shared ring corrupt: seal %#x at %d, expected %#x", s, c.head, sealOf(c.head))}
	}
	return true, nil
}

// putPayload puts a payload that goes through the ring. A payload large
// enough to be streamed to its destination (memcopy.Streams) has its first
// lap of the ring written with non-temporal stores, which do not read a
// line before writing it: the ring's lines have likely left the caches
// since the last large frame (not measured). Later laps reuse lines the
// consumer has just read and are written with ordinary stores: streaming
// every lap was slower at 64 MiB (see "Large blocks through the rings" in
// docs/performance.md).
func (c *Conn) putPayload(ctx context.Context, p []byte) error {
	if memcopy.Streams(len(p)) {
		cold := min(len(p), int(c.out.cap))
		if err := c.putWith(ctx, p[:cold], memcopy.Stream); err != nil {
			return err
		}
		p = p[cold:]
	}
	return c.put(ctx, p)
}

// put copies p into the out ring, waiting for space as needed, and
// publishes the tail every chunk bytes. The caller publishes the rest.
func (c *Conn) put(ctx context.Context, p []byte) error {
	return c.putWith(ctx, p, memcopy.Copy)
}

// putWith is put copying with cp (memcopy.Copy or memcopy.Stream).
func (c *Conn) putWith(ctx context.Context, p []byte, cp func(dst, src []byte) int) error {
	r := &c.out
	for len(p) > 0 {
		want := uint64(min(len(p), chunk))
		free := r.cap - (c.tail - c.headC)
		if free < want {
			if err := c.loadHead(); err != nil {
				return err
			}
			free = r.cap - (c.tail - c.headC)
			if free == 0 {
				c.publishTail()
				if err := c.wait(ctx, forSpace); err != nil {
					return err
				}
				continue
			}
		}
		n := min(want, free)
		off := c.tail & r.mask
		if k := cp(r.data[off:], p[:n]); uint64(k) < n {
			cp(r.data, p[k:n]) // wrapped around the ring's end
		}
		c.tail += n
		p = p[n:]
		if c.tail-c.ptail >= chunk {
			c.publishTail()
			if c.closed.Load() {
				return transport.ErrClosed
			}
		}
	}
	return nil
}

// get fills p from the in ring, waiting for data as needed, and publishes
// the head every chunk bytes. The caller publishes the rest.
func (c *Conn) get(ctx context.Context, p []byte) error {
	r := &c.in
	for len(p) > 0 {
		want := uint64(min(len(p), chunk))
		avail, err := c.readable(ctx, want)
		if err != nil {
			return err
		}
		n := min(want, avail)
		off := c.head & r.mask
		if k := memcopy.Copy(p[:n], r.data[off:]); uint64(k) < n {
			memcopy.Copy(p[k:n], r.data) // wrapped around the ring's end
		}
		p = p[n:]
		if err := c.consumed(n); err != nil {
			return err
		}
	}
	return nil
}

// readable returns how many bytes past the head of the in ring are there
// to read, at least one: those already known if they make want, else
// those the producer has published since, waiting for one as needed.
func (c *Conn) readable(ctx context.Context, want uint64) (uint64, error) {
	for {
		if avail := c.tailC - c.head; avail >= want {
			return avail, nil
		}
		if err := c.loadTail(); err != nil {
			return 0, err
		}
		if avail := c.tailC - c.head; avail > 0 {
			return avail, nil
		}
		c.publishHead()
		if err := c.wait(ctx, forData); err != nil {
			return 0, err
		}
	}
}

// consumed moves the head past n bytes read and publishes it every chunk
// bytes (the caller publishes the rest).
func (c *Conn) consumed(n uint64) error {
	c.head += n
	if c.head-c.phead >= chunk {
		c.publishHead()
		if c.closed.Load() {
			return transport.ErrClosed
		}
	}
	return nil
}

// loadHead reads the consumer's head from shared memory. A value outside
// [last head seen, tail] cannot come from a working peer and is reported as
// a corrupt ring instead of being used.
func (c *Conn) loadHead() error {
	h := c.out.head.Load()
	if h-c.headC > c.tail-c.headC {
		return corrupt("head", h, c.headC, c.tail)
	}
	c.headC = h
	return nil
}

// loadTail reads the producer's tail from shared memory. A value outside
// [last tail seen, published head+capacity] is reported as a corrupt ring:
// the producer cannot have written more than a ring beyond the head it was
// given.
func (c *Conn) loadTail() error {
	t := c.in.tail.Load()
	if t-c.tailL > c.phead+c.in.cap-c.tailL {
		return corrupt("tail", t, c.tailL, c.phead+c.in.cap)
	}
	c.tailL = t
	if int64(t-c.tailC) > 0 {
		// Behind it, the tail has not caught up with a sealed frame
		// read already.
		c.tailC = t
	}
	return nil
}

func corrupt(what string, v, lo, hi uint64) error {
	return &transport.FrameError{Reason: fmt.Sprintf("shared ring corrupt: %s counter %d outside [%d, %d]", what, v, lo, hi)}
}

// publishTail makes the bytes written so far visible to the consumer and
// wakes it if it sleeps.
func (c *Conn) publishTail() {
	if c.ptail == c.tail {
		return
	}
	c.ptail = c.tail
	c.publish(c.out.tail, c.tail)
	// Swap clears the flag so that one sleep costs one wake-up, however
	// many publishes happen before the sleeper runs again.
	if c.out.dataWaiting.Load() != 0 && c.out.dataWaiting.Swap(0) != 0 {
		bump(c.out.dataSeq)
	}
}

// publish stores counter v in w, with a plain store where the connection
// allows it (see plain).
func (c *Conn) publish(w *atomic.Uint64, v uint64) {
	if c.plain {
		storePlain(w, v)
		return
	}
	w.Store(v)
}

// publishHead returns the bytes read so far to the producer and wakes it if
// it sleeps.
func (c *Conn) publishHead() {
	if c.phead == c.head {
		return
	}
	c.phead = c.head
	c.publish(c.in.head, c.head)
	// The producer sleeps until head reaches its target, so that it
	// refills the ring in large pieces instead of waking per frame. A
	// garbage target only delays it until its sleep times out.
	if c.in.spaceWaiting.Load() != 0 && int64(c.head-c.in.spaceTarget.Load()) >= 0 && c.in.spaceWaiting.Swap(0) != 0 {
		bump(c.in.spaceSeq)
	}
}

// waitFor is what a blocked call waits for.
type waitFor uint8

const (
	forData  waitFor = iota // Recv: bytes in the in ring
	forSpace                // Send: free space in the out ring
	forDone                 // Send: the receiver finished a descriptor transfer
)

// ready reports whether the side can make progress: data to read for the
// consumer, at least spaceWant free bytes for the producer, the last
// descriptor completed for a producer waiting for its transfer. A
// consumer armed for a sealed frame looks at the tail only if all is set:
// a wait's last look before it sleeps or gives up must see what was
// published.
func (c *Conn) ready(w waitFor, all bool) (bool, error) {
	switch w {
	case forData:
		if ok, err := c.sealed(); ok || err != nil {
			return ok, err
		}
		if c.armed && !all {
			// Poll the frame's line alone: a frame the general path
			// writes there is marked (see putHeader), and a look at the
			// tail, a line the producer writes at every frame, is a
			// miss that delays the sight of the seal.
			return false, nil
		}
		if err := c.loadTail(); err != nil {
			return false, err
		}
		return c.tailC != c.head, nil
	case forSpace:
		if err := c.loadHead(); err != nil {
			return false, err
		}
		return c.out.cap-(c.tail-c.headC) >= c.spaceWant(), nil
	}
	if err := c.loadDone(); err != nil {
		return false, err
	}
	return c.doneC == c.sticket, nil
}

// spaceWant is how much free space a producer that found the ring full
// waits for: a chunk, or a quarter of a small ring.
func (c *Conn) spaceWant() uint64 { return min(chunk, c.out.cap/4) }

// wait blocks until ready(w) holds, the connection is closed at either
// end, or ctx ends. It spins a little, then sleeps on the futex word of
// its ring in slices of at most sleepSlice.
//
// Lost wake-ups are impossible: the sleeper stores its waiting flag and
// then re-reads the counter (the tail too when it polls a seal: see
// ready's all); the other side stores the counter and then reads the
// flag. Go's atomics are sequentially consistent (on amd64 a
// store is an XCHG, a full barrier), so at least one of the two sees the
// other's store, and a wake-up bumps the futex word before waking so that a
// FUTEX_WAIT racing with it returns at once. Where the other side
// publishes with plain stores (see Conn.plain) the sleeper fences after
// storing its flag. The flag stays set from one sleep slice to the next
// until a wake-up clears it, so that a long wait fences once.
func (c *Conn) wait(ctx context.Context, w waitFor) error {
	var (
		seqw, flag, peerClosed *atomic.Uint32
		peerErr                error
	)
	switch w {
	case forData:
		seqw, flag, peerClosed, peerErr = c.in.dataSeq, c.in.dataWaiting, c.in.prodClosed, errPeerClosedRecv
	case forSpace:
		seqw, flag, peerClosed, peerErr = c.out.spaceSeq, c.out.spaceWaiting, c.out.consClosed, errPeerClosedSend
	default:
		seqw, flag, peerClosed, peerErr = c.out.doneSeq, c.out.doneWaiting, c.out.consClosed, errPeerClosedSend
	}
	var (
		done      <-chan struct{}
		spinUntil time.Time
		// yield: let other goroutines run between polls (see
		// transport.WithoutYield); core: give the core to other
		// processes (transport.WithCoreYield). Decided when first asked.
		yield, core, decided bool
	)
	// peerOff is the peer's off-core word (see offCore); a peer in this
	// process has none (it is one of the process's goroutines, which a
	// wait lets run instead).
	peerOff, peerPolls := c.out.consOff, c.peerSpin
	if w == forData {
		peerOff = c.in.prodOff
	}
	if c.local {
		peerPolls = 0
	}
	locked, flagged := false, false
	// spinFor is c.spin, or 0 once the wait finds that its caller computes
	// meanwhile (ov, looked up at the first look).
	spinFor := c.spin
	var ov transport.Overlap
	defer func() {
		if flagged {
			flag.Store(0)
		}
		if locked {
			runtime.UnlockOSThread()
			if c.lockHook != nil {
				c.lockHook(false)
			}
		}
	}()
	for i := 0; ; i++ {
		ok, err := c.ready(w, false)
		if ok || err != nil {
			return err
		}
		if c.closed.Load() {
			return transport.ErrClosed
		}
		if peerClosed.Load() != 0 || c.gone.Load() {
			// Whatever the peer published before closing is still
			// delivered: look once more now that the flag is seen.
			if ok, err := c.ready(w, true); ok || err != nil {
				return err
			}
			return c.peerErr(peerErr)
		}
		if spinFor == 0 && !decided {
			yield, core, decided = c.local || transport.Yields(ctx), transport.CoreYields(ctx), true
			// Only a wait that nothing else of its process waits for
			// may keep the processor between its yields.
			if !yield && transport.CopyWaits(ctx) {
				if over, err := c.copyWait(ctx, w, peerClosed); over {
					return err
				}
				// Past its bound, or the peer is going: on to the
				// sleeps, whose first look reports the latter.
				i = spinTight + spinYield
			}
		}
		// Where the processes outnumber the cores, a wait that gives its
		// core away skips the tight polls: it decides at once, by the
		// peer's mark, whether to poll on or yield (see below), since
		// polls of a peer that is not running only delay it.
		if i < spinTight && (spinFor != 0 || !core) {
			spin.Pause()
			continue
		}
		if spinFor == 0 {
			// The processes outnumber the cores: poll only briefly,
			// letting the process's other goroutines run between polls
			// (from a thread locked to its goroutine, as a call from C
			// is, a Gosched also puts the thread to sleep until the
			// scheduler hands it back, which lets the other processes
			// run), then sleep. A small operation's wait gives the core
			// to the other processes instead (transport.WithCoreYield),
			// and the processor to its own goroutines only if it must
			// (transport.WithoutYield).
			if core && i < transport.CoreYieldRounds {
				if peerPolls > 0 && peerOff.Load() == 0 {
					// The peer runs, on another core (see
					// offCore): poll on, not counting a yield.
					peerPolls--
					i--
					continue
				}
				if yield {
					c.yieldProcessor()
				}
				c.yieldCore()
				continue
			}
			if i < spinTight+spinYield {
				if !yield && !locked {
					// Nothing of this process waits for the
					// processor, so a yield would come straight back
					// and poll on: yield as a thread locked to its
					// goroutine, which sleeps until the scheduler
					// hands the processor back and meanwhile lets
					// the processes sharing the core run.
					runtime.LockOSThread()
					locked = true
					if c.lockHook != nil {
						c.lockHook(true)
					}
				}
				c.yieldProcessor()
				continue
			}
		} else if i%16 != 0 {
			spin.Pause()
			continue
		}
		// Keep polling for the spin time before sleeping: a futex
		// wake-up costs tens of microseconds on a virtual machine, far
		// more than the wait it ends.
		// Every 16th round: let the process's other goroutines run (one
		// may be sending what this wait is for), and look at the clock.
		// Not every round: from a thread locked to its goroutine, as
		// every call from C is, a Gosched hands the P to another thread
		// and back, two futex calls.
		if spinFor != 0 && ov == nil {
			ov = transport.OverlapOf(ctx)
		}
		if spinFor != 0 && ov.Overlapping() {
			// The caller computes meanwhile: wait from here as
			// where the processes outnumber the cores, leaving the
			// core to the computation. Looked at here, every 16th
			// round of the spin (the caller may say so late), not in
			// the tight polls, where the peer's answer is usually
			// found.
			spinFor, decided = 0, false
			continue
		}
		now := time.Now()
		if spinFor == 0 {
			spinUntil = now
		} else if spinUntil.IsZero() {
			spinUntil = now.Add(spinFor)
		}
		if now.Before(spinUntil) {
			if !decided {
				yield, decided = c.local || transport.Yields(ctx), true
			}
			if yield {
				c.yieldProcessor()
			}
			continue
		}
		if done == nil {
			done = ctx.Done()
		}
		select {
		case <-done:
			return ctx.Err()
		default:
		}
		d := sleepSlice
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left <= 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
				return context.DeadlineExceeded
			}
			d = min(d, left)
		}
		seq := seqw.Load()
		if w == forSpace {
			c.out.spaceTarget.Store(c.tail - c.out.cap + c.spaceWant())
		}
		if !flagged || flag.Load() == 0 {
			// Not set yet, or cleared by a wake-up.
			flag.Store(1)
			flagged = true
			if c.plain && w != forDone {
				// An error (none is known once GlobalReady holds)
				// would cost at most one sleep slice.
				_ = membarrier.Global()
			}
		}
		if ok, err := c.ready(w, true); ok || err != nil {
			return err
		}
		if !c.closed.Load() && !c.gone.Load() && peerClosed.Load() == 0 {
			if c.sleepHook != nil {
				c.sleepHook()
			}
			offCoreDuring(func() { futexWait(seqw, seq, d) })
		}
	}
}

// copyWait is wait's way where peers copy large blocks and the processes
// outnumber the cores (transport.WithCopyWait): after the first polls it
// gives the core away (sched_yield) between polls, since one of those
// peers may share it, until the wait is over (it reports so, with the
// wait's error, the context's included) or c.copyWaitYield has passed or
// the peer is going (it reports neither: wait goes on). A round is a system
// call, which a look at the context and the clock does not add to. Apart
// from wait's loop, so that the waits of small operations keep theirs as
// they were.
func (c *Conn) copyWait(ctx context.Context, w waitFor, peerClosed *atomic.Uint32) (over bool, err error) {
	start := time.Now()
	for i := 0; ; i++ {
		if ok, err := c.ready(w, false); ok || err != nil {
			return true, err
		}
		if c.closed.Load() || peerClosed.Load() != 0 || c.gone.Load() {
			return false, nil
		}
		if i < spinTight {
			spin.Pause()
			continue
		}
		if err := ctx.Err(); err != nil {
			return true, err
		}
		if time.Since(start) > c.copyWaitYield {
			return false, nil
		}
		c.schedYield()
	}
}

// yieldCore gives this thread's core to the other processes that wait for
// it (transport.SchedYield), unless recent yields found it taken by a
// program that keeps it for a whole time slice (transport.CoreYield),
// with the process marked off core meanwhile (see offCore).
func (c *Conn) yieldCore() {
	start, ok := c.coreYield.Begin()
	if !ok {
		return
	}
	c.schedYield()
	c.coreYield.End(start)
}

// schedYield gives this thread's core to the other processes
// (transport.SchedYield), with the process marked off core meanwhile (see
// offCore).
func (c *Conn) schedYield() {
	offCoreDuring(func() {
		transport.SchedYield()
		if c.coreYieldHook != nil {
			c.coreYieldHook()
		}
	})
}

// yieldProcessor lets the process's other goroutines run during a wait.
func (c *Conn) yieldProcessor() {
	if c.yieldHook != nil {
		c.yieldHook()
	}
	runtime.Gosched()
}

// peerErr returns the reason the peer is gone.
func (c *Conn) peerErr(closed error) error {
	if c.gone.Load() {
		return c.goneErr
	}
	return closed
}

// monitor waits on the control connection, which carries nothing after
// setup. When it fails (the peer closed it, or its process died and the
// kernel closed its socket) the peer is marked gone and the local waiters
// are woken.
func (c *Conn) monitor(want transport.Header) {
	defer close(c.monitored)
	err := transport.Watch(c.ctl, want)
	if c.closed.Load() {
		return
	}
	c.goneErr = fmt.Errorf("shm: rank %d: %w (control connection: %v)", c.peer, transport.ErrPeerClosed, err)
	c.gone.Store(true)
	if !c.closed.Load() {
		// Close may retire the rings meanwhile: the bumps then change
		// memory of this process's own (see Conn.Close).
		bump(c.in.dataSeq)
		bump(c.out.spaceSeq)
		bump(c.out.doneSeq)
	}
}

// Name returns "shm" (see transport.Named).
func (c *Conn) Name() string { return "shm" }

// Close implements transport.Conn. It marks this end closed in shared
// memory, wakes both sides, closes the control connection and retires the
// rings (see retireRings). The peer can still receive what was sent before
// Close, then gets an error wrapping transport.ErrPeerClosed.
//
// Calls running meanwhile fail with transport.ErrClosed (see afterClose).
// Close does not wait for them: that would cost every call a shared lock,
// two locked instructions (BenchmarkTwoProcessesExchange, an 8 B exchange
// between two processes, took 228-270 ns with it, 217-249 without).
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.out.prodClosed.Store(1)
		c.in.consClosed.Store(1)
		bump(c.out.dataSeq)
		bump(c.in.spaceSeq)
		bump(c.in.dataSeq)
		bump(c.out.spaceSeq)
		bump(c.in.doneSeq)
		bump(c.out.doneSeq)
		if c.ctl != nil {
			c.ctl.Close()
		}
		removeOffCore(c)
		c.reader.close()
		retireRings(c, c.outM, c.inM)
		c.regions.retire()
		if c.monitored != nil {
			<-c.monitored
		}
	})
	return nil
}
