package rdma

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma/verbs"
)

// Work request ids: the top byte says what the request is, the rest an
// index (a staging slot, a receive buffer).
const (
	wrSlot   = 1 // RDMA WRITE WITH IMM of a staging slot into the peer's window
	wrCredit = 2 // credit return
	wrCTS    = 3 // SEND of a clear-to-send
	wrRndv   = 4 // RDMA WRITE (WITH IMM for the last) of a rendezvous payload
	wrBye    = 5 // close notice
	wrRecv   = 6 // receive

	wrKindShift = 56
)

func wrID(kind, idx int) uint64 { return uint64(kind)<<wrKindShift | uint64(idx) }

// Queue budgets. The send queue holds at most ctlMax control requests,
// rndvWindow rendezvous writes and slotBudget slot writes; the receive
// queue one receive per window slot plus the bounded control traffic: at
// most 4 credit messages (see creditBatch), one clear-to-send, one
// rendezvous completion and one close notice.
const (
	ctlMax       = 8
	rndvWindow   = 16
	slotBudget   = 64
	recvBufSize  = 64
	rqExtra      = 8
	pollBatch    = 32
	spinPolls    = 64
	yieldPolls   = 64
	hwYieldPolls = 2000
	ctlGrace     = 20 * time.Millisecond
	closeWait    = 200 * time.Millisecond
)

// Conn is one end of an RDMA connection: a reliable-connected queue pair
// to one peer with a receive window the peer writes into. It implements
// transport.Conn. Create one with Connect.
type Conn struct {
	dev    *Device
	qp     verbs.QueuePair
	cq     verbs.CompletionQueue
	notify <-chan struct{}
	peer   int
	info   ConnInfo

	// Registered memory (mmap'd: outside the Go heap, never moves).
	win, stage, rbufs, ctsBuf []byte
	winMR, stageMR, rbufMR    verbs.MemoryRegion

	slots, slotSize   int // this side's window
	pslots, pslotSize int // the peer's window
	pwinAddr          uint64
	pwinKey           uint32
	batch             int // credits returned at once (this window)
	eager             int
	rndvMin           int // payloads above this use rendezvous; -1: never
	rndvChunk         int
	peerChunk         int
	rqDepth           int

	life sync.RWMutex // held shared by Send and Recv, exclusively by Close

	mu  sync.Mutex // everything below, and every post
	wcs [pollBatch]verbs.WorkCompletion
	swr verbs.SendWR
	ssg [1]verbs.SGE
	rwr verbs.RecvWR
	rsg [1]verbs.SGE

	slotOut, rndvOut, ctlOut int

	// Sending side.
	credits   int    // free slots in the peer's window
	sendSeq   uint32 // slots used so far
	stageBusy []bool // a write from this staging slot is in flight
	ctsHave   bool
	ctsArg    uint32
	ctsRaw    [ctsSize]byte
	rndvSeq   uint32
	ctsOut    cts // the clear-to-send Recv is sending

	// Receiving side.
	arrivals    []arrival // ring of slots written by the peer, not consumed
	arrHead     uint32    // slots consumed
	arrTail     uint32    // slots arrived
	freed       int       // consumed slots not yet returned
	rndvActive  bool
	rndvWant    uint32
	doneHave    bool
	doneLen     uint32
	peerBye     bool
	byeSent     bool
	ctlGone     error
	ctlGoneAt   time.Time
	fatal       error
	broken      bool // the queue pair was moved to ERROR by this side
	lastAsyncAt time.Time

	closed    atomic.Bool
	quit      chan struct{}
	wakeS     chan struct{}
	wakeR     chan struct{}
	timerS    *time.Timer
	timerR    *time.Timer
	closeOnce sync.Once

	ctl       transport.Conn
	monitored chan struct{}
	stats     connStats

	// Test hooks: hookCTS edits a clear-to-send before it is sent,
	// hookWrite runs before the first write of a rendezvous.
	hookCTS   func(*cts)
	hookWrite func()
}

type arrival struct {
	kind immKind
	n    uint32
}

type connStats struct {
	eager, rndv, declined, slotWrites, bytes, creditWaits, creditMsgs, credits atomic.Uint64
}

