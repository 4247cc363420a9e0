package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/occl/occl/transport"
)

// HandshakeTimeout bounds how long an incoming connection may take to
// authenticate before the listener drops it, and, where the caller's
// context has no deadline, how long a dial may take to connect and again
// how long it may take to authenticate: a connect to an address that drops its packets (a host
// gone, a full backlog) ends then, not after the kernel's SYN retries.
var HandshakeTimeout = 10 * time.Second

// MaxHandshakes bounds the handshakes a listener runs at once. Further
// sockets wait in the kernel's backlog until a handshake ends (it ends at
// the latest after HandshakeTimeout).
var MaxHandshakes = 64

// Listener accepts authenticated connections. Each incoming socket is
// authenticated on its own goroutine, so a slow or hostile client cannot
// hold up the others; at most MaxHandshakes run at once. Only sockets that
// pass the handshake and the accept filter are handed to Accept. Close
// closes the sockets still in their handshake, so an unauthenticated client
// cannot delay it.
type Listener struct {
	ln     *net.TCPListener
	secret []byte
	filter func(Hello) error
	ready  chan Accepted
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	log    *slog.Logger

	slots chan struct{} // one token per running handshake

	mu       sync.Mutex
	stash    []Accepted                // set aside by AcceptFor for a later call
	inflight map[*net.TCPConn]struct{} // sockets in their handshake
	closed   bool
}

// maxStash bounds the connections AcceptFor sets aside; the oldest go
// first.
const maxStash = 256

// Accepted is an authenticated incoming connection and what its dialler
// said about itself.
type Accepted struct {
	Conn  *net.TCPConn
	Hello Hello
}

