package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/occl/occl/transport"
)

// connPair joins two anonymous rings of capacity bytes into the two ends
// of a connection in this process, and gives the test a context that
// ends with it (30 s at most).
func connPair(t *testing.T, capacity uint64) (a, b *Conn, ctx context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	ab, ba := anonRing(t, capacity), anonRing(t, capacity)
	ab.reset(0, 0)
	ba.reset(0, 0)
	a = newConn(ab, ba, 1, nil, transport.Header{}, cmaSetup{})
	b = newConn(ba, ab, 0, nil, transport.Header{}, cmaSetup{})
	a.local, b.local = true, true
	return a, b, ctx
}

// exchange sends buf from a and receives it on b.
func exchange(t *testing.T, ctx context.Context, a, b *Conn, buf []byte) {
	t.Helper()
	if err := a.Send(ctx, fuzzWant, buf); err != nil {
		t.Fatal(err)
	}
	if err := b.Recv(ctx, fuzzWant, buf); err != nil {
		t.Fatal(err)
	}
}

// A small frame behind an armed one is found by its seal alone: the
// receiver takes it even though the tail that covers it is never
// published.
func TestSealedFrameWithoutTail(t *testing.T) {
	a, b, ctx := connPair(t, MinCapacity)
	send := []byte("sealed!!")
	buf := make([]byte, len(send))
	// The first frame is found by the tail and arms the second.
	exchange(t, ctx, a, b, buf)
	if !b.armed {
		t.Fatal("a small frame into a ring with room to clear ahead did not arm the next")
	}
	published := b.in.tail.Load()
	if err := a.Send(ctx, fuzzWant, send); err != nil {
		t.Fatal(err)
	}
	b.in.tail.Store(published) // as if the producer had not stored it yet
	clear(buf)
	if err := b.Recv(ctx, fuzzWant, buf); err != nil {
		t.Fatalf("Recv of a sealed frame whose tail is not published: %v", err)
	}
	if string(buf) != string(send) {
		t.Fatalf("got %q, want %q", buf, send)
	}
	// The tail catches up later; the receiver takes it as no news.
	b.in.tail.Store(a.tail)
	if err := a.Send(ctx, fuzzWant, send); err != nil {
		t.Fatal(err)
	}
	if err := b.Recv(ctx, fuzzWant, buf); err != nil {
		t.Fatalf("Recv after the tail caught up: %v", err)
	}
}

// A frame whose header is there but whose seal is not, on an armed
// receiver, is not taken: the receiver waits for the seal or the tail.
func TestUnsealedFrameWaits(t *testing.T) {
	a, b, ctx := connPair(t, MinCapacity)
	buf := make([]byte, 8)
	exchange(t, ctx, a, b, buf)
	// The next frame, written but for its seal and tail.
	h := fuzzWant
	h.Len = 8
	h.Encode(a.out.data[a.tail&a.out.mask:])
	short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	defer stop()
	if err := b.Recv(short, fuzzWant, buf); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv of a frame without seal or tail = %v, want DeadlineExceeded", err)
	}
}

// A seal that is neither clear nor the frame's own is a corrupt ring.
func TestWrongSeal(t *testing.T) {
	a, b, ctx := connPair(t, MinCapacity)
	buf := make([]byte, 8)
	for range 2 {
		if err := a.Send(ctx, fuzzWant, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Recv(ctx, fuzzWant, buf); err != nil {
		t.Fatal(err)
	}
	off := b.head & b.in.mask
	b.in.seal(off, sealOf(b.head+frameAlign))
	var fe *transport.FrameError
	if err := b.Recv(ctx, fuzzWant, buf); !errors.As(err, &fe) {
		t.Fatalf("Recv with another frame's seal = %v, want FrameError", err)
	}
}

// Small frames of random sizes lap a minimal ring many times, with the
// receiver polling lines that earlier laps filled with payload words equal
// to the seal the next lap's frame there will have: every frame arrives
// whole and in order, and many are found by their seal.
func TestSealedFramesLapTheRing(t *testing.T) {
	a, b, ctx := connPair(t, MinCapacity)
	const frames = 20000
	size := func(r *rand.Rand) int { return r.IntN(300) }
	// fill makes the payload of frame i that starts at stream position
	// start: a byte pattern, with a seal one lap ahead in every word
	// that lands where a line's seal word is.
	fill := func(buf []byte, i int, start uint64) {
		for j := range buf {
			buf[j] = byte(i + j)
		}
		for j := range buf {
			pos := start + transport.HeaderSize + uint64(j)
			if pos%frameAlign == sealOff && j+4 <= len(buf) {
				binary.LittleEndian.PutUint32(buf[j:], sealOf(pos-sealOff+MinCapacity))
			}
		}
	}
	done := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(1, 2))
		buf := make([]byte, 300)
		for i := range frames {
			n := size(r)
			fill(buf[:n], i, a.tail)
			h := fuzzWant
			h.Seq = uint64(i)
			if err := a.Send(ctx, h, buf[:n]); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 300)
	want := make([]byte, 300)
	sealed := 0
	for i := range frames {
		n := size(r)
		h := fuzzWant
		h.Seq = uint64(i)
		fill(want[:n], i, b.head)
		if ok, _ := b.sealed(); ok {
			sealed++
		}
		if err := b.Recv(ctx, h, buf[:n]); err != nil {
			t.Fatalf("frame %d (%d bytes): %v", i, n, err)
		}
		if string(buf[:n]) != string(want[:n]) {
			t.Fatalf("frame %d (%d bytes) differs", i, n)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sealed == 0 {
		t.Fatal("no frame was found by its seal")
	}
	t.Logf("%d of %d frames found by their seal before Recv", sealed, frames)
}