// Stats counts what a connection did.
type Stats struct {
	EagerFrames        uint64 // frames sent through the window
	RendezvousFrames   uint64 // frames written straight into the receiver's buffer
	DeclinedRendezvous uint64 // rendezvous requests this side refused (registration failed)
	SlotWrites         uint64 // RDMA WRITEs into the peer's window
	BytesSent          uint64 // payload bytes sent
	CreditWaits        uint64 // times Send found no free slot in the peer's window and waited
	CreditMessages     uint64 // credit returns sent
	CreditsReturned    uint64 // slots returned to the peer
}

// ConnInfo describes an established connection.
type ConnInfo struct {
	Device       string
	Port         int
	GIDIndex     int
	GID          verbs.GID
	LinkLayer    verbs.LinkLayer
	Emulated     bool
	QPN          uint32
	PeerQPN      uint32
	PathMTU      int
	Slots        int // this side's receive window
	SlotSize     int
	PeerSlots    int // the window this side writes into
	PeerSlotSize int
	EagerLimit   int
	Rendezvous   int // payloads larger than this use rendezvous (-1: never)
}

var _ transport.Conn = (*Conn)(nil)

// EagerLimit implements transport.Conn.
func (c *Conn) EagerLimit() int { return c.eager }

// Peer returns the rank at the other end.
func (c *Conn) Peer() int { return c.peer }

// Info describes the connection.
func (c *Conn) Info() ConnInfo { return c.info }

// Stats returns the connection's counters.
func (c *Conn) Stats() Stats {
	s := &c.stats
	return Stats{EagerFrames: s.eager.Load(), RendezvousFrames: s.rndv.Load(), DeclinedRendezvous: s.declined.Load(),
		SlotWrites: s.slotWrites.Load(), BytesSent: s.bytes.Load(), CreditWaits: s.creditWaits.Load(),
		CreditMessages: s.creditMsgs.Load(), CreditsReturned: s.credits.Load()}
}

// Device returns the device the connection uses.
func (c *Conn) Device() *Device { return c.dev }

// ---------------------------------------------------------------- sending

// Send implements transport.Conn. Payloads of at most EagerLimit bytes
// are copied into registered staging memory and written into the peer's
// window, and Send returns without waiting for the peer; larger ones use
// rendezvous (see the package documentation) and return once written.
func (c *Conn) Send(ctx context.Context, h transport.Header, payload []byte) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed.Load() {
		return transport.ErrClosed
	}
	h.Len = uint64(len(payload))
	c.stats.bytes.Add(uint64(len(payload)))
	if c.rndvMin >= 0 && len(payload) > c.rndvMin {
		return c.sendRndv(ctx, &h, payload)
	}
	c.stats.eager.Add(1)
	return c.sendFrame(ctx, &h, payload, immFrame, 0)
}

// sendFrame writes a frame through the peer's window: the preamble and as
// much payload as fits in the first slot, then continuation slots. For a
// rendezvous request (kind immRTS) only the preamble goes.
func (c *Conn) sendFrame(ctx context.Context, h *transport.Header, payload []byte, kind immKind, rseq uint32) error {
	idx, seq, err := c.acquireSlot(ctx)
	if err != nil {
		return err
	}
	s := c.stage[idx*c.pslotSize : (idx+1)*c.pslotSize]
	encodePreamble(s, h, rseq)
	n := 0
	if kind == immFrame {
		n = copy(s[preambleSize:], payload)
	}
	if err := c.postSlot(idx, seq, kind, preambleSize+n); err != nil {
		return err
	}
	if kind == immFrame {
		return c.stream(ctx, payload[n:])
	}
	return nil
}

// stream writes payload through continuation slots.
func (c *Conn) stream(ctx context.Context, payload []byte) error {
	for len(payload) > 0 {
		idx, seq, err := c.acquireSlot(ctx)
		if err != nil {
			return err
		}
		n := copy(c.stage[idx*c.pslotSize:(idx+1)*c.pslotSize], payload)
		if err := c.postSlot(idx, seq, immCont, n); err != nil {
			return err
		}
		payload = payload[n:]
	}
	return nil
}

