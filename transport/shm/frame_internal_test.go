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

// A frame the general path writes where the receiver is armed is marked
// in its seal word: the receiver, which polls that word and not the tail,
// turns to the tail at its first look, and takes the frame whole.
func TestGeneralFrameMarked(t *testing.T) {
	a, b, ctx := connPair(t, 64<<10)
	buf := make([]byte, 8)
	exchange(t, ctx, a, b, buf)
	if !b.armed {
		t.Fatal("a small frame into a ring with room to clear ahead did not arm the next")
	}
	send := make([]byte, smallFrame+100) // larger than a sealed frame
	for i := range send {
		send[i] = byte(i*7 + 1)
	}
	if err := a.Send(ctx, fuzzWant, send); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.ready(forData, false); !ok || err != nil {
		t.Fatalf("an armed receiver's first look at a frame the general path wrote = %v, %v; want true", ok, err)
	}
	if b.armed {
		t.Fatal("the receiver stayed armed for a frame without a seal")
	}
	got := make([]byte, len(send))
	if err := b.Recv(ctx, fuzzWant, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(send) {
		t.Fatal("the marked frame's payload differs from what was sent")
	}
	// Small frames are sealed again after it.
	exchange(t, ctx, a, b, buf)
	exchange(t, ctx, a, b, buf)
	if !b.armed {
		t.Fatal("small frames after a marked one did not arm the next")
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
// to the seal the next lap's frame there will have, or to its mark (see
// markOf; the frames that wrap at the ring's end are marked): every frame
// arrives whole and in order, and many are found by their seal.
func TestSealedFramesLapTheRing(t *testing.T) {
	a, b, ctx := connPair(t, MinCapacity)
	const frames = 20000
	size := func(r *rand.Rand) int { return r.IntN(300) }
	// fill makes the payload of frame i that starts at stream position
	// start: a byte pattern, with a seal one lap ahead (a mark in odd
	// frames) in every word that lands where a line's seal word is.
	fill := func(buf []byte, i int, start uint64) {
		for j := range buf {
			buf[j] = byte(i + j)
		}
		for j := range buf {
			pos := start + transport.HeaderSize + uint64(j)
			if pos%frameAlign == sealOff && j+4 <= len(buf) {
				v := sealOf(pos - sealOff + MinCapacity)
				if i%2 == 1 {
					v = markOf(pos - sealOff + MinCapacity)
				}
				binary.LittleEndian.PutUint32(buf[j:], v)
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

// rewindCap is a ring large enough for its producer to rewind (see
// hotWindow) with room to spare.
const rewindCap = 4 * hotWindow

// Small frames that their consumer takes as they come stay within the
// first hotWindow bytes of a large ring: past it the producer writes a
// skip frame and starts the next lap. Every frame arrives whole and in
// order, one line or several (found by the tail: see clearAhead); where
// the consumer polls for the skip frame's seal, it finds the skip and the
// frame after it by their seals alone.
func TestSmallFramesRewind(t *testing.T) {
	a, b, ctx := connPair(t, rewindCap)
	buf, got := make([]byte, 200), make([]byte, 200)
	laps, bySeal := 0, 0
	for i := range 20000 {
		n := 1 + i%8
		if i%1000 >= 900 {
			n = 1 + i%len(buf) // frames of several lines, which arm nothing
		}
		for j := range n {
			buf[j] = byte(i + j)
		}
		h := fuzzWant
		h.Seq = uint64(i)
		lap, published, armed := a.tail/rewindCap, b.in.tail.Load(), b.armed
		if err := a.Send(ctx, h, buf[:n]); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if off := (a.tail - 1) & a.out.mask; off >= a.hot+armWindow/2+smallFrame {
			t.Fatalf("frame %d ends at offset %d of the ring, beyond the window (%d)", i, off, a.hot)
		}
		rewound := a.tail/rewindCap != lap
		if rewound {
			laps++
			// Before the consumer reads on, the ring still takes a
			// frame of the eager limit, as it would have without the
			// rewind.
			if !a.Buffers(a.EagerLimit()) {
				t.Fatalf("frame %d: after a rewind the ring has no room for %d bytes", i, a.EagerLimit())
			}
			if armed {
				// As if the producer had not stored the tail yet.
				b.in.tail.Store(published)
				bySeal++
			}
		}
		if err := b.Recv(ctx, h, got[:n]); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if string(got[:n]) != string(buf[:n]) {
			t.Fatalf("frame %d (%d bytes) differs", i, n)
		}
		b.in.tail.Store(a.tail)
	}
	// 20000 frames of mostly one line: about 1.5 MiB through a window
	// of 64 KiB.
	t.Logf("%d laps, %d of them found by their seals", laps, bySeal)
	if laps < 20 || bySeal < laps/2 {
		t.Fatalf("%d laps, %d of them found by their seals; want at least 20, most", laps, bySeal)
	}
}

// A producer whose consumer has not read what it wrote does not rewind:
// the frames go on past the window, and the consumer reads them all; once
// it has, the next small frame rewinds. A large frame never does.
func TestRewindWaitsForConsumer(t *testing.T) {
	a, b, ctx := connPair(t, rewindCap)
	buf := make([]byte, 1000)
	sent := 0
	for a.tail < hotWindow+8*1024 {
		if err := a.Send(ctx, fuzzWant, buf); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	if a.tail >= rewindCap {
		t.Fatalf("rewound at %d with the consumer at %d", a.tail, b.head)
	}
	for range sent {
		if err := b.Recv(ctx, fuzzWant, buf); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 2*smallFrame)
	before := a.tail
	exchange(t, ctx, a, b, big)
	if a.tail >= rewindCap || a.tail-before != frameEnd(before, len(big))-before {
		t.Fatalf("a %d-byte frame moved the tail from %d to %d", len(big), before, a.tail)
	}
	// The consumer's head is read again only a little further on.
	for a.tail < rewindCap && a.tail < before+2*armWindow {
		exchange(t, ctx, a, b, buf[:8])
	}
	if a.tail < rewindCap {
		t.Fatalf("no rewind by %d with the consumer caught up", a.tail)
	}
	exchange(t, ctx, a, b, buf[:8])
}

// A skip frame moves the consumer to the next lap, where it finds the next
// frame by its seal if the skip was armed and by the tail if not.
func TestSkipFrame(t *testing.T) {
	for _, flags := range []byte{flagSkip, flagSkip | flagArmed} {
		const pos = 128
		tail := uint64(rewindCap + frameAlign)
		if flags&flagArmed != 0 {
			tail = pos // both frames found by their seals
		}
		c, in := skipAt(t, pos, tail, flags, nil)
		in.fill(rewindCap, sealedFrame(rewindCap, 8, 0))
		got := make([]byte, 8)
		if err := c.Recv(t.Context(), fuzzWant, got); err != nil {
			t.Fatalf("flags %#x: %v", flags, err)
		}
		if string(got) != string(validFrame(8)[transport.HeaderSize:]) || c.head != rewindCap+frameAlign {
			t.Fatalf("flags %#x: got %v, head %d", flags, got, c.head)
		}
	}
}

// skipAt makes the consumer end of a connection over rings of rewindCap
// bytes, positioned at stream position pos (a frame boundary) and armed,
// with tail published, and writes there a skip frame with flags, edited
// by edit (nil: left as a producer writes it). It returns the consumer
// and its in ring.
func skipAt(t *testing.T, pos, tail uint64, flags byte, edit func(line []byte)) (*Conn, *mapping) {
	t.Helper()
	in, out := anonRing(t, rewindCap), anonRing(t, rewindCap)
	in.reset(pos, tail)
	out.reset(0, 0)
	c := newConn(out, in, 1, nil, transport.Header{}, cmaSetup{})
	c.local = true
	c.head, c.phead, c.tailC, c.tailL, c.armed = pos, pos, pos, pos, true
	var line [frameAlign]byte
	h := skipHeader(pos, rewindCap)
	h.Encode(line[:])
	if edit != nil {
		edit(line[:])
	}
	line[flagsOff] = flags
	binary.LittleEndian.PutUint32(line[sealOff:], sealOf(pos))
	in.fill(pos, line[:])
	return c, in
}

// Behind a skip frame that does not arm the next, the next frame is taken
// only once the tail covers it, however it looks.
func TestSkipFrameWaitsForTail(t *testing.T) {
	const pos = 128
	c, in := skipAt(t, pos, pos+frameAlign, flagSkip, nil)
	in.fill(rewindCap, sealedFrame(rewindCap, 8, 0)) // unpublished
	in.prodClosed.Store(1)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := c.Recv(ctx, fuzzWant, make([]byte, 8)); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("Recv of a frame behind an unarmed skip, not published = %v, want ErrPeerClosed", err)
	}
}

// Rewinding clears the seal words of the first armWindow bytes of the
// next lap before the skip frame arms the frame there: what an earlier lap
// left in them is never read as a seal.
func TestRewindClearsSeals(t *testing.T) {
	a, b, ctx := connPair(t, rewindCap)
	for a.tail < a.hot {
		exchange(t, ctx, a, b, make([]byte, 8))
	}
	for p := uint64(0); p < armWindow; p += frameAlign {
		a.out.seal(p, 0xdeadbeef)
	}
	a.rewind(8)
	if a.tail != rewindCap {
		t.Fatalf("no rewind: tail %d", a.tail)
	}
	for p := uint64(0); p < armWindow; p += frameAlign {
		if w := a.out.sealWord(p).Load(); w != 0 {
			t.Fatalf("seal word of the line at %d is %#x after a rewind", p, w)
		}
	}
	exchange(t, ctx, a, b, make([]byte, 8))
}

// Skip frames that no working producer writes are corrupt rings: one
// whose length does not end at the next lap, one at the start of a lap,
// one also marked lent, and one of another kind.
func TestCorruptSkip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pos   uint64
		edit  func(b []byte)
		flags byte
	}{
		{"short", 128, func(b []byte) { binary.LittleEndian.PutUint64(b[48:], skipHeader(128, rewindCap).Len-64) }, flagSkip},
		{"at a lap's start", rewindCap, nil, flagSkip},
		{"lent", 128, nil, flagSkip | flagLent},
		{"kind", 128, func(b []byte) { b[3] = byte(transport.KindCollective) }, flagSkip},
		{"comm", 128, func(b []byte) { b[8] = 1 }, flagSkip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, armed := range []bool{false, true} {
				c, in := skipAt(t, tc.pos, tc.pos+frameAlign, tc.flags, tc.edit)
				c.armed = armed
				in.prodClosed.Store(1) // a skip taken would wait for nothing
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				var fe *transport.FrameError
				if err := c.Recv(ctx, fuzzWant, make([]byte, 8)); !errors.As(err, &fe) {
					t.Fatalf("armed %v: Recv = %v, want a FrameError", armed, err)
				}
			}
		})
	}
}

// A producer of small frames keeps the seal words cleared between
// armWindow-clearBatch and armWindow bytes ahead of its tail, clearing a
// few lines at a time (see clearBatch), through rewinds.
func TestClearAheadInSmallBatches(t *testing.T) {
	a, b, ctx := connPair(t, 4*hotWindow)
	buf := make([]byte, 8)
	for i := range 3 * hotWindow / frameAlign {
		before := a.cleared
		exchange(t, ctx, a, b, buf)
		if i == 0 {
			continue
		}
		ahead := int64(a.cleared - a.tail)
		if ahead < armWindow-clearBatch || ahead > armWindow {
			t.Fatalf("frame %d: seal words cleared %d bytes ahead of the tail, want %d to %d", i, ahead, armWindow-clearBatch, armWindow)
		}
		if n := int64(a.cleared - before); n > clearBatch+frameAlign && a.tail&a.out.mask > frameAlign {
			t.Fatalf("frame %d: %d bytes' worth of seal words cleared at once, want at most %d", i, n, clearBatch+frameAlign)
		}
	}
}
