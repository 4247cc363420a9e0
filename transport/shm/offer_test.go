package shm_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/shm"
)

// offerPair connects a pair that offers payloads of 32 KiB or more and
// lends (Lend) from 1 MiB, closed when the test ends, and a context for
// the test's calls.
func offerPair(t *testing.T, edit func(*shm.Config)) (*shm.Conn, *shm.Conn, context.Context) {
	t.Helper()
	a, b := pairWith(t, func(c *shm.Config) {
		c.SendByDescriptor, c.CMAThreshold, c.OfferThreshold = false, 1<<20, 32<<10
		if edit != nil {
			edit(c)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(func() {
		cancel()
		a.Close()
		b.Close()
	})
	return a, b, ctx
}

func offerHeader(i int) transport.Header {
	return transport.Header{Kind: transport.KindP2P, Comm: 9, Seq: uint64(i), Step: 2}
}

// recvAsync receives a frame of n bytes on another goroutine.
func recvAsync(ctx context.Context, c *shm.Conn, i, n int) (<-chan error, []byte) {
	buf := make([]byte, n)
	done := make(chan error, 1)
	go func() { done <- c.Recv(ctx, offerHeader(i), buf) }()
	return done, buf
}

// TestOfferTaken: a receiver that receives while the payload is offered
// copies it out of the sender's memory, before the sender settles; the
// sender's Settle then returns, and nothing of the payload is left in the
// ring: the next frame is received as the next frame.
func TestOfferTaken(t *testing.T) {
	a, b, ctx := offerPair(t, nil)
	for i, n := range []int{32 << 10, 200<<10 + 5, a.EagerLimit()} {
		payload := make([]byte, n)
		fillSeq(payload, 11, i)
		if !a.Offers(n) {
			t.Fatalf("Offers(%d) = false on an idle connection", n)
		}
		if err := a.Offer(ctx, offerHeader(i), payload); err != nil {
			t.Fatalf("offer of %d bytes: %v", n, err)
		}
		// The sender neither settles nor sends until the receiver has
		// the payload: it can only have copied it from the sender.
		done, got := recvAsync(ctx, b, i, n)
		if err := <-done; err != nil {
			t.Fatalf("recv of an offered %d bytes: %v", n, err)
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("offered %d bytes: payload differs", n)
		}
		if err := a.Settle(ctx); err != nil {
			t.Fatalf("Settle after the receiver copied: %v", err)
		}
	}
	exchangeSizes(t, a, b, []int{8, 64 << 10})
}

// TestOfferTakenBack: a Settle with nobody receiving returns at once,
// having taken the payload back into the ring: the receiver, later, gets
// the payload as it was, although the sender has overwritten its buffer
// since. A Send or Lend after an offer takes it back first, so that frames
// arrive in order.
func TestOfferTakenBack(t *testing.T) {
	a, b, ctx := offerPair(t, nil)
	frames := []struct {
		n    int
		next string // what follows the offer: "settle", "send" or "lend"
	}{{48 << 10, "settle"}, {64 << 10, "send"}, {a.EagerLimit(), "settle"}, {100<<10 + 1, "lend"}}
	var want [][]byte
	i := 0
	for _, f := range frames {
		payload := make([]byte, f.n)
		fillSeq(payload, 12, i)
		if err := a.Offer(ctx, offerHeader(i), payload); err != nil {
			t.Fatalf("offer %d: %v", i, err)
		}
		want = append(want, append([]byte(nil), payload...))
		i++
		var err error
		switch f.next {
		case "settle":
			err = a.Settle(ctx)
		case "send":
			next := make([]byte, 100)
			fillSeq(next, 12, i)
			want = append(want, next)
			err = a.Send(ctx, offerHeader(i), next)
			i++
		case "lend":
			next := make([]byte, 1<<20)
			fillSeq(next, 12, i)
			want = append(want, next)
			if err = a.Lend(ctx, offerHeader(i), next); err == nil {
				i++
				// Settle waits for the lent payload: receive
				// everything meanwhile.
				defer func() {
					if err := a.Settle(ctx); err != nil {
						t.Errorf("Settle of the lent payload: %v", err)
					}
				}()
			}
		}
		if err != nil {
			t.Fatalf("%s after offer %d: %v", f.next, i-1, err)
		}
		if f.next == "settle" && !a.Offers(f.n) {
			t.Fatalf("Offers(%d) = false once the offer before was taken back", f.n)
		}
		// The sender may reuse its buffer now.
		clear(payload)
	}
	for j, w := range want {
		got := make([]byte, len(w))
		if err := b.Recv(ctx, offerHeader(j), got); err != nil {
			t.Fatalf("recv %d (%d bytes): %v", j, len(w), err)
		}
		if !bytes.Equal(got, w) {
			t.Fatalf("frame %d (%d bytes): payload differs", j, len(w))
		}
	}
}

// TestOfferSettleWaitsForCopy: a receiver that has claimed an offered
// payload and is still copying it keeps it lent: Settle waits for the
// copy instead of taking the payload back, and the receiver gets it whole.
func TestOfferSettleWaitsForCopy(t *testing.T) {
	const n = shm.PieceSize + 64<<10 // two pieces
	a, b, ctx := offerPair(t, func(c *shm.Config) { c.Capacity = 4 * shm.PieceSize })
	between, resume := make(chan struct{}), make(chan struct{})
	shm.SetPieceHook(b, func(int) {
		close(between)
		<-resume
	})
	payload := make([]byte, n)
	fillSeq(payload, 13, 0)
	if err := a.Offer(ctx, offerHeader(0), payload); err != nil {
		t.Fatal(err)
	}
	done, got := recvAsync(ctx, b, 0, n)
	<-between
	settled := make(chan error, 1)
	go func() { settled <- a.Settle(ctx) }()
	select {
	case err := <-settled:
		t.Fatalf("Settle returned (%v) while the receiver was copying", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("recv: %v", err)
	}
	if err := <-settled; err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("payload differs")
	}
	// Nothing of the payload went into the ring.
	exchangeSizes(t, a, b, []int{8, 40 << 10})
}

// TestOffers: a connection offers payloads from its threshold on, one at
// a time, not while a lent payload is unsettled, only where the ring has
// room for the payload too, and not at all without a threshold, without
// cross-memory attach or once closed. The receiver knows its peer's
// offers: it takes an offered payload below the peer's smallest loan.
func TestOffers(t *testing.T) {
	a, b, ctx := offerPair(t, func(c *shm.Config) { c.Capacity = 256 << 10 })
	if got := a.OfferMin(); got != 32<<10 {
		t.Fatalf("OfferMin() = %d, want %d", got, 32<<10)
	}
	if a.Offers(32<<10 - 1) {
		t.Fatal("Offers below the threshold")
	}
	if err := a.Offer(ctx, offerHeader(0), make([]byte, 32<<10-1)); err == nil {
		t.Fatal("Offer below the threshold succeeded")
	}
	// A 256 KiB ring holds the frame of an offer (two lines) and its
	// payload up to 256 KiB less two lines.
	if !a.Offers(256<<10 - 128) {
		t.Fatal("Offers(256 KiB - 128) = false with a 256 KiB ring free")
	}
	if a.Offers(256<<10 - 64) {
		t.Fatal("Offers(256 KiB - 64) = true: the ring cannot take the payload back")
	}
	if err := a.Offer(ctx, offerHeader(0), make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	if a.Offers(32 << 10) {
		t.Fatal("a second offer before the first settled")
	}
	// The ring keeps the room of the offer's payload: a Send that would
	// need it is not buffered.
	if a.Buffers(160 << 10) {
		t.Fatal("Buffers(160 KiB) = true: it does not count the room the offer of 100 KiB keeps")
	}
	if !a.Buffers(64 << 10) {
		t.Fatal("Buffers(64 KiB) = false with room left")
	}
	if err := a.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Recv(ctx, offerHeader(0), make([]byte, 100<<10)); err != nil {
		t.Fatalf("recv of the offer taken back: %v", err)
	}
	if !a.Buffers(160 << 10) {
		t.Fatal("Buffers(160 KiB) = false once the offer taken back was received")
	}
	c, d := pairWith(t, func(c *shm.Config) { c.OfferThreshold = 32 << 10; c.NoCMA = true })
	defer c.Close()
	defer d.Close()
	if c.Offers(64 << 10) {
		t.Fatal("a connection without cross-memory attach offers")
	}
	e, f := pairWith(t, func(c *shm.Config) { c.CMAThreshold = 64 << 10 })
	defer e.Close()
	defer f.Close()
	if e.Offers(64 << 10) {
		t.Fatal("a connection without an offer threshold offers")
	}
	a.Close()
	if a.Offers(64 << 10) {
		t.Fatal("a closed connection offers")
	}
}

// TestClaimCorrupt: a claim word that the receiver did not write and that
// does not say taken back, at or past the ticket of the transfer it
// receives, is reported as a malformed frame; nothing is copied.
func TestClaimCorrupt(t *testing.T) {
	a, b, ctx := offerPair(t, nil)
	if err := a.Offer(ctx, offerHeader(0), make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	shm.StoreClaim(b, 1)
	got := bytes.Repeat([]byte{7}, 64<<10)
	var fe *transport.FrameError
	if err := b.Recv(ctx, offerHeader(0), got); !errors.As(err, &fe) {
		t.Fatalf("Recv with the claim word at the transfer's ticket = %v, want a FrameError", err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{7}, 64<<10)) {
		t.Fatal("Recv wrote into the buffer")
	}
}

// TestOfferClosed: an offer outstanding when its connection closes ends
// with it: Settle reports the closed connection, and the connection
// neither buffers nor offers afterwards.
func TestOfferClosed(t *testing.T) {
	a, _, ctx := offerPair(t, nil)
	if err := a.Offer(ctx, offerHeader(0), make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := a.Settle(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Settle after Close = %v, want ErrClosed", err)
	}
	if a.Buffers(8) || a.LendBuffers() || a.Offers(64<<10) {
		t.Fatal("a closed connection with a settled offer reports room")
	}
	if err := a.Send(ctx, offerHeader(1), make([]byte, 8)); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
}