// acquireSlot waits for a free slot in the peer's window (a credit), for
// the staging slot that mirrors it to be idle, and for room in the send
// queue, and reserves all three.
func (c *Conn) acquireSlot(ctx context.Context) (idx int, seq uint32, err error) {
	waited := false
	for i := 0; ; i++ {
		c.mu.Lock()
		c.progressLocked()
		if err := c.sendErrLocked(); err != nil {
			c.mu.Unlock()
			return 0, 0, err
		}
		idx = int(c.sendSeq % uint32(c.pslots))
		if c.credits > 0 && !c.stageBusy[idx] && c.slotOut < slotBudget {
			c.credits--
			c.stageBusy[idx] = true
			c.slotOut++
			seq = c.sendSeq
			c.sendSeq++
			c.mu.Unlock()
			return idx, seq, nil
		}
		noCredit := c.credits == 0
		c.mu.Unlock()
		if noCredit && !waited {
			waited = true
			c.stats.creditWaits.Add(1)
		}
		if err := c.pause(ctx, i, true); err != nil {
			return 0, 0, err
		}
	}
}

// postSlot writes n bytes of staging slot idx into the same slot of the
// peer's window.
func (c *Conn) postSlot(idx int, seq uint32, kind immKind, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	off := uint64(idx * c.pslotSize)
	c.ssg[0] = verbs.SGE{Addr: c.stageMR.Addr() + off, Length: uint32(n), LKey: c.stageMR.LKey()}
	c.swr = verbs.SendWR{ID: wrID(wrSlot, idx), Op: verbs.WRRDMAWriteImm, Flags: verbs.SendSignaled,
		SG: c.ssg[:1], RemoteAddr: c.pwinAddr + off, RKey: c.pwinKey, Imm: makeImm(kind, seq)}
	if err := c.qp.PostSend(&c.swr); err != nil {
		c.stageBusy[idx] = false
		c.slotOut--
		c.failLocked(c.peerErr("post a write", err))
		return c.fatal
	}
	c.stats.slotWrites.Add(1)
	return nil
}

// sendRndv sends a large payload by rendezvous: a request through the
// window, then, once the receiver answered with its buffer, RDMA WRITEs
// straight from the payload into it, the last with immediate data.
func (c *Conn) sendRndv(ctx context.Context, h *transport.Header, payload []byte) error {
	reg, err := c.dev.cache.Acquire(payload, 0)
	if err != nil {
		// No registration, no zero copy: stream through the window.
		c.stats.eager.Add(1)
		return c.sendFrame(ctx, h, payload, immFrame, 0)
	}
	defer c.dev.cache.Release(reg)
	c.mu.Lock()
	rseq := c.rndvSeq
	c.rndvSeq++
	c.mu.Unlock()
	if err := c.sendFrame(ctx, h, nil, immRTS, rseq); err != nil {
		return err
	}
	// Wait for the clear-to-send.
	var ct cts
	for i := 0; ; i++ {
		c.mu.Lock()
		c.progressLocked()
		if c.ctsHave {
			c.ctsHave = false
			err := ct.decode(c.ctsRaw[:])
			switch {
			case err != nil:
			case c.ctsArg != rseq&immArgMask || ct.seq != rseq:
				err = frameErr("clear-to-send for rendezvous %d, expected %d", ct.seq, rseq)
			case !ct.decline && ct.length != uint64(len(payload)):
				err = frameErr("clear-to-send for %d bytes, the frame has %d", ct.length, len(payload))
			}
			if err != nil {
				c.failLocked(err)
			}
			c.mu.Unlock()
			if err != nil {
				return err
			}
			break
		}
		err := c.sendErrLocked()
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if err := c.pause(ctx, i, true); err != nil {
			return err
		}
	}
	if ct.decline {
		c.stats.eager.Add(1)
		return c.stream(ctx, payload)
	}
	c.stats.rndv.Add(1)
	if c.hookWrite != nil {
		c.hookWrite()
	}
	base := addrOf(payload)
	for off := 0; off < len(payload); {
		n := min(len(payload)-off, c.rndvChunk)
		last := off+n == len(payload)
		for i := 0; ; i++ {
			c.mu.Lock()
			c.progressLocked()
			err := c.sendErrLocked()
			if err == nil && c.rndvOut < rndvWindow {
				c.ssg[0] = verbs.SGE{Addr: base + uint64(off), Length: uint32(n), LKey: reg.LKey()}
				c.swr = verbs.SendWR{ID: wrID(wrRndv, 0), Op: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SG: c.ssg[:1], RemoteAddr: ct.addr + uint64(off), RKey: ct.rkey}
				if last {
					c.swr.Op, c.swr.Imm = verbs.WRRDMAWriteImm, makeImm(immDone, rseq)
				}
				if perr := c.qp.PostSend(&c.swr); perr != nil {
					c.failLocked(c.peerErr("post a rendezvous write", perr))
					err = c.fatal
				} else {
					c.rndvOut++
				}
				c.mu.Unlock()
				if err != nil {
					return c.abortSend(err)
				}
				break
			}
			c.mu.Unlock()
			if err == nil {
				err = c.pause(ctx, i, true)
			}
			if err != nil {
				return c.abortSend(err)
			}
		}
		off += n
	}
	// The payload may be reused once every write completed.
	for i := 0; ; i++ {
		c.mu.Lock()
		c.progressLocked()
		done := c.rndvOut == 0
		err := c.sendErrLocked()
		c.mu.Unlock()
		if done && err == nil {
			return nil
		}
		if err == nil {
			err = c.pause(ctx, i, true)
		}
		if err != nil {
			return c.abortSend(err)
		}
	}
}

