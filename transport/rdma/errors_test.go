package rdma

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/rdma/verbs"
)

// recvErr starts a Recv on c and returns its result channel.
func recvErr(ctx context.Context, c *Conn, n int) chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.Recv(ctx, hdr(1, 0), make([]byte, n)) }()
	return ch
}

func wantPeerClosed(t *testing.T, what string, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		if !errors.Is(err, transport.ErrPeerClosed) {
			t.Fatalf("%s: %v, want an error wrapping ErrPeerClosed", what, err)
		}
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still blocked 5s after the failure", what)
	}
	return nil
}

// A queue pair error (the link of one side drops, so both queue pairs go
// to ERROR) fails pending calls on both sides with ErrPeerClosed, as a
// reset TCP connection does.
func TestQPErrorBothSides(t *testing.T) {
	a, b, ea, _ := pairDevs(t, pairOpts{})
	ctx := ctxT(t, 10*time.Second)
	// Exercise the connection first.
	go a.Send(ctx, hdr(0, 0), []byte("x"))
	if err := b.Recv(ctx, hdr(0, 0), make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	ra, rb := recvErr(ctx, a, 4), recvErr(ctx, b, 4)
	time.Sleep(20 * time.Millisecond)
	if err := ea.DropLink(a.Info().QPN); err != nil {
		t.Fatal(err)
	}
	t.Log("a:", wantPeerClosed(t, "Recv on the side whose link dropped", ra))
	t.Log("b:", wantPeerClosed(t, "Recv on the other side", rb))
	if err := a.Send(ctx, hdr(2, 0), []byte("y")); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Send after the failure: %v", err)
	}
}

// A write with a bad remote key is a remote access error: the sender's
// rendezvous fails, and so does the receiver's Recv.
func TestBadRemoteKey(t *testing.T) {
	a, b, _, eb := pairDevs(t, pairOpts{})
	b.hookCTS = func(c *cts) { c.rkey ^= 0xffff }
	ctx := ctxT(t, 10*time.Second)
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, hdr(1, 0), make([]byte, 1<<20)) }()
	rerr := recvErr(ctx, b, 1<<20)
	t.Log("sender:", wantPeerClosed(t, "Send whose write was refused", sent))
	t.Log("receiver:", wantPeerClosed(t, "Recv of the refused write", rerr))
	if s := eb.Stats(); s.AccessErrors != 1 {
		t.Fatalf("device stats %+v", s)
	}
}

// A removed device fails the calls of its side (the error also wraps
// verbs.ErrDeviceRemoved) and of the peer.
func TestDeviceRemoved(t *testing.T) {
	a, b, ea, _ := pairDevs(t, pairOpts{})
	ctx := ctxT(t, 10*time.Second)
	ra, rb := recvErr(ctx, a, 4), recvErr(ctx, b, 4)
	time.Sleep(20 * time.Millisecond)
	ea.Remove()
	err := wantPeerClosed(t, "Recv on the removed device", ra)
	if !errors.Is(err, verbs.ErrDeviceRemoved) {
		t.Fatalf("error does not say the device was removed: %v", err)
	}
	wantPeerClosed(t, "Recv on the peer", rb)
}

// A receiver that gives up on a rendezvous (its context ends after it
// sent its buffer's key) revokes the key before it returns: the sender's
// late write is refused, never placed in the buffer the caller got back.
func TestRendezvousRecvCancelled(t *testing.T) {
	a, b, _, eb := pairDevs(t, pairOpts{})
	writing, release := make(chan struct{}), make(chan struct{})
	a.hookWrite = func() {
		close(writing)
		<-release
	}
	ctx := ctxT(t, 10*time.Second)
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, hdr(1, 0), pattern(2<<20, 5)) }()
	// The receiver gives up once the sender holds its key and is about to
	// write: a fixed deadline could end before the key was sent.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-writing:
			cancel()
		case <-ctx.Done():
		}
	}()
	buf := make([]byte, 2<<20)
	if err := b.Recv(rctx, hdr(1, 0), buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv = %v, want Canceled", err)
	}
	if s := b.dev.Cache().Stats(); s.Invalidations == 0 {
		t.Fatalf("receive buffer not invalidated: %+v", s)
	}
	close(release)
	wantPeerClosed(t, "the sender's late rendezvous", sent)
	for i, x := range buf {
		if x != 0 {
			t.Fatalf("byte %d of the returned buffer was written after Recv returned", i)
		}
	}
	_ = eb
	// The connection is broken: later calls fail at once.
	if err := b.Recv(ctx, hdr(2, 0), nil); err == nil {
		t.Fatal("Recv on a broken connection succeeded")
	}
}

