// Package tcp is occl's socket transport.
//
// A Conn joins two ranks with one or more TCP streams. Frames are written
// with one writev (header and payload straight from caller memory) and read
// with readv (header and payload straight into the posted buffer), through
// the Go netpoller, so the hot path makes no copies beyond the kernel's and
// allocates nothing. Payloads of at least Options.StripeMin bytes are split
// across every stream of the pair so that one large message can use several
// cores' worth of kernel copy bandwidth. A Conn is transport.Duplex: a
// message sent while another is received (two ranks exchanging) can move
// both ways from one goroutine, which polls the socket in both directions.
//
// Every connection is authenticated with the communicator's secret (an HMAC
// challenge in both directions; the secret never crosses the wire), and
// every frame header is checked against what the receiver expects before its
// payload is used.
package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/occl/occl/transport"
)

// Defaults for Options.
const (
	DefaultStripeMin = 1 << 20
	maxEager         = 256 << 10

	// Reads of frames up to spinMaxBytes poll the socket up to
	// DefaultSpinReads times before waiting in the netpoller (a few tens
	// of microseconds).
	spinMaxBytes     = 64 << 10
	DefaultSpinReads = 64

	// spinLarge is how many times in a row a read of a larger frame, or
	// a write that finds the socket's buffer full, polls the socket
	// without progress before it waits in the netpoller, where polling is
	// on (Options.SpinReads): 0.6 to 3 ms on the machine measured below
	// (0.5-3 us a poll, a readv that finds nothing and a yield; a deadline
	// or cancellation that comes meanwhile takes effect when the polling
	// ends, that much later at most). A large
	// message moves in as many pieces as the socket buffers hold, and a
	// wait in the netpoller for each one puts the thread to sleep and has
	// the kernel wake it on the peer's next piece, an inter-processor
	// interrupt that a virtual machine pays dearly for. Measured on 2
	// cores, 2 processes over loopback, 5 interleaved rounds, medians
	// (Open MPI's TCP transport in the same rounds): 1 MiB AllReduce 828
	// us without it, 736 us polling 64 times, 567 us 1024 times, 560 us
	// 16384 times (MPI 470); 2 MiB AllToAll 631, 476, 479 and 568 us (MPI
	// 367).
	spinLarge = 1024
)

// Options tune a Conn.
type Options struct {
	// SocketBuffer, if positive, is the SO_SNDBUF / SO_RCVBUF size set on
	// every stream (the kernel may cap it). 0 leaves the kernel's buffer
	// autotuning on, which on Linux reaches larger windows than a fixed
	// size can (tcp_rmem's maximum) and measured faster on loopback.
	SocketBuffer int
	// StripeMin is the smallest payload split across several streams.
	// 0 means DefaultStripeMin.
	StripeMin int
	// SpinReads is how many times a read of a small frame polls the
	// socket before it waits in the netpoller. Polling saves the wake-up
	// from an idle CPU (tens to hundreds of microseconds on a virtual
	// machine), but when a host runs more processes than it has cores, a
	// polling process takes the core from the one that would send: then
	// it should not poll. 0 means DefaultSpinReads; negative means never,
	// for large frames and full socket buffers too (which otherwise poll
	// up to 1024 times without progress). Neither polls for a call whose
	// context says that its caller computes meanwhile
	// (transport.WithOverlap). A read that does not poll
	// still gives its core away (sched_yield) between tries, up to
	// transport.CoreYieldRounds times, if it is a small frame's under
	// transport.WithCoreYield: the process about to send it may be the
	// one waiting for this core.
	SpinReads int
	// Congestion is the congestion control algorithm of every stream
	// (TCP_CONGESTION): an algorithm's name ("cubic", "reno", "bbr"),
	// which NewConn fails without, CongestionSystem, or CongestionAuto
	// (also ""): SameHostCongestion between two addresses of one host,
	// the system's default elsewhere. Listen and Dial give sockets that
	// may join two addresses of this host SameHostCongestion before they
	// connect (every listener, dials to a local address), so that no
	// other algorithm runs on them first; NewConn then sets what this
	// asks.
	Congestion string
}