// abortSend stops a rendezvous whose writes may still read the payload:
// the queue pair goes to ERROR and Send returns only once the device has
// given every write back (flushed), so the caller may reuse the payload.
func (c *Conn) abortSend(err error) error {
	c.mu.Lock()
	c.breakLocked(err)
	deadline := time.Now().Add(closeWait)
	for c.rndvOut > 0 && time.Now().Before(deadline) {
		c.progressLocked()
		if c.rndvOut > 0 {
			c.mu.Unlock()
			time.Sleep(20 * time.Microsecond)
			c.mu.Lock()
		}
	}
	c.mu.Unlock()
	if c.closed.Load() && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return transport.ErrClosed
	}
	return err
}

// -------------------------------------------------------------- receiving

// Recv implements transport.Conn. The frame's header is checked against
// want before any of its payload is copied into buf.
func (c *Conn) Recv(ctx context.Context, want transport.Header, buf []byte) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed.Load() {
		return transport.ErrClosed
	}
	want.Len = uint64(len(buf))
	a, idx, err := c.nextArrival(ctx)
	if err != nil {
		return err
	}
	if a.kind == immCont {
		return c.failFrame(frameErr("continuation slot where a frame starts"))
	}
	slot := c.win[idx*c.slotSize : idx*c.slotSize+int(a.n)]
	got, rseq, err := decodePreamble(slot, a.kind == immRTS)
	if err != nil {
		return c.failFrame(err)
	}
	if err := transport.Check(&got, &want); err != nil {
		return err
	}
	if a.kind == immRTS {
		if a.n != preambleSize || len(buf) == 0 {
			return c.failFrame(frameErr("rendezvous request of %d bytes for a %d-byte frame", a.n, len(buf)))
		}
		if err := c.consume(ctx); err != nil {
			return err
		}
		return c.recvRndv(ctx, rseq, buf)
	}
	first := int(a.n) - preambleSize
	if first != min(len(buf), c.slotSize-preambleSize) {
		return c.failFrame(frameErr("first slot carries %d payload bytes, expected %d", first, min(len(buf), c.slotSize-preambleSize)))
	}
	copy(buf, slot[preambleSize:])
	if err := c.consume(ctx); err != nil {
		return err
	}
	return c.recvStream(ctx, buf[first:])
}

// recvStream fills buf from continuation slots.
func (c *Conn) recvStream(ctx context.Context, buf []byte) error {
	for len(buf) > 0 {
		a, idx, err := c.nextArrival(ctx)
		if err != nil {
			return err
		}
		n := min(len(buf), c.slotSize)
		if a.kind != immCont || int(a.n) != n {
			return c.failFrame(frameErr("%v slot of %d bytes where a continuation of %d bytes was due", a.kind, a.n, n))
		}
		copy(buf, c.win[idx*c.slotSize:idx*c.slotSize+n])
		if err := c.consume(ctx); err != nil {
			return err
		}
		buf = buf[n:]
	}
	return nil
}

// nextArrival waits for the next slot the peer wrote.
func (c *Conn) nextArrival(ctx context.Context) (arrival, int, error) {
	for i := 0; ; i++ {
		c.mu.Lock()
		c.progressLocked()
		if c.arrHead != c.arrTail {
			a := c.arrivals[c.arrHead%uint32(c.slots)]
			idx := int(c.arrHead % uint32(c.slots))
			c.mu.Unlock()
			return a, idx, nil
		}
		err := c.recvErrLocked()
		c.mu.Unlock()
		if err != nil {
			return arrival{}, 0, err
		}
		if err := c.pause(ctx, i, false); err != nil {
			return arrival{}, 0, err
		}
	}
}