// A sender cancelled in the middle of a rendezvous gets its payload back
// only once the device no longer reads it.
func TestRendezvousSendCancelled(t *testing.T) {
	a, b := pairWith(t, pairOpts{a: func(c *Config) { c.RendezvousChunk = 64 << 10 }})
	ctx := ctxT(t, 10*time.Second)
	sctx, cancel := context.WithCancel(ctx)
	a.hookWrite = func() { cancel() }
	go b.Recv(ctx, hdr(1, 0), make([]byte, 8<<20))
	err := a.Send(sctx, hdr(1, 0), make([]byte, 8<<20))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Send = %v, want Canceled", err)
	}
	a.mu.Lock()
	out := a.rndvOut
	a.mu.Unlock()
	if out != 0 {
		t.Fatalf("%d rendezvous writes still outstanding after Send returned", out)
	}
}

// Close with calls pending in both directions and a peer that closes
// first.
func TestCloseSemantics(t *testing.T) {
	a, b := pairWith(t, pairOpts{})
	ctx := ctxT(t, 10*time.Second)
	// Data sent before Close is still delivered, then ErrPeerClosed.
	if err := a.Send(ctx, hdr(1, 0), []byte("last words")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	buf := make([]byte, 10)
	if err := b.Recv(ctx, hdr(1, 0), buf); err != nil || string(buf) != "last words" {
		t.Fatalf("frame sent before Close: %v %q", err, buf)
	}
	if err := b.Recv(ctx, hdr(2, 0), buf); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv after the peer closed: %v", err)
	}
	if err := b.Send(ctx, hdr(2, 0), buf); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Send after the peer closed: %v", err)
	}
	if err := a.Send(ctx, hdr(2, 0), buf); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	a.Close() // idempotent
}

// Setup fails on both sides, with ErrUnavailable, when either side cannot
// take part; the bootstrap connection is still usable afterwards.
func TestSetupUnavailable(t *testing.T) {
	cases := map[string]pairOpts{
		"bad-config":         {b: func(c *Config) { c.Slots = 1 }},
		"link-layers-differ": {emuB: &verbs.EmuConfig{LinkLayer: verbs.LinkLayerInfiniBand}},
		"gid-index":          {devCfg: func(d *DeviceConfig) { d.GIDIndex = 7 }},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			if name == "gid-index" {
				ea, _ := emuPair(t, verbs.EmuConfig{}, nil)
				if _, err := OpenDevice(DeviceConfig{Emulated: ea, GIDIndex: 7}); err == nil {
					t.Fatal("GID index 7 accepted on a table of 3")
				}
				return
			}
			ea, eb := emuPair(t, o.emu, o.emuB)
			ca := Config{Comm: 1, Self: 0, Peer: 1, Device: openDev(t, ea, nil)}
			cb := Config{Comm: 1, Self: 1, Peer: 0, Device: openDev(t, eb, nil)}
			if o.b != nil {
				o.b(&cb)
			}
			x, y := memPipe()
			ctx := ctxT(t, 10*time.Second)
			errc := make(chan error, 1)
			go func() {
				_, err := Connect(ctx, y, cb)
				errc <- err
			}()
			_, erra := Connect(ctx, x, ca)
			errb := <-errc
			for _, err := range []error{erra, errb} {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("Connect: %v / %v, want ErrUnavailable on both", erra, errb)
				}
			}
			t.Log(erra, "|", errb)
			go x.Send(ctx, hdr(5, 0), []byte("still here"))
			buf := make([]byte, 10)
			if err := y.Recv(ctx, hdr(5, 0), buf); err != nil || string(buf) != "still here" {
				t.Fatalf("bootstrap connection after a failed setup: %v", err)
			}
			if s := ea.Stats(); s.PacketsOut != 0 {
				t.Fatalf("traffic on a failed connection: %+v", s)
			}
		})
	}
}

// A receiver that has the whole of a rendezvous message may say goodbye and
// close before the sender reaps its writes' completions: the send has
// succeeded all the same.
func TestRendezvousPeerClosesAfterReceiving(t *testing.T) {
	a, b := pairWith(t, pairOpts{})
	ctx := ctxT(t, 20*time.Second)
	closed := make(chan struct{})
	a.hookWritten = func() { <-closed }
	src := pattern(2<<20, 3)
	dst := make([]byte, len(src))
	errc := make(chan error, 1)
	go func() { errc <- a.Send(ctx, hdr(1, 0), src) }()
	if err := b.Recv(ctx, hdr(1, 0), dst); err != nil {
		t.Fatal(err)
	}
	b.Close()
	time.Sleep(50 * time.Millisecond) // the goodbye reaches a's queue
	close(closed)
	if err := <-errc; err != nil {
		t.Fatalf("send of a message the peer received: %v", err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("payload corrupted")
	}
	if st := a.Stats(); st.RendezvousFrames != 1 {
		t.Fatalf("stats %+v: want a rendezvous", st)
	}
}