func (o Options) withDefaults() Options {
	if o.StripeMin <= 0 {
		o.StripeMin = DefaultStripeMin
	}
	if o.SpinReads == 0 {
		o.SpinReads = DefaultSpinReads
	}
	o.SpinReads = max(o.SpinReads, 0)
	return o
}

// Conn is a framed message stream to one peer over one or more sockets. It
// implements transport.Conn.
type Conn struct {
	streams   []*stream
	stripeMin int
	eager     int
	tx, rx    watch
	closed    atomic.Bool
	closeOnce sync.Once
	quit      chan struct{}
	// coreYield decides whether reads give their core away (see
	// stream.doRead).
	coreYield transport.CoreYield
	// buffers: Buffers may answer (see there).
	buffers bool
	// handHook, if set, runs before each stripe is handed to its
	// stream's worker (tests).
	handHook func(stripe int)
}

var (
	_ transport.Conn     = (*Conn)(nil)
	_ transport.Buffered = (*Conn)(nil)
)

// NewConn wraps connected, authenticated sockets (stream i of the pair at
// index i) into a Conn. Both sides must pass their sockets in the same
// stream order.
func NewConn(socks []*net.TCPConn, o Options) (*Conn, error) {
	if len(socks) == 0 {
		return nil, errors.New("tcp: NewConn needs at least one socket")
	}
	o = o.withDefaults()
	c := &Conn{stripeMin: o.StripeMin, quit: make(chan struct{})}
	for i, tc := range socks {
		s, err := newStream(tc, o, &c.coreYield)
		if err != nil {
			for _, t := range socks {
				t.Close()
			}
			return nil, fmt.Errorf("tcp: stream %d: %w", i, err)
		}
		c.streams = append(c.streams, s)
	}
	c.eager = c.streams[0].eagerLimit()
	c.buffers = unlimitedNotSent()
	c.tx.conn, c.tx.write = c, true
	c.rx.conn = c
	for _, s := range c.streams[1:] {
		s.startWorkers(c.quit, c.abort)
	}
	return c, nil
}

// Streams returns the number of sockets the Conn uses.
func (c *Conn) Streams() int { return len(c.streams) }

// EagerLimit implements transport.Conn.
func (c *Conn) EagerLimit() int { return c.eager }

// Buffers implements transport.Buffered: a payload within the eager limit
// that goes on one stream, whose socket's send buffer holds the frame on
// top of what it holds now, with room for the kernel's bookkeeping (see
// sendRoom). One system call. Where the system limits the unsent bytes of
// a socket (net.ipv4.tcp_notsent_lowat), a write may wait for the peer
// with memory to spare, and Buffers reports false. Under system-wide TCP
// memory pressure (net.ipv4.tcp_mem) a write it reported may still wait,
// for the system's memory, not for the peer.
func (c *Conn) Buffers(n int) bool {
	if n < 0 || n > c.eager || !c.buffers || c.closed.Load() || c.stripes(n) != 1 {
		return false
	}
	return c.streams[0].sendRoom(transport.HeaderSize + n)
}

// unlimitedNotSent reports whether this network namespace leaves the
// unsent bytes of a socket unlimited (net.ipv4.tcp_notsent_lowat at its
// default, the largest uint32): then only its send buffer decides whether
// a write waits.
func unlimitedNotSent() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_notsent_lowat")
	return err == nil && strings.TrimSpace(string(b)) == "4294967295"
}

// LocalAddr returns the local address of the first stream.
func (c *Conn) LocalAddr() net.Addr { return c.streams[0].tc.LocalAddr() }

// RemoteAddr returns the remote address of the first stream.
func (c *Conn) RemoteAddr() net.Addr { return c.streams[0].tc.RemoteAddr() }