// consume frees the oldest arrived slot and returns credits to the peer
// when a batch is due. The credits go out before it returns (it waits, if
// need be, for the device to complete earlier control requests, which
// does not depend on the peer's application): a receiver that goes idle
// must not sit on credits the sender waits for.
func (c *Conn) consume(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arrHead++
	c.freed++
	if c.freed < c.batch {
		return nil
	}
	if err := c.ctlRoomLocked(ctx, false); err != nil {
		return err
	}
	c.returnCreditsLocked()
	return nil
}

// ctlRoomLocked waits, with c.mu held on entry and on return, until the
// send queue has room for a control request.
func (c *Conn) ctlRoomLocked(ctx context.Context, send bool) error {
	for i := 0; c.ctlOut >= ctlMax; i++ {
		c.progressLocked()
		if c.ctlOut < ctlMax {
			break
		}
		if c.fatal != nil {
			return c.fatal
		}
		c.mu.Unlock()
		err := c.pause(ctx, i, send)
		c.mu.Lock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Conn) returnCreditsLocked() {
	if c.freed < c.batch || c.ctlOut >= ctlMax || c.fatal != nil || c.broken {
		return
	}
	c.swr = verbs.SendWR{ID: wrID(wrCredit, 0), Op: verbs.WRRDMAWriteImm, Flags: verbs.SendSignaled,
		Imm: makeImm(immCredit, uint32(c.freed))}
	if err := c.qp.PostSend(&c.swr); err != nil {
		c.failLocked(c.peerErr("return credits", err))
		return
	}
	c.ctlOut++
	c.stats.creditMsgs.Add(1)
	c.stats.credits.Add(uint64(c.freed))
	c.freed = 0
}

// recvRndv receives a rendezvous frame: it registers buf, sends its
// address and key, and waits for the writes.
func (c *Conn) recvRndv(ctx context.Context, rseq uint32, buf []byte) error {
	reg, rerr := c.dev.cache.Acquire(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	ct := &c.ctsOut // only Recv uses it
	*ct = cts{seq: rseq}
	if rerr != nil {
		ct.decline = true
		c.stats.declined.Add(1)
	} else {
		ct.addr, ct.rkey, ct.length = addrOf(buf), reg.RKey(), uint64(len(buf))
	}
	c.mu.Lock()
	if !ct.decline {
		c.rndvActive, c.rndvWant, c.doneHave = true, rseq&immArgMask, false
	}
	err := c.recvErrLocked()
	if err == nil {
		err = c.ctlRoomLocked(ctx, false)
	}
	if err == nil {
		err = c.postCTSLocked(ct)
	}
	c.mu.Unlock()
	if ct.decline {
		if err != nil {
			return err
		}
		return c.recvStream(ctx, buf)
	}
	if err != nil {
		return c.abortRecv(reg, err)
	}
	for i := 0; ; i++ {
		c.mu.Lock()
		c.progressLocked()
		if c.doneHave {
			c.rndvActive, c.doneHave = false, false
			n := c.doneLen
			c.mu.Unlock()
			last := len(buf) - (len(buf)-1)/c.peerChunk*c.peerChunk
			if int(n) != last {
				return c.abortRecv(reg, c.failFrame(frameErr("last rendezvous write of %d bytes, expected %d", n, last)))
			}
			c.dev.cache.Release(reg)
			return nil
		}
		err := c.recvErrLocked()
		c.mu.Unlock()
		if err == nil {
			err = c.pause(ctx, i, false)
		}
		if err != nil {
			return c.abortRecv(reg, err)
		}
	}
}

func (c *Conn) postCTSLocked(ct *cts) error {
	if c.hookCTS != nil {
		c.hookCTS(ct)
	}
	ct.encode(c.ctsBuf)
	c.ssg[0] = verbs.SGE{Addr: c.rbufMR.Addr() + uint64(c.rqDepth*recvBufSize), Length: ctsSize, LKey: c.rbufMR.LKey()}
	c.swr = verbs.SendWR{ID: wrID(wrCTS, 0), Op: verbs.WRSendImm, Flags: verbs.SendSignaled, SG: c.ssg[:1],
		Imm: makeImm(immCTS, ct.seq)}
	if err := c.qp.PostSend(&c.swr); err != nil {
		c.failLocked(c.peerErr("send a clear-to-send", err))
		return c.fatal
	}
	c.ctlOut++
	return nil
}

// abortRecv stops a rendezvous receive after this side exposed buf to the
// peer: the queue pair goes to ERROR, so nothing more is placed, and buf's
// registration is dropped, so its remote key is dead, before the caller
// gets buf back.
func (c *Conn) abortRecv(reg *Reg, err error) error {
	c.mu.Lock()
	c.breakLocked(err)
	c.rndvActive = false
	c.mu.Unlock()
	c.dev.cache.InvalidateReg(reg)
	c.dev.cache.Release(reg)
	if c.closed.Load() && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return transport.ErrClosed
	}
	return err
}

// ---------------------------------------------------------------- progress

// progressLocked polls the completion queue and applies what it finds.
func (c *Conn) progressLocked() {
	got := false
	for {
		n, err := c.cq.Poll(c.wcs[:])
		if err != nil {
			c.failLocked(c.peerErr("poll the completion queue", err))
			break
		}
		for i := 0; i < n; i++ {
			c.handleLocked(&c.wcs[i])
		}
		got = got || n > 0
		if n < len(c.wcs) {
			break
		}
	}
	if got {
		if c.freed >= c.batch {
			c.returnCreditsLocked()
		}
		wake(c.wakeS)
		wake(c.wakeR)
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// handleLocked applies one completion.
func (c *Conn) handleLocked(wc *verbs.WorkCompletion) {
	kind, idx := int(wc.ID>>wrKindShift), int(wc.ID&(1<<wrKindShift-1))
	switch kind {
	case wrSlot:
		if idx < len(c.stageBusy) {
			c.stageBusy[idx] = false
		}
		c.slotOut--
	case wrRndv:
		c.rndvOut--
	case wrCredit, wrCTS, wrBye:
		c.ctlOut--
	case wrRecv:
	default:
		c.failLocked(c.peerErr("device", fmt.Errorf("completion with unknown id %#x", wc.ID)))
		return
	}
	if wc.Status != verbs.WCSuccess {
		c.wcErrorLocked(wc)
		return
	}
	if kind != wrRecv {
		return
	}
	if idx >= c.rqDepth {
		c.failLocked(c.peerErr("device", fmt.Errorf("receive completion with unknown id %#x", wc.ID)))
		return
	}
	if err := c.applyRecvLocked(wc, idx); err != nil {
		c.failLocked(err)
		return
	}
	c.postRecvLocked(idx)
}

// applyRecvLocked checks and applies what a receive completion reports.
// Every check guards against a peer that does not follow the protocol.
func (c *Conn) applyRecvLocked(wc *verbs.WorkCompletion, idx int) error {
	if wc.Flags&verbs.WCFlagWithImm == 0 {
		return frameErr("message without immediate data (opcode %v)", wc.Opcode)
	}
	k, arg, err := decodeImm(wc.Imm)
	if err != nil {
		return err
	}
	write := wc.Opcode == verbs.WCRecvRDMAWithImm
	if write != (k != immCTS) {
		return frameErr("%v arrived as %v", k, wc.Opcode)
	}
	switch k {
	case immFrame, immCont, immRTS:
		switch {
		case arg != c.arrTail&immArgMask:
			return frameErr("%v in slot sequence %d, expected %d", k, arg, c.arrTail&immArgMask)
		case c.arrTail-c.arrHead >= uint32(c.slots):
			return frameErr("peer overran the receive window (%d slots)", c.slots)
		case wc.ByteLen > uint32(c.slotSize):
			return frameErr("%d bytes written into a %d-byte slot", wc.ByteLen, c.slotSize)
		case k != immCont && wc.ByteLen < preambleSize:
			return frameErr("%v of %d bytes, shorter than its preamble", k, wc.ByteLen)
		}
		c.arrivals[c.arrTail%uint32(c.slots)] = arrival{kind: k, n: wc.ByteLen}
		c.arrTail++
	case immCredit:
		if arg == 0 || int(arg) > c.pslots-c.credits || wc.ByteLen != 0 {
			return frameErr("peer returned %d credits with %d of %d slots in use", arg, c.pslots-c.credits, c.pslots)
		}
		c.credits += int(arg)
	case immCTS:
		if wc.ByteLen != ctsSize || c.ctsHave {
			return frameErr("unexpected clear-to-send of %d bytes", wc.ByteLen)
		}
		copy(c.ctsRaw[:], c.rbufs[idx*recvBufSize:idx*recvBufSize+ctsSize])
		c.ctsHave, c.ctsArg = true, arg
	case immDone:
		if !c.rndvActive || c.doneHave || arg != c.rndvWant {
			return frameErr("rendezvous completion %d while none is expected", arg)
		}
		c.doneHave, c.doneLen = true, wc.ByteLen
	case immBye:
		c.peerBye = true
	}
	return nil
}

func (c *Conn) postRecvLocked(idx int) {
	if c.fatal != nil || c.broken {
		return
	}
	c.rsg[0] = verbs.SGE{Addr: c.rbufMR.Addr() + uint64(idx*recvBufSize), Length: recvBufSize, LKey: c.rbufMR.LKey()}
	c.rwr = verbs.RecvWR{ID: wrID(wrRecv, idx), SG: c.rsg[:1]}
	if err := c.qp.PostRecv(&c.rwr); err != nil {
		c.failLocked(c.peerErr("post a receive", err))
	}
}

// wcErrorLocked handles a failed work request. Flushed requests after the
// peer said goodbye, or after this side moved the queue pair to ERROR, are
// expected; anything else means the connection is lost.
func (c *Conn) wcErrorLocked(wc *verbs.WorkCompletion) {
	if c.fatal != nil {
		return
	}
	if wc.Status == verbs.WCWRFlushErr && (c.peerBye || c.broken || c.closed.Load()) {
		if c.peerBye {
			c.failLocked(c.peerErr("", nil))
		}
		return
	}
	c.failLocked(c.peerErr("", fmt.Errorf("work request failed: %v (vendor error %#x)", wc.Status, wc.VendorErr)))
}

// peerErr wraps the reason a connection is lost in transport.ErrPeerClosed,
// the error the other transports give when the peer is gone.
func (c *Conn) peerErr(what string, err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("rdma: rank %d: %w", c.peer, transport.ErrPeerClosed)
	case errors.Is(err, verbs.ErrDeviceRemoved):
		return fmt.Errorf("rdma: rank %d: %s: %w (%w)", c.peer, what, transport.ErrPeerClosed, err)
	case what == "":
		return fmt.Errorf("rdma: rank %d: %w (%v)", c.peer, transport.ErrPeerClosed, err)
	}
	return fmt.Errorf("rdma: rank %d: %s: %w (%v)", c.peer, what, transport.ErrPeerClosed, err)
}

// failLocked records the connection's first fatal error and wakes the
// waiters. The bootstrap connection is closed too, so that the peer learns
// of the failure at once, as it would of a reset TCP connection.
func (c *Conn) failLocked(err error) {
	if c.fatal != nil {
		return
	}
	c.fatal = err
	if !c.closed.Load() && c.ctl != nil && c.monitored != nil {
		go c.ctl.Close()
	}
	wake(c.wakeS)
	wake(c.wakeR)
}

// failFrame records a protocol violation by the peer and returns it.
func (c *Conn) failFrame(err error) error {
	c.mu.Lock()
	c.failLocked(err)
	c.mu.Unlock()
	return err
}

// breakLocked moves the queue pair to ERROR (once), so that the device
// stops using memory this side handed it, and makes the error fatal.
func (c *Conn) breakLocked(err error) {
	if !c.broken {
		c.broken = true
		c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateError}, verbs.QPAttrState)
	}
	c.failLocked(err)
}

