package tcp

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/occl/occl/transport"
)

// rawPairN returns a Conn of n streams and the raw sockets at their other
// ends, so a test can make each stream of a hostile peer misbehave on its
// own.
func rawPairN(t testing.TB, n int, o Options) (*Conn, []net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var socks []*net.TCPConn
	var raws []net.Conn
	for range n {
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		socks = append(socks, s.(*net.TCPConn))
		raws = append(raws, raw)
	}
	c, err := NewConn(socks, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, raws
}

// TestStripedRecvFailsFastOnBadFrame: a peer that sends a malformed frame
// on one stream of a striped message and nothing on the others must get
// Recv a clear error at once (the connection is unusable from then on),
// not leave it waiting for the silent streams until the context ends, or
// forever without a deadline. Checked with the bad frame on the first
// stream (read by the caller) and on the second (read by its worker).
func TestStripedRecvFailsFastOnBadFrame(t *testing.T) {
	for bad := range 2 {
		c, raws := rawPairN(t, 2, Options{StripeMin: 64 << 10, SpinReads: -1})
		junk := make([]byte, transport.HeaderSize)
		copy(junk, "not a frame header")
		if _, err := raws[bad].Write(junk); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		err := c.Recv(ctx, transport.Header{Kind: transport.KindCollective, Comm: 1}, make([]byte, 256<<10))
		cancel()
		var fe *transport.FrameError
		if !errors.As(err, &fe) {
			t.Fatalf("bad frame on stream %d: Recv returned %v after %v, want a *transport.FrameError", bad, err, time.Since(start))
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("bad frame on stream %d: Recv took %v to report %v", bad, d, err)
		}
	}
}

// TestStripedSendFailsFastOnReset: a peer that resets one stream of a
// striped message and stops reading the others must get Send an error
// naming the reset at once, not leave it waiting for the full socket
// buffers of the other streams until the context ends.
func TestStripedSendFailsFastOnReset(t *testing.T) {
	c, raws := rawPairN(t, 2, Options{StripeMin: 64 << 10, SpinReads: -1, SocketBuffer: 64 << 10})
	raws[0].(*net.TCPConn).SetLinger(0)
	raws[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := c.Send(ctx, transport.Header{Kind: transport.KindCollective, Comm: 1}, make([]byte, 32<<20))
	if !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Send returned %v after %v, want transport.ErrPeerClosed", err, time.Since(start))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Send took %v to report %v", d, err)
	}
}

// TestStripedCloseWaitsForHandedStripes closes a Conn of three streams
// while a striped Send or Recv is handing its stripes to the streams'
// workers (after stripe 1, before stripe 2): the call must return
// ErrClosed only once stripe 1's worker is done with the caller's buffer,
// so that worker has no result left over for nobody.
func TestStripedCloseWaitsForHandedStripes(t *testing.T) {
	for _, recv := range []bool{false, true} {
		name := "send"
		if recv {
			name = "recv"
		}
		t.Run(name, func(t *testing.T) {
			c, _ := rawPairN(t, 3, Options{StripeMin: 1})
			c.handHook = func(stripe int) {
				if stripe == 2 {
					c.Close()
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// A send larger than the sockets' buffers, so stripe 1's
			// worker is still writing when the Conn closes.
			buf := make([]byte, 3<<24)
			var err error
			if recv {
				err = c.Recv(ctx, transport.Header{Kind: transport.KindP2P}, buf)
			} else {
				err = c.Send(ctx, transport.Header{Kind: transport.KindP2P}, buf)
			}
			if !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("%s while closing: %v, want ErrClosed", name, err)
			}
			time.Sleep(50 * time.Millisecond) // a worker still busy would finish now
			for i, s := range c.streams {
				if n := len(s.sendDone) + len(s.recvDone); n != 0 {
					t.Errorf("stream %d: %d results left over: the call returned before its worker was done", i, n)
				}
			}
		})
	}
}