// Send implements transport.Conn.
func (c *Conn) Send(ctx context.Context, h transport.Header, payload []byte) error {
	if c.closed.Load() {
		return transport.ErrClosed
	}
	if err := c.tx.arm(ctx); err != nil {
		return err
	}
	k := c.stripes(len(payload))
	if k == 1 {
		h.Len = uint64(len(payload))
		return c.mapErr(ctx, c.streams[0].writeFrame(ctx, &h, payload))
	}
	if err := c.hand(ctx, k, h, payload, false); err != nil {
		return err
	}
	lo, hi := span(len(payload), k, 0)
	h.Len = uint64(hi - lo)
	err := c.streams[0].writeFrame(ctx, &h, payload[lo:hi])
	if err != nil {
		c.abort(true)
	}
	for i := 1; i < k; i++ {
		err = stripeErr(err, <-c.streams[i].sendDone)
	}
	return c.mapErr(ctx, err)
}

// Recv implements transport.Conn.
func (c *Conn) Recv(ctx context.Context, want transport.Header, buf []byte) error {
	if c.closed.Load() {
		return transport.ErrClosed
	}
	if err := c.rx.arm(ctx); err != nil {
		return err
	}
	k := c.stripes(len(buf))
	if k == 1 {
		want.Len = uint64(len(buf))
		s := c.streams[0]
		// Asked only where reads do not poll: a context's values are
		// looked up through its chain.
		s.rcore = s.spin == 0 && transport.CoreYields(ctx)
		err := s.readFrame(ctx, &want, buf)
		s.rcore = false
		return c.mapErr(ctx, err)
	}
	if err := c.hand(ctx, k, want, buf, true); err != nil {
		return err
	}
	lo, hi := span(len(buf), k, 0)
	want.Len = uint64(hi - lo)
	err := c.streams[0].readFrame(ctx, &want, buf[lo:hi])
	if err != nil {
		c.abort(false)
	}
	for i := 1; i < k; i++ {
		err = stripeErr(err, <-c.streams[i].recvDone)
	}
	return c.mapErr(ctx, err)
}

// DuplexMax implements transport.Duplex: messages that go on one stream.
func (c *Conn) DuplexMax() int {
	if len(c.streams) == 1 {
		return int(^uint(0) >> 1)
	}
	return c.stripeMin - 1
}

// SendRecv implements transport.Duplex. The frame is written while the
// one awaited is read, by one loop on the calling goroutine that polls
// the socket both ways: a system call that finds no room (or no data) in
// one direction is followed by one in the other, and the loop waits in
// the netpoller, for data, only when neither moved for a while (see
// spinLarge). Waiting for data alone cannot miss progress: a send that
// finds the socket full waits for the peer to read, and a peer that reads
// either sends too (this side wakes) or has sent all it had (the read
// ends, and the rest is written as Send writes).
func (c *Conn) SendRecv(ctx context.Context, sh transport.Header, payload []byte, rh transport.Header, buf []byte) error {
	if c.closed.Load() {
		return transport.ErrClosed
	}
	if max(len(payload), len(buf)) > c.DuplexMax() {
		return fmt.Errorf("tcp: SendRecv of %d and %d bytes exceeds the duplex limit of %d", len(payload), len(buf), c.DuplexMax())
	}
	if err := c.tx.arm(ctx); err != nil {
		return err
	}
	if err := c.rx.arm(ctx); err != nil {
		return err
	}
	s := c.streams[0]
	sh.Len = uint64(len(payload))
	sh.Encode(s.whdr[:])
	s.wbufs[0], s.wbufs[1] = s.whdr[:], payload
	s.werr = nil
	rh.Len = uint64(len(buf))
	s.duplex = true
	err := s.readv(ctx, s.rhdr[:], buf, &rh)
	s.duplex = false
	if err == nil && (len(s.wbufs[0]) > 0 || len(s.wbufs[1]) > 0) {
		s.wspin = s.largeSpin()
		s.wctx = ctx
		err = s.rc.Write(s.wfn)
		s.wctx, s.wov = nil, nil
		if err == nil {
			err = s.werr
		}
	}
	s.wbufs[0], s.wbufs[1] = nil, nil
	return c.mapErr(ctx, err)
}