// sendErrLocked is why Send cannot go on, or nil.
func (c *Conn) sendErrLocked() error {
	switch {
	case c.closed.Load():
		return transport.ErrClosed
	case c.fatal != nil:
		return c.fatal
	case c.peerBye:
		return c.peerErr("", nil)
	}
	return c.ctlErrLocked()
}

// recvErrLocked is why Recv cannot go on once nothing is left to receive.
func (c *Conn) recvErrLocked() error { return c.sendErrLocked() }

// ctlErrLocked reports a lost bootstrap connection, once the device had a
// moment to deliver what the peer sent before it went away.
func (c *Conn) ctlErrLocked() error {
	if c.ctlGone != nil && time.Since(c.ctlGoneAt) > ctlGrace {
		return c.peerErr("", c.ctlGone)
	}
	if c.dev != nil && time.Since(c.lastAsyncAt) > time.Millisecond {
		c.lastAsyncAt = time.Now()
		if err := c.dev.dev.AsyncError(); err != nil {
			c.failLocked(c.peerErr("device", err))
			return c.fatal
		}
	}
	return nil
}

// pause waits before the i-th retry of a blocked call: it spins, then
// yields, then sleeps until the completion queue signals (emulated
// devices) or for a short, growing while (hardware), or until the call's
// context ends, the connection closes or the other direction made
// progress.
func (c *Conn) pause(ctx context.Context, i int, send bool) error {
	if i < spinPolls {
		return nil
	}
	limit := spinPolls + yieldPolls
	if c.notify == nil {
		limit = spinPolls + hwYieldPolls
	}
	if i < limit {
		runtime.Gosched()
		return nil
	}
	w, t := c.wakeR, c.timerR
	if send {
		w, t = c.wakeS, c.timerS
	}
	d := time.Millisecond
	if c.notify == nil {
		d = min(time.Duration(i-limit+1)*5*time.Microsecond, 100*time.Microsecond)
	}
	t.Reset(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-c.quit:
		t.Stop()
		return transport.ErrClosed
	case <-c.notify:
	case <-w:
	case <-t.C:
	}
	t.Stop()
	return nil
}