// Listen listens on addr ("host:port"; port 0 picks a free one). Incoming
// connections must prove they hold secret; filter, if not nil, may refuse a
// hello (wrong communicator, purpose or rank) with an error.
func Listen(addr string, secret []byte, filter func(Hello) error, log *slog.Logger) (*Listener, error) {
	la, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen %s: %w", addr, err)
	}
	ln, err := net.ListenTCP("tcp", la)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen %s: %w", addr, err)
	}
	if rc, err := ln.SyscallConn(); err == nil {
		presetCongestion(rc)
	}
	if filter == nil {
		filter = func(Hello) error { return nil }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Listener{
		ln:       ln,
		secret:   secret,
		filter:   filter,
		ready:    make(chan Accepted, 64),
		done:     make(chan struct{}),
		log:      log,
		slots:    make(chan struct{}, max(MaxHandshakes, 1)),
		inflight: map[*net.TCPConn]struct{}{},
	}
	l.wg.Add(1)
	go l.loop()
	return l, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() *net.TCPAddr { return l.ln.Addr().(*net.TCPAddr) }

func (l *Listener) loop() {
	defer l.wg.Done()
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.log.Warn("occl: accept failed", "addr", l.ln.Addr().String(), "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			c.Close()
			return
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			<-l.slots
			return
		}
		l.inflight[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go l.handshake(c)
	}
}

func (l *Listener) handshake(c *net.TCPConn) {
	defer l.wg.Done()
	c.SetDeadline(time.Now().Add(HandshakeTimeout))
	h, err := serverHandshake(c, l.secret, l.filter)
	l.mu.Lock()
	delete(l.inflight, c)
	closed := l.closed
	l.mu.Unlock()
	<-l.slots
	if closed {
		c.Close()
		return
	}
	if err != nil {
		l.log.Warn("occl: refused connection", "from", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	if h.Purpose == PurposeProbe {
		// Answered by the handshake itself.
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	select {
	case l.ready <- Accepted{Conn: c, Hello: h}:
	case <-l.done:
		c.Close()
	}
}

// Accept returns the next authenticated connection.
func (l *Listener) Accept(ctx context.Context) (Accepted, error) {
	select {
	case a := <-l.ready:
		return a, nil
	case <-l.done:
		return Accepted{}, transport.ErrClosed
	case <-ctx.Done():
		return Accepted{}, ctx.Err()
	}
}

// AcceptFor returns the next authenticated connection whose hello want
// accepts, first among those set aside by earlier calls. A connection want
// refuses is set aside for a later call if keep accepts it (a connection
// for a later epoch of the same communicator, which arrived early), and
// closed otherwise.
func (l *Listener) AcceptFor(ctx context.Context, want, keep func(Hello) bool) (Accepted, error) {
	l.mu.Lock()
	for i, a := range l.stash {
		if want(a.Hello) {
			l.stash = append(l.stash[:i], l.stash[i+1:]...)
			l.mu.Unlock()
			return a, nil
		}
	}
	l.mu.Unlock()
	for {
		a, err := l.Accept(ctx)
		if err != nil {
			return a, err
		}
		if want(a.Hello) {
			return a, nil
		}
		if keep == nil || !keep(a.Hello) {
			h := a.Hello
			l.log.Warn("occl: dropping unexpected connection", "from_rank", h.From, "comm", h.Comm, "epoch", h.Epoch)
			a.Conn.Close()
			continue
		}
		l.mu.Lock()
		if l.closed {
			// Close has emptied the stash already: nothing would
			// hand this connection out or close it.
			l.mu.Unlock()
			a.Conn.Close()
			return Accepted{}, transport.ErrClosed
		}
		if len(l.stash) >= maxStash {
			l.stash[0].Conn.Close()
			l.stash = l.stash[1:]
		}
		l.stash = append(l.stash, a)
		l.mu.Unlock()
	}
}

// Close stops listening and drops connections that were not accepted yet,
// including those still in their handshake. It does not wait for clients.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
		l.mu.Lock()
		l.closed = true
		for c := range l.inflight {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
		l.mu.Lock()
		for _, a := range l.stash {
			a.Conn.Close()
		}
		l.stash = nil
		l.mu.Unlock()
		for {
			select {
			case a := <-l.ready:
				a.Conn.Close()
			default:
				return
			}
		}
	})
	return err
}

// Dial connects to addr and authenticates with secret, presenting h. It
// retries while the listener is not up yet (connection refused) until ctx
// ends, so ranks may start in any order. Each attempt ends at ctx's
// deadline, or after HandshakeTimeout if ctx has none; an attempt that
// times out is not retried.
func Dial(ctx context.Context, addr string, secret []byte, h Hello) (*net.TCPConn, error) {
	backoff := 5 * time.Millisecond
	for {
		tc, connected, err := dial(ctx, addr, secret, h)
		if err == nil || connected {
			return tc, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("tcp: dial %s: %w (last error: %v)", addr, ctx.Err(), err)
		}
		if !retryable(err) {
			return nil, fmt.Errorf("tcp: dial %s: %w", addr, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("tcp: dial %s: %w (last error: %v)", addr, ctx.Err(), err)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// DialOnce is Dial without the retries: it fails at once if nothing
// listens at addr (a rank that is gone), and if the listener does not
// complete the handshake before ctx ends (a rank that is stopped).
func DialOnce(ctx context.Context, addr string, secret []byte, h Hello) (*net.TCPConn, error) {
	tc, connected, err := dial(ctx, addr, secret, h)
	if err != nil && !connected {
		return nil, fmt.Errorf("tcp: dial %s: %w", addr, err)
	}
	return tc, err
}

// dial makes one attempt; connected says whether the TCP connection was
// made (so a failure is the handshake's).
func dial(ctx context.Context, addr string, secret []byte, h Hello) (*net.TCPConn, bool, error) {
	d := net.Dialer{Control: dialControl}
	if _, ok := ctx.Deadline(); !ok {
		d.Timeout = HandshakeTimeout
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	tc := c.(*net.TCPConn)
	if dl, ok := ctx.Deadline(); ok {
		tc.SetDeadline(dl)
	} else {
		tc.SetDeadline(time.Now().Add(HandshakeTimeout))
	}
	// The handshake ends when ctx does, not only at its deadline.
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Now()) })
	err = clientHandshake(tc, secret, h)
	if !stop() {
		if err == nil {
			err = ctx.Err()
		} else {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
	}
	if err != nil {
		tc.Close()
		return nil, true, fmt.Errorf("tcp: handshake with %s: %w", addr, err)
	}
	tc.SetDeadline(time.Time{})
	return tc, true, nil
}
