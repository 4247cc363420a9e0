package emu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occl/occl/topo"
	"github.com/occl/occl/transport"
)

// Every data frame is preceded by a timing frame carrying the frame's
// arrival time (CLOCK_MONOTONIC nanoseconds, little endian).
var timingHeader = transport.Header{
	Kind: transport.KindControl,
	Op:   0xE7,
	Seq:  0x656d752d74696d65, // "emu-time"
}

const timingLen = 8

const (
	// streamGap is the longest pause between the return of a Send and the
	// next Send on the same Conn that still continues a stream: only then
	// does the frame get the catch-up credit of its predecessor.
	streamGap = int64(50 * time.Microsecond)
	// maxAhead bounds the arrival time a receiver accepts: one further in
	// the future is not from a peer on this machine's clock.
	maxAhead = int64(time.Hour)
)

// Conn is a transport.Conn shaped to the path between two ranks of a
// Fabric. Make one with Fabric.Wrap.
type Conn struct {
	inner      transport.Conn
	f          *Fabric
	self, peer int

	// Sender state, used only by the goroutine in Send.
	view   *view
	res    resources
	credit int64 // how late the last Send returned, up to the fabric's CatchUp
	ret    int64 // when the last Send returned
	sw     waiter
	sts    [timingLen]byte

	// Receiver state, used only by the goroutine in Recv.
	rw  waiter
	rts [timingLen]byte

	busy      atomic.Int32 // a Send is using the resource table
	closed    atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ transport.Conn = (*Conn)(nil)

func newConn(f *Fabric, inner transport.Conn, self, peer int) *Conn {
	return &Conn{
		inner: inner,
		f:     f,
		self:  self,
		peer:  peer,
		sw:    newWaiter(f.spin),
		rw:    newWaiter(f.spin),
		done:  make(chan struct{}),
	}
}

// resources are the slots a frame books on its path, with the time one
// byte takes on each (nanoseconds; a nil slot is not booked).
type resources struct {
	link, tx, rx       *int64
	txPkt, rxPkt       *int64 // packet-sized frames' next-free times
	linkNs, txNs, rxNs float64
	lat                int64
	unrouted           bool
	bytes              *atomic.Int64 // the byte counter of the path's link
}

// maxDur bounds the time one frame books on a resource (13 days), so that
// next-free times cannot overflow.
const maxDur = 1 << 50

// dur is the time in nanoseconds n bytes take at nsPerByte.
func dur(n int, nsPerByte float64) int64 {
	return int64(math.Ceil(min(float64(n)*nsPerByte, maxDur)))
}

// resolve derives the resources of this Conn's path on view v.
func (c *Conn) resolve(v *view) {
	p, unrouted := route(v.topo, c.self, c.peer)
	tab := c.f.tab
	r := resources{
		link:     tab.link(c.self, c.peer),
		linkNs:   nsPerByte(p.Bandwidth),
		lat:      int64(max(p.Latency, 0) * 1e9),
		unrouted: unrouted,
		bytes:    c.f.linkCounter(pathLink(v.topo, c.self, c.peer, p)),
	}
	if p.Class == topo.EPS || p.Class == topo.OCS {
		// A packet-network NIC runs at its own rate; an optical port
		// runs at the rate of the one circuit it carries.
		src, dst := r.linkNs, r.linkNs
		if p.Class == topo.EPS {
			if p.SrcNIC >= 0 {
				src = v.nicNs[p.SrcNIC]
			}
			if p.DstNIC >= 0 {
				dst = v.nicNs[p.DstNIC]
			}
		}
		if p.SrcNIC >= 0 && src > 0 {
			r.tx, r.txPkt = tab.nic(p.SrcNIC, dirTx)
			r.txNs = src
		}
		if p.DstNIC >= 0 && dst > 0 {
			r.rx, r.rxPkt = tab.nic(p.DstNIC, dirRx)
			r.rxNs = dst
		}
	}
	c.res = r
	c.view = v
}

// PacketSize is the largest frame, header included, that a NIC side
// serves as a packet (see the package documentation).
const PacketSize = 4096

// predict returns the serialisation end that book would give a frame of n
// bytes ready at t0, without booking anything.
func (r *resources) predict(t0 int64, n int) int64 {
	start, end := t0, t0
	for _, side := range [2]struct {
		all, pkt *int64
		ns       float64
	}{{r.tx, r.txPkt, r.txNs}, {r.rx, r.rxPkt, r.rxNs}} {
		if side.all == nil {
			continue
		}
		s := max(atomic.LoadInt64(side.all), t0)
		if n <= PacketSize {
			s = packetStart(t0, atomic.LoadInt64(side.pkt), atomic.LoadInt64(side.all), dur(PacketSize, side.ns))
		}
		start, end = max(start, s), max(end, s+dur(n, side.ns))
	}
	s := max(atomic.LoadInt64(r.link), start)
	return max(end, s+dur(n, r.linkNs))
}

// book reserves a frame of n bytes ready at t0 on every resource and
// returns when its last byte has been serialised: each NIC side serves
// frames in booking order from t0 on, packet-sized ones ahead of larger
// ones, the link from when both NIC sides have started the frame, and the
// frame is done when all three are.
func (r *resources) book(t0 int64, n int) int64 {
	start, end := t0, t0
	if r.tx != nil {
		d := dur(n, r.txNs)
		s := reserveNIC(r.tx, r.txPkt, r.txNs, t0, n, d)
		start, end = max(start, s), max(end, s+d)
	}
	if r.rx != nil {
		d := dur(n, r.rxNs)
		s := reserveNIC(r.rx, r.rxPkt, r.rxNs, t0, n, d)
		start, end = max(start, s), max(end, s+d)
	}
	d := dur(n, r.linkNs)
	s := reserve(r.link, start, d)
	return max(end, s+d)
}

// reserveNIC books d nanoseconds for a frame of n bytes on one NIC side.
func reserveNIC(all, pkt *int64, ns float64, t0 int64, n int, d int64) int64 {
	if n <= PacketSize {
		return reservePacket(all, pkt, t0, d, dur(PacketSize, ns))
	}
	return reserve(all, t0, d)
}

// Send implements transport.Conn. It books the frame on its path, hands
// it to the inner connection together with its arrival time, and returns
// once the frame has been serialised on the emulated path (the payload may
// be reused earlier, but the caller is held as if by a NIC of the
// emulated speed). A frame that could not be serialised before ctx's
// deadline is not sent: Send fails at once with an error wrapping
// context.DeadlineExceeded.
func (c *Conn) Send(ctx context.Context, h transport.Header, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.busy.Store(1)
	if c.closed.Load() {
		c.busy.Store(0)
		return transport.ErrClosed
	}
	if v := c.f.view.Load(); v != c.view {
		c.resolve(v)
	}
	n := len(payload) + transport.HeaderSize
	now := monotime()
	t0 := now
	if now-c.ret <= streamGap {
		t0 = max(now-c.credit, c.f.recvd[c.self].Load())
	}
	c.credit = 0
	if dl, ok := deadlineOf(ctx, now); ok {
		if end := c.res.predict(t0, n); end > dl {
			c.busy.Store(0)
			return deadlineError(fmt.Sprintf("send of %d bytes to rank %d", len(payload), c.peer), time.Duration(end-now))
		}
	}
	end := c.res.book(t0, n)
	c.busy.Store(0)

	c.f.frames.Add(1)
	c.f.bytes.Add(int64(n))
	c.res.bytes.Add(int64(n))
	c.f.held.Add(max(end-now, 0))
	if c.res.unrouted {
		c.f.unrouted.Add(1)
	}
	binary.LittleEndian.PutUint64(c.sts[:], uint64(end+c.res.lat))
	if err := c.inner.Send(ctx, timingHeader, c.sts[:]); err != nil {
		return err
	}
	if err := c.inner.Send(ctx, h, payload); err != nil {
		return err
	}
	if err := c.sw.until(ctx, c.done, end); err != nil {
		return err
	}
	// In the model the caller got control back at end; how late it
	// actually did is not the link's doing, so a frame that follows at
	// once (within streamGap) may start that much earlier: never more than
	// the fabric's CatchUp, never before the link is free, and never before
	// a Recv of this rank that it may depend on.
	c.ret = monotime()
	c.credit = min(max(c.ret-end, 0), c.f.catchUp)
	return nil
}

// Recv implements transport.Conn. It returns once the frame has arrived
// on the emulated path: its last byte serialised plus the path latency.
// It fails at once with an error wrapping context.DeadlineExceeded if that
// is past ctx's deadline.
func (c *Conn) Recv(ctx context.Context, want transport.Header, buf []byte) error {
	if c.closed.Load() {
		return transport.ErrClosed
	}
	if err := c.inner.Recv(ctx, timingHeader, c.rts[:]); err != nil {
		if me := (*transport.MismatchError)(nil); errors.As(err, &me) {
			return fmt.Errorf("emu: frame from rank %d carries no emulated timing (is its end wrapped?): %w", c.peer, err)
		}
		return err
	}
	arrival := int64(binary.LittleEndian.Uint64(c.rts[:]))
	if err := c.inner.Recv(ctx, want, buf); err != nil {
		return err
	}
	now := monotime()
	if arrival <= now {
		c.received(now)
		return nil
	}
	if arrival-now > maxAhead {
		return &transport.FrameError{Reason: fmt.Sprintf("emulated arrival time %v ahead of this clock", time.Duration(arrival-now))}
	}
	if dl, ok := deadlineOf(ctx, now); ok && arrival > dl {
		return deadlineError(fmt.Sprintf("receive of %d bytes from rank %d", len(buf), c.peer), time.Duration(arrival-now))
	}
	if err := c.rw.until(ctx, c.done, arrival); err != nil {
		return err
	}
	c.received(arrival)
	return nil
}

// received notes that a Recv of this rank returned at t.
func (c *Conn) received(t int64) {
	r := &c.f.recvd[c.self]
	for {
		v := r.Load()
		if v >= t || r.CompareAndSwap(v, t) {
			return
		}
	}
}

// EagerLimit implements transport.Conn: the inner connection's, less the
// timing frame that travels with every frame.
func (c *Conn) EagerLimit() int {
	return max(c.inner.EagerLimit()-transport.HeaderSize-timingLen, 0)
}

// Close implements transport.Conn: it closes the inner connection, ends
// any wait of a pending Send or Recv with transport.ErrClosed and releases
// the Conn's hold on its Fabric.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		close(c.done)
		c.closeErr = c.inner.Close()
		// A Send that saw the Conn open may still be booking (a few
		// atomic operations, never a wait); the table must stay mapped
		// until it is done.
		for c.busy.Load() != 0 {
			runtime.Gosched()
		}
		if err := c.f.release(); err != nil && c.closeErr == nil {
			c.closeErr = err
		}
	})
	return c.closeErr
}

// Unwrap returns the inner connection.
func (c *Conn) Unwrap() transport.Conn { return c.inner }

// Name returns "emu(" + the wrapped connection's name + ")" (see
// transport.Named).
func (c *Conn) Name() string { return "emu(" + transport.Name(c.inner) + ")" }

// Ranks returns the ranks of the two ends: this one and the peer.
func (c *Conn) Ranks() (self, peer int) { return c.self, c.peer }