// monitor watches the bootstrap connection, which carries nothing after
// setup: when it fails the peer's process is gone (or it closed the
// connection), and blocked calls are woken to notice.
func (c *Conn) monitor(want transport.Header) {
	defer close(c.monitored)
	err := transport.Watch(c.ctl, want)
	if c.closed.Load() {
		return
	}
	c.mu.Lock()
	if c.ctlGone == nil {
		c.ctlGone, c.ctlGoneAt = fmt.Errorf("bootstrap connection: %v", err), time.Now()
	}
	c.mu.Unlock()
	wake(c.wakeS)
	wake(c.wakeR)
	time.AfterFunc(ctlGrace+time.Millisecond, func() {
		wake(c.wakeS)
		wake(c.wakeR)
	})
}

// --------------------------------------------------------------- closing

// Name returns "rdma" (see transport.Named).
func (c *Conn) Name() string { return "rdma" }

// Close implements transport.Conn. It wakes pending calls (they fail with
// transport.ErrClosed), tells the peer it is closing (it receives what was
// sent before, then transport.ErrPeerClosed), moves the queue pair to
// ERROR and waits for the device to give back every request, destroys the
// queue pair and completion queue, deregisters and unmaps the windows and
// closes the bootstrap connection.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		close(c.quit)
		c.life.Lock()
		defer c.life.Unlock()
		c.mu.Lock()
		if c.fatal == nil && !c.broken && !c.peerBye && c.ctlOut < ctlMax {
			c.swr = verbs.SendWR{ID: wrID(wrBye, 0), Op: verbs.WRRDMAWriteImm, Flags: verbs.SendSignaled, Imm: makeImm(immBye, 0)}
			if c.qp.PostSend(&c.swr) == nil {
				c.ctlOut++
				c.byeSent = true
			}
		}
		// Let the notice reach the peer, then stop the queue pair and
		// reap every outstanding request.
		deadline := time.Now().Add(closeWait)
		for c.byeSent && c.ctlOut > 0 && c.fatal == nil && time.Now().Before(deadline) {
			c.progressLocked()
			c.mu.Unlock()
			time.Sleep(20 * time.Microsecond)
			c.mu.Lock()
		}
		c.broken = true
		c.qp.Modify(&verbs.QPAttr{State: verbs.QPStateError}, verbs.QPAttrState)
		for c.slotOut+c.rndvOut+c.ctlOut > 0 && time.Now().Before(deadline.Add(closeWait)) {
			c.progressLocked()
			c.mu.Unlock()
			time.Sleep(20 * time.Microsecond)
			c.mu.Lock()
		}
		c.mu.Unlock()
		c.ctl.Close()
		c.release()
		<-c.monitored
	})
	return nil
}

// release destroys the verbs objects and frees the memory.
func (c *Conn) release() {
	if c.qp != nil {
		c.qp.Close()
	}
	for _, mr := range []verbs.MemoryRegion{c.winMR, c.stageMR, c.rbufMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if c.cq != nil {
		c.cq.Close()
	}
	for _, b := range [][]byte{c.win, c.stage, c.rbufs} {
		if b != nil {
			unix.Munmap(b)
		}
	}
	c.win, c.stage, c.rbufs = nil, nil, nil
	if c.dev != nil {
		c.dev.Close()
	}
}

func mapMem(n int) ([]byte, error) {
	n = (n + 4095) &^ 4095
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
}
