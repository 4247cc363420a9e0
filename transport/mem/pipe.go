// Package mem is the in-process transport: two Conns joined by bounded byte
// rings, one per direction. It encodes real frames, applies backpressure
// like a socket (a sender blocks while the ring is full) and checks every
// header like the TCP transport does, so schedules and communicators tested
// over it behave as they would across processes, only faster and
// deterministically.
package mem

import (
	"context"
	"fmt"
	"sync"

	"github.com/occl/occl/internal/memcopy"
	"github.com/occl/occl/transport"
)

// DefaultCapacity is the ring size of each direction of a Pipe.
const DefaultCapacity = 256 << 10

// Pipe returns the two ends of an in-process connection. capacity is the
// number of bytes each direction buffers before Send blocks; values below
// transport.HeaderSize are raised to it.
func Pipe(capacity int) (a, b *Conn) {
	if capacity < transport.HeaderSize {
		capacity = transport.HeaderSize
	}
	ab, ba := newRing(capacity), newRing(capacity)
	a = &Conn{out: ab, in: ba}
	b = &Conn{out: ba, in: ab}
	return a, b
}

// Conn is one end of a Pipe. It implements transport.Conn.
type Conn struct {
	out, in *ring
	shdr    [transport.HeaderSize]byte
	rhdr    [transport.HeaderSize]byte
	closeMu sync.Once
}

var (
	_ transport.Conn     = (*Conn)(nil)
	_ transport.Buffered = (*Conn)(nil)
)

// Send implements transport.Conn.
func (c *Conn) Send(ctx context.Context, h transport.Header, payload []byte) error {
	h.Len = uint64(len(payload))
	h.Encode(c.shdr[:])
	if err := c.out.write(ctx, c.shdr[:]); err != nil {
		return err
	}
	return c.out.write(ctx, payload)
}

// Recv implements transport.Conn.
func (c *Conn) Recv(ctx context.Context, want transport.Header, buf []byte) error {
	if err := c.in.read(ctx, c.rhdr[:]); err != nil {
		return err
	}
	var got transport.Header
	if err := got.Decode(c.rhdr[:]); err != nil {
		return err
	}
	want.Len = uint64(len(buf))
	if err := transport.Check(&got, &want); err != nil {
		return err
	}
	return c.in.read(ctx, buf)
}

// EagerLimit implements transport.Conn: a quarter of the ring.
func (c *Conn) EagerLimit() int { return (c.out.cap() - transport.HeaderSize) / 4 }

// Buffers implements transport.Buffered: the header and n payload bytes
// fit in the ring's free space, and neither end is closed.
func (c *Conn) Buffers(n int) bool {
	q := c.out
	q.mu.Lock()
	defer q.mu.Unlock()
	return n >= 0 && !q.wclosed && !q.rclosed && len(q.buf)-(q.w-q.r) >= transport.HeaderSize+n
}

// Name returns "mem" (see transport.Named).
func (c *Conn) Name() string { return "mem" }

// Close implements transport.Conn. Pending and later calls on this end fail
// with transport.ErrClosed; the other end can still read what was buffered,
// then gets transport.ErrPeerClosed.
func (c *Conn) Close() error {
	c.closeMu.Do(func() {
		c.out.close(true)
		c.in.close(false)
	})
	return nil
}

// ring is one direction of a pipe: a single-producer, single-consumer byte
// ring guarded by a mutex, with wake-up channels for the blocked side.
type ring struct {
	mu       sync.Mutex
	buf      []byte
	r, w     int // total bytes read / written; w-r bytes are buffered
	wclosed  bool
	rclosed  bool
	readable chan struct{}
	writable chan struct{}
	done     chan struct{}
	doneOnce sync.Once
}

func newRing(n int) *ring {
	return &ring{
		buf:      make([]byte, n),
		readable: make(chan struct{}, 1),
		writable: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

func (q *ring) cap() int { return len(q.buf) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// close marks the ring closed by its writer (writer=true) or its reader.
func (q *ring) close(writer bool) {
	q.mu.Lock()
	if writer {
		q.wclosed = true
	} else {
		q.rclosed = true
	}
	q.mu.Unlock()
	q.doneOnce.Do(func() { close(q.done) })
}

func (q *ring) write(ctx context.Context, p []byte) error {
	for len(p) > 0 {
		q.mu.Lock()
		if q.wclosed {
			q.mu.Unlock()
			return transport.ErrClosed
		}
		if q.rclosed {
			q.mu.Unlock()
			return fmt.Errorf("mem: send: %w", transport.ErrPeerClosed)
		}
		free := len(q.buf) - (q.w - q.r)
		if free > 0 {
			n := min(free, len(p))
			off := q.w % len(q.buf)
			k := memcopy.Copy(q.buf[off:], p[:n])
			memcopy.Copy(q.buf, p[k:n])
			q.w += n
			p = p[n:]
			q.mu.Unlock()
			signal(q.readable)
			continue
		}
		q.mu.Unlock()
		if err := q.wait(ctx, q.writable); err != nil {
			return err
		}
	}
	return nil
}

func (q *ring) read(ctx context.Context, p []byte) error {
	for len(p) > 0 {
		q.mu.Lock()
		if q.rclosed {
			q.mu.Unlock()
			return transport.ErrClosed
		}
		avail := q.w - q.r
		if avail > 0 {
			n := min(avail, len(p))
			off := q.r % len(q.buf)
			k := memcopy.Copy(p[:n], q.buf[off:])
			memcopy.Copy(p[k:n], q.buf)
			q.r += n
			p = p[n:]
			q.mu.Unlock()
			signal(q.writable)
			continue
		}
		if q.wclosed {
			q.mu.Unlock()
			return fmt.Errorf("mem: recv: %w", transport.ErrPeerClosed)
		}
		q.mu.Unlock()
		if err := q.wait(ctx, q.readable); err != nil {
			return err
		}
	}
	return nil
}

// wait blocks until ch is signalled, the ring is closed or ctx ends. After
// a close it returns nil so the caller re-checks the state and reports the
// right error.
func (q *ring) wait(ctx context.Context, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