// RecvMessage reads the next frame whatever its header, for control
// messages whose length the receiver does not know in advance. The payload
// is appended to dst[:0] after checking that the declared length is at most
// max, so a hostile length cannot make the receiver allocate. Control
// frames always travel on the first stream.
func (c *Conn) RecvMessage(ctx context.Context, max int, dst []byte) (transport.Header, []byte, error) {
	var h transport.Header
	if c.closed.Load() {
		return h, dst, transport.ErrClosed
	}
	if err := c.rx.arm(ctx); err != nil {
		return h, dst, err
	}
	s := c.streams[0]
	if err := s.readv(ctx, s.rhdr[:], nil, nil); err != nil {
		return h, dst, c.mapErr(ctx, err)
	}
	if err := h.Decode(s.rhdr[:]); err != nil {
		return h, dst, err
	}
	if h.Len > uint64(max) {
		return h, dst, &transport.FrameError{Reason: fmt.Sprintf("%s frame of %d bytes exceeds the %d-byte limit", h.Kind, h.Len, max)}
	}
	n := int(h.Len)
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	if err := s.readv(ctx, dst, nil, nil); err != nil {
		return h, dst, c.mapErr(ctx, err)
	}
	return h, dst, nil
}

// Name returns "tcp" (see transport.Named).
func (c *Conn) Name() string { return "tcp" }

// Close implements transport.Conn.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		close(c.quit)
		for _, s := range c.streams {
			s.tc.Close()
		}
		c.tx.disarm()
		c.rx.disarm()
	})
	return nil
}

// hand gives stripes 1 to k-1 of a message of header h over buf to their
// streams' workers, receiving into buf if recv, else sending from it. If
// the Conn closes first it returns ErrClosed, but only once the workers of
// the stripes already handed are done with buf: the caller owns it again
// when the call returns.
func (c *Conn) hand(ctx context.Context, k int, h transport.Header, buf []byte, recv bool) error {
	for i := 1; i < k; i++ {
		lo, hi := span(len(buf), k, i)
		t := task{ctx: ctx, h: h, buf: buf[lo:hi]}
		t.h.Len = uint64(hi - lo)
		if c.handHook != nil {
			c.handHook(i)
		}
		s := c.streams[i]
		q := s.sendq
		if recv {
			q = s.recvq
		}
		select {
		case q <- t:
		case <-c.quit:
			for _, s := range c.streams[1:i] {
				if recv {
					<-s.recvDone
				} else {
					<-s.sendDone
				}
			}
			return transport.ErrClosed
		}
	}
	return nil
}

