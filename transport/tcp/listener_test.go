package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/occl/occl/internal/nettest"
)

// TestCloseDoesNotWaitForSilentClient: a client that connects and sends
// nothing holds a handshake until HandshakeTimeout; Close must close that
// socket instead of waiting for it.
func TestCloseDoesNotWaitForSilentClient(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	waitInflight(t, ln, 1)
	start := time.Now()
	done := make(chan struct{})
	go func() { ln.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(HandshakeTimeout / 2):
		t.Fatalf("Close still waiting for a silent client after %v (handshake timeout %v)", time.Since(start), HandshakeTimeout)
	}
	// The silent client's socket was closed by the listener.
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatalf("silent client read %d bytes from a closed listener", n)
	}
}

// TestHandshakesBounded: no more than MaxHandshakes sockets are in their
// handshake at once; the rest wait, and an authenticated client still gets
// through once the silent ones time out.
func TestHandshakesBounded(t *testing.T) {
	defer func(n int, d time.Duration) { MaxHandshakes, HandshakeTimeout = n, d }(MaxHandshakes, HandshakeTimeout)
	MaxHandshakes, HandshakeTimeout = 3, time.Second
	ln, err := Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range 8 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitInflight(t, ln, 3)
	for range 20 {
		if n := inflight(ln); n > 3 {
			t.Fatalf("%d handshakes at once, limit 3", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		if c, err := Dial(ctx, ln.Addr().String(), testSecret, Hello{Purpose: PurposeData, NStreams: 1}); err == nil {
			c.Close()
		}
	}()
	a, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("authenticated client behind silent ones: %v", err)
	}
	a.Conn.Close()
}

func inflight(l *Listener) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.inflight)
}

func waitInflight(t *testing.T, l *Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for inflight(l) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d handshakes running, want %d", inflight(l), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A recovery connection that reaches a rank while it connects its data
// links is neither taken for a data link nor dropped: Connect sets it aside
// for the recovery's AcceptFor.
func TestConnectKeepsRecoveryConnections(t *testing.T) {
	const comm = 0xc0ffee
	ln, ctx := testListener(t)
	rec, err := Dial(ctx, ln.Addr().String(), testSecret, Hello{Purpose: PurposeRecovery, Comm: comm, From: 0, To: 1, NStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if _, err := rec.Write([]byte("proposal")); err != nil {
		t.Fatal(err)
	}
	other, err := Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	done := make(chan error, 1)
	go func() {
		conns, err := Connect(ctx, MeshConfig{Self: 0, Comm: comm, Secret: testSecret, Streams: 1, Listener: other},
			[]Endpoint{{Rank: 1, Addr: ln.Addr().String()}})
		for _, c := range conns {
			c.Close()
		}
		done <- err
	}()
	conns, err := Connect(ctx, MeshConfig{Self: 1, Comm: comm, Secret: testSecret, Streams: 1, Listener: ln},
		[]Endpoint{{Rank: 0, Addr: other.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		c.Close()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a, err := ln.AcceptFor(ctx, func(h Hello) bool { return h.Purpose == PurposeRecovery }, nil)
	if err != nil {
		t.Fatalf("recovery connection lost: %v", err)
	}
	defer a.Conn.Close()
	buf := make([]byte, 8)
	if _, err := io.ReadFull(a.Conn, buf); err != nil || string(buf) != "proposal" || a.Hello.From != 0 {
		t.Fatalf("recovery connection: %q from %d, %v", buf, a.Hello.From, err)
	}
}

// DialOnce does not wait for a listener to appear: a dial to a port where
// nothing listens fails with the refusal, long before its context ends.
func TestDialOnceDoesNotRetry(t *testing.T) {
	addr := nettest.RefusedAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err := DialOnce(ctx, addr, testSecret, Hello{Purpose: PurposeRecovery, From: 1, NStreams: 1})
	if !errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil {
		t.Fatalf("DialOnce to a closed port: %v (context: %v)", err, ctx.Err())
	}
}

// A probe completes its handshake (so the dialler knows the listener's
// process is alive and holds the secret) but never reaches Accept, so
// probes do not pile up in a listener nobody accepts from.
func TestProbeNotHandedOut(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", testSecret, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		tc, err := DialOnce(ctx, ln.Addr().String(), testSecret, Hello{Purpose: PurposeProbe, From: 1, NStreams: 1})
		if err != nil {
			t.Fatalf("probe: %v", err)
		}
		tc.Close()
	}
	if _, err := DialOnce(ctx, ln.Addr().String(), []byte("fedcba9876543210"), Hello{Purpose: PurposeProbe, From: 1, NStreams: 1}); !errors.Is(err, ErrAuth) {
		t.Fatalf("probe with a wrong secret: %v", err)
	}
	go DialOnce(ctx, ln.Addr().String(), testSecret, Hello{Purpose: PurposeData, From: 9, NStreams: 1})
	a, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Conn.Close()
	if a.Hello.Purpose != PurposeData || a.Hello.From != 9 {
		t.Fatalf("accepted %+v, want the data connection after the probes", a.Hello)
	}
}

// A handshake with a listener that never answers (its process is
// stopped: the kernel accepts, nobody reads) ends when the dial's context
// is cancelled, not at the context's deadline.
func TestDialOnceHandshakeEndsWithContext(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	connected := make(chan struct{})
	go func() {
		defer close(connected)
		c, err := silent.Accept()
		if err != nil {
			cancel()
			return
		}
		defer c.Close()
		// The hello arrived: the dialler waits in its handshake.
		io.ReadFull(c, make([]byte, helloSize))
		cancel()
		io.Copy(io.Discard, c)
	}()
	_, err = DialOnce(ctx, silent.Addr().String(), testSecret, Hello{Purpose: PurposeProbe, From: 1, NStreams: 1})
	<-connected
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("DialOnce to a listener that does not answer, cancelled in its handshake: %v, want context.Canceled", err)
	}
}

// TestDialWithoutDeadlineEnds: a dial whose context has no deadline, to a
// listener whose backlog is full (the kernel drops the SYNs, as for a host
// that is gone), ends after HandshakeTimeout instead of after the kernel's
// SYN retries.
func TestDialWithoutDeadlineEnds(t *testing.T) {
	defer func(d time.Duration) { HandshakeTimeout = d }(HandshakeTimeout)
	HandshakeTimeout = 300 * time.Millisecond
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	// Fill the backlog: connect until a connect times out.
	full := false
	for range 16 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("filling the backlog: %v", err)
			}
			full = true
			break
		}
		defer c.Close()
	}
	if !full {
		t.Fatal("the listener's backlog never filled")
	}
	done := make(chan error, 1)
	go func() {
		tc, err := Dial(context.Background(), addr, testSecret, Hello{})
		if tc != nil {
			tc.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Dial to a full backlog: %v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Dial without a deadline still connecting after 10s (HandshakeTimeout 300ms)")
	}
}