// abort ends the waits of one direction (write: sends) on every stream
// once a stripe of a message has failed, so that a peer that garbles one
// stream and leaves the others silent, or stops reading them, does not
// keep the call waiting for the rest until its context ends (or forever).
// After any error the Conn is unusable (see transport.Conn), so the
// deadline may stay in the past. Error paths only.
func (c *Conn) abort(write bool) {
	for _, s := range c.streams {
		if write {
			s.tc.SetWriteDeadline(time.Unix(1, 0))
		} else {
			s.tc.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

// stripeErr returns the error a striped call reports, given the one kept
// so far and that of another stripe: the first, unless it is only a
// deadline that abort set because of the other.
func stripeErr(err, e error) error {
	if err == nil || e != nil && errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(e, os.ErrDeadlineExceeded) {
		return e
	}
	return err
}

// stripes returns how many streams carry a payload of n bytes.
func (c *Conn) stripes(n int) int {
	if len(c.streams) == 1 || n < c.stripeMin {
		return 1
	}
	return len(c.streams)
}

// span returns the byte range of part i when n bytes are split into k parts
// (4 KiB aligned, the last part takes the rest).
func span(n, k, i int) (lo, hi int) {
	part := (n / k) &^ 4095
	lo = i * part
	hi = lo + part
	if i == k-1 {
		hi = n
	}
	return lo, hi
}

func (c *Conn) mapErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if c.closed.Load() {
		return transport.ErrClosed
	}
	var me *transport.MismatchError
	var fe *transport.FrameError
	switch {
	case errors.As(err, &me), errors.As(err, &fe):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		if e := ctx.Err(); e != nil {
			return e
		}
		return context.DeadlineExceeded
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("%w (%v)", transport.ErrPeerClosed, err)
	case errors.Is(err, net.ErrClosed):
		return transport.ErrClosed
	}
	return err
}

// watch ties one direction of a Conn to the context of the current call.
// Arming with the same context again is cheap, so a communicator that runs
// an operation of many messages under one context pays once per operation:
// the context's deadline becomes the sockets' deadline, and cancellation
// moves the deadline into the past, which wakes the blocked call. A
// generation number keeps a late cancellation of an earlier context from
// touching the deadline of the current one.
type watch struct {
	mu       sync.Mutex
	conn     *Conn
	write    bool
	done     <-chan struct{}
	deadline time.Time
	armed    bool
	gen      uint64
	stop     func() bool
}

func (w *watch) arm(ctx context.Context) error {
	done := ctx.Done()
	dl, _ := ctx.Deadline()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed && done == w.done && dl.Equal(w.deadline) {
		return ctx.Err()
	}
	w.disarmLocked()
	if err := ctx.Err(); err != nil {
		return err
	}
	w.gen++
	w.set(dl)
	w.done, w.deadline, w.armed = done, dl, true
	if done != nil {
		gen := w.gen
		w.stop = context.AfterFunc(ctx, func() {
			w.mu.Lock()
			if w.gen == gen {
				w.set(time.Unix(1, 0))
			}
			w.mu.Unlock()
		})
	}
	return nil
}

func (w *watch) disarm() {
	w.mu.Lock()
	w.disarmLocked()
	w.mu.Unlock()
}

func (w *watch) disarmLocked() {
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
	w.gen++
	w.armed = false
}

func (w *watch) set(t time.Time) {
	for _, s := range w.conn.streams {
		if w.write {
			s.tc.SetWriteDeadline(t)
		} else {
			s.tc.SetReadDeadline(t)
		}
	}
}

// task is one stripe of a message handed to a stream's worker.
type task struct {
	ctx context.Context
	h   transport.Header
	buf []byte
}

// stream is one socket of a Conn with the state its vectored I/O needs.
// The callbacks passed to the netpoller are bound once, so a frame costs no
// allocation.
type stream struct {
	tc *net.TCPConn
	rc syscall.RawConn

	whdr  [transport.HeaderSize]byte
	wbufs [2][]byte
	werr  error
	wfn   func(fd uintptr) bool
	wspin int // polls left without progress (see spinLarge)
	// wctx is the context of the write under way, wov its
	// transport.Overlap once a poll has looked it up (overlapping).
	wctx context.Context
	wov  transport.Overlap
	// wpolls counts the polls of writes that found no room (tests).
	wpolls int

	rhdr   [transport.HeaderSize]byte
	rbufs  [2][]byte
	rwant  transport.Header
	rdone  int
	rerr   error
	rfn    func(fd uintptr) bool
	rcheck bool
	rspin  int // polls left without progress
	rlarge bool
	// rctx and rov are wctx and wov for the read under way.
	rctx context.Context
	rov  transport.Overlap
	// rpolls counts the polls of reads that found nothing (tests).
	rpolls int
	// duplex: the read also writes what is left of wbufs (SendRecv).
	duplex bool
	// rcore: the read may give its core away while it waits (see
	// doRead), ryield how many more times, cy whether it still may.
	rcore  bool
	ryield int
	cy     *transport.CoreYield
	// coreYieldHook, if set, runs after every such yield (tests).
	coreYieldHook func()
	spin          int // Options.SpinReads

	sendq, recvq       chan task
	sendDone, recvDone chan error

	// mem is the socket's SO_MEMINFO as readMem (memfn) read it last,
	// memOK whether it could; the sending side's (see sendRoom).
	mem   [memInfoValues]uint32
	memOK bool
	memfn func(fd uintptr)
}

func newStream(tc *net.TCPConn, o Options, cy *transport.CoreYield) (*stream, error) {
	tc.SetNoDelay(true)
	if o.SocketBuffer > 0 {
		tc.SetReadBuffer(o.SocketBuffer)
		tc.SetWriteBuffer(o.SocketBuffer)
	}
	if err := applyCongestion(tc, o.Congestion); err != nil {
		return nil, err
	}
	tc.SetKeepAlive(true)
	tc.SetKeepAlivePeriod(15 * time.Second)
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &stream{tc: tc, rc: rc, spin: o.SpinReads, cy: cy}
	s.wfn = s.doWrite
	s.rfn = s.doRead
	s.memfn = s.readMem
	return s, nil
}

// largeSpin is how many polls without progress a large transfer makes
// (spinLarge), none where the stream does not poll.
func (s *stream) largeSpin() int {
	if s.spin <= 0 {
		return 0
	}
	return spinLarge
}

func (s *stream) eagerLimit() int {
	v := 0
	s.rc.Control(func(fd uintptr) {
		v, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	return max(0, min(v/4-transport.HeaderSize, maxEager))
}

// Indices of SO_MEMINFO's values (SK_MEMINFO_* in linux/sock_diag.h).
const (
	memSndbuf      = 3
	memWmemQueued  = 5
	memInfoValues  = 9
	skbBookkeeping = 4 << 10 // more than a socket buffer's overhead per skb
	skbPayload     = 64 << 10
)

// sendRoom reports whether a write of frame bytes to the stream's socket
// returns without waiting: the kernel takes a write while the memory
// queued for sending (sk_wmem_queued, counting every buffer's overhead,
// and the sent bytes until they are acknowledged) is below the socket's
// send buffer, checked before each new buffer, so the frame must fit
// below it with the overhead of the buffers it takes. One getsockopt
// (SO_MEMINFO), which does not block.
func (s *stream) sendRoom(frame int) bool {
	s.memOK = false
	s.rc.Control(s.memfn)
	need := uint64(frame) + uint64(frame/skbPayload+2)*skbBookkeeping
	return s.memOK && uint64(s.mem[memWmemQueued])+need < uint64(s.mem[memSndbuf])
}

// readMem reads the socket's SO_MEMINFO into s.mem, setting s.memOK if it
// could (see sendRoom). A method value made once (memfn), so that asking
// allocates nothing.
func (s *stream) readMem(fd uintptr) {
	l := uint32(unsafe.Sizeof(s.mem))
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&s.mem[0])), uintptr(unsafe.Pointer(&l)), 0)
	s.memOK = errno == 0 && l == uint32(unsafe.Sizeof(s.mem))
}

func (s *stream) startWorkers(quit chan struct{}, abort func(write bool)) {
	s.sendq, s.recvq = make(chan task), make(chan task)
	s.sendDone, s.recvDone = make(chan error, 1), make(chan error, 1)
	go func() {
		for {
			select {
			case t := <-s.sendq:
				err := s.writeFrame(t.ctx, &t.h, t.buf)
				if err != nil {
					abort(true)
				}
				s.sendDone <- err
			case <-quit:
				return
			}
		}
	}()
	go func() {
		for {
			select {
			case t := <-s.recvq:
				err := s.readFrame(t.ctx, &t.h, t.buf)
				if err != nil {
					abort(false)
				}
				s.recvDone <- err
			case <-quit:
				return
			}
		}
	}()
}

// writeFrame writes header h (with h.Len already set) and payload with as
// few writev calls as the socket buffer allows, for a call under ctx.
func (s *stream) writeFrame(ctx context.Context, h *transport.Header, payload []byte) error {
	h.Encode(s.whdr[:])
	s.wbufs[0], s.wbufs[1] = s.whdr[:], payload
	s.werr = nil
	s.wspin = s.largeSpin()
	s.wctx = ctx
	err := s.rc.Write(s.wfn)
	s.wbufs[0], s.wbufs[1] = nil, nil
	s.wctx, s.wov = nil, nil
	if err != nil {
		return err
	}
	return s.werr
}

func (s *stream) doWrite(fd uintptr) bool {
	for {
		var iov [2]unix.Iovec
		n := iovecs(&s.wbufs, &iov)
		if n == 0 {
			return true
		}
		// A raw system call, as readv's in doRead: the socket is
		// non-blocking, so the call returns at once (EAGAIN when the
		// buffer is full), and telling the runtime of it only costs:
		// entering and leaving a system call takes its bookkeeping
		// each time, and for a call that copies for more than 20 us
		// the runtime's monitor may hand the processor to another
		// thread (with GOMAXPROCS 1 it does), which on a rank bound to
		// one CPU then takes turns with this one for it. The price: a
		// stop-the-world of the garbage collector waits for the call,
		// at most a socket buffer's copy. occl-bench -z 1 over
		// loopback TCP, 6-8 interleaved rounds, medians before /
		// after: 2 processes, 8 B AllReduce 7.69 / 6.44 us, 1 KiB
		// AllToAll 8.95 / 6.98 us, 64 KiB AllReduce 32.8 / 27.2 us; 4
		// processes on 2 cores, 8 B AllReduce 114 / 73 us, 64 KiB 324
		// / 175 us, 1 MiB 1891 / 1701 us; 16 MiB unchanged within the
		// noise.
		w, _, errno := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
		switch errno {
		case 0:
		case unix.EAGAIN:
			if s.wspin > 0 && overlapping(s.wctx, &s.wov) {
				s.wspin = 0
			}
			if s.wspin > 0 {
				// The peer is taking the previous pieces: poll (see
				// spinLarge), letting the process's other goroutines
				// run in between, among them the one that reads
				// what the peer sends meanwhile.
				s.wspin--
				s.wpolls++
				runtime.Gosched()
				continue
			}
			return false
		case unix.EINTR:
			continue
		default:
			s.werr = errno
			return true
		}
		s.wspin = s.largeSpin()
		advance(&s.wbufs, int(w))
	}
}

// readFrame reads one frame whose header must equal *want into buf, for
// a call under ctx.
func (s *stream) readFrame(ctx context.Context, want *transport.Header, buf []byte) error {
	return s.readv(ctx, s.rhdr[:], buf, want)
}

// readv fills a then b completely. When want is not nil, a is a frame
// header: it is decoded and checked against *want as soon as it has
// arrived, before b is considered valid.
func (s *stream) readv(ctx context.Context, a, b []byte, want *transport.Header) error {
	s.rctx = ctx
	s.rbufs[0], s.rbufs[1] = a, b
	s.rcheck, s.rerr, s.rdone = want != nil, nil, 0
	// Large: a large frame to read, or, in SendRecv, to write.
	s.rlarge = len(a)+len(b) > spinMaxBytes || s.duplex && len(s.wbufs[0])+len(s.wbufs[1]) > spinMaxBytes
	s.rspin = s.spin
	if s.rlarge {
		s.rspin = s.largeSpin()
	}
	s.ryield = 0
	if s.rcore && !s.rlarge {
		s.ryield = transport.CoreYieldRounds
	}
	if want != nil {
		s.rwant = *want
	}
	err := s.rc.Read(s.rfn)
	s.rbufs[0], s.rbufs[1] = nil, nil
	s.rctx, s.rov = nil, nil
	if err != nil {
		return err
	}
	return s.rerr
}

func (s *stream) doRead(fd uintptr) bool {
	for {
		wrote := false
		if s.duplex && (len(s.wbufs[0]) > 0 || len(s.wbufs[1]) > 0) {
			var iov [2]unix.Iovec
			n := iovecs(&s.wbufs, &iov)
			w, _, errno := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
			switch errno {
			case 0:
				wrote = w > 0
				advance(&s.wbufs, int(w))
			case unix.EAGAIN, unix.EINTR:
			default:
				s.rerr = errno
				return true
			}
		}
		var iov [2]unix.Iovec
		n := iovecs(&s.rbufs, &iov)
		if n == 0 {
			return true
		}
		// Raw, as writev's in doWrite: the socket is non-blocking.
		r, _, errno := unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
		switch errno {
		case 0:
		case unix.EAGAIN:
			if wrote {
				// Progress the other way (SendRecv).
				if s.rlarge {
					s.rspin = s.largeSpin()
				}
				continue
			}
			if s.ryield > 0 {
				// Processes outnumber the cores, so reads do not
				// poll, but this small one may give its core away
				// (transport.WithCoreYield): the peer about to send
				// it may be the process waiting for this core, and
				// a wake-up from the netpoller costs tens of
				// microseconds.
				s.ryield--
				if start, ok := s.cy.Begin(); ok {
					transport.SchedYield()
					if s.coreYieldHook != nil {
						s.coreYieldHook()
					}
					s.cy.End(start)
					continue
				}
				s.ryield = 0
			}
			if s.rspin > 0 && overlapping(s.rctx, &s.rov) {
				s.rspin = 0
			}
			if s.rspin > 0 {
				// A small message is probably on its way, or the rest
				// of a large one (see spinLarge): polling for a few
				// microseconds is much cheaper than parking in the
				// netpoller and being woken on another CPU. Yield in
				// between: the message awaited may be the answer to
				// one that another goroutine of this process has yet
				// to send (with one P, a tight loop would keep it
				// from running until the spin ends).
				s.rspin--
				s.rpolls++
				runtime.Gosched()
				continue
			}
			return false
		case unix.EINTR:
			continue
		default:
			s.rerr = errno
			return true
		}
		if r == 0 {
			if s.rdone == 0 {
				s.rerr = io.EOF
			} else {
				s.rerr = io.ErrUnexpectedEOF
			}
			return true
		}
		s.rdone += int(r)
		if s.rlarge {
			s.rspin = s.largeSpin()
		}
		advance(&s.rbufs, int(r))
		if s.rcheck && s.rdone >= transport.HeaderSize {
			s.rcheck = false
			var got transport.Header
			if err := got.Decode(s.rhdr[:]); err != nil {
				s.rerr = err
				return true
			}
			if err := transport.Check(&got, &s.rwant); err != nil {
				s.rerr = err
				return true
			}
		}
	}
}

// overlapping reports whether the caller of the read or write under ctx
// computes while it waits (transport.Overlap): then it does not poll but
// waits in the netpoller at once, and leaves the processor to that
// computation. Asked before every poll, since a caller may say so after its
// call began; the Overlap is looked up in ctx into *ov at the first poll,
// so that a call that does not poll pays only for keeping ctx.
func overlapping(ctx context.Context, ov *transport.Overlap) bool {
	if *ov == nil {
		if ctx == nil {
			return false
		}
		*ov = transport.OverlapOf(ctx)
	}
	return (*ov).Overlapping()
}

// iovecs points iov at the non-empty buffers of bufs and returns how many
// there are.
func iovecs(bufs *[2][]byte, iov *[2]unix.Iovec) int {
	n := 0
	for _, b := range bufs {
		if len(b) > 0 {
			iov[n].Base = &b[0]
			iov[n].SetLen(len(b))
			n++
		}
	}
	return n
}

// advance drops n bytes from the front of the buffer pair.
func advance(bufs *[2][]byte, n int) {
	for i := range bufs {
		k := min(n, len(bufs[i]))
		bufs[i] = bufs[i][k:]
		n -= k
	}
}

func retryable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}
