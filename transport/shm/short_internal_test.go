package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/occl/occl/transport"
)

// Payloads of 9 to shortMax bytes travel in short frames, one line each,
// found by the tail or by their seal; the others keep the full header.
func TestShortFrames(t *testing.T) {
	a, b, ctx := connPair(t, MinCapacity)
	for round := range 2 { // found by the tail, then by the seal
		for n := 0; n <= 2*frameAlign; n++ {
			send := make([]byte, n)
			for i := range send {
				send[i] = byte(i*31 + n + round)
			}
			start, published := a.tail, b.in.tail.Load()
			if err := a.Send(ctx, fuzzWant, send); err != nil {
				t.Fatalf("Send of %d bytes: %v", n, err)
			}
			line := a.out.data[start&a.out.mask:]
			short := line[flagsOff]&flagShort != 0
			if want := n > frameAlign-transport.HeaderSize && n <= shortMax; short != want {
				t.Fatalf("a frame of %d bytes short: %v, want %v", n, short, want)
			}
			if size := a.tail - start; short && size != frameAlign {
				t.Fatalf("a short frame of %d bytes took %d ring bytes, want one line", n, size)
			}
			got := make([]byte, n)
			switch {
			case round == 0:
				b.armed = false // the tail, which the producer published, finds the frame
			case short:
				if !b.armed {
					t.Fatalf("the consumer is not armed for the short frame of %d bytes", n)
				}
				b.in.tail.Store(published) // only the seal shows the frame
			}
			if err := b.Recv(ctx, fuzzWant, got); err != nil {
				t.Fatalf("Recv of %d bytes: %v", n, err)
			}
			if !bytes.Equal(got, send) {
				t.Fatalf("received %x, sent %x", got, send)
			}
			if b.head != a.tail {
				t.Fatalf("after a frame of %d bytes the consumer is at %d, the producer at %d", n, b.head, a.tail)
			}
		}
	}
}

// A short frame that is not the frame expected is a mismatch, whichever of
// its fields differs and whichever size the receiver expects; a short frame
// that cannot come from a producer is a corrupt ring.
func TestShortFrameMismatch(t *testing.T) {
	cases := []struct {
		name     string
		edit     func(h *transport.Header)
		n        int
		digested bool
	}{
		{"comm", func(h *transport.Header) { h.Comm++ }, 16, true},
		{"epoch", func(h *transport.Header) { h.Epoch++ }, 16, true},
		{"root", func(h *transport.Header) { h.Root++ }, 16, true},
		{"count", func(h *transport.Header) { h.Count++ }, 16, true},
		{"seq", func(h *transport.Header) { h.Seq++ }, 16, false},
		{"step", func(h *transport.Header) { h.Step++ }, 16, false},
		{"op", func(h *transport.Header) { h.Op++ }, 16, false},
		{"kind", func(h *transport.Header) { h.Kind = transport.KindP2P }, 16, false},
		{"shorter", func(h *transport.Header) {}, 8, false},
		{"longer short", func(h *transport.Header) {}, 24, false},
		{"longer full", func(h *transport.Header) {}, 100, false},
		{"large", func(h *transport.Header) {}, 64 << 10, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b, ctx := connPair(t, MinCapacity)
			if err := a.Send(ctx, fuzzWant, make([]byte, 16)); err != nil {
				t.Fatal(err)
			}
			want := fuzzWant
			tc.edit(&want)
			err := b.Recv(ctx, want, make([]byte, tc.n))
			var me *transport.MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("Recv = %v, want a MismatchError", err)
			}
			if me.Digested != tc.digested || me.Error() == "" {
				t.Fatalf("mismatch %q digested %v, want %v", me, me.Digested, tc.digested)
			}
			if !tc.digested && (me.Got.Comm != fuzzWant.Comm || me.Got.Count != fuzzWant.Count || me.Got.Len != 16) {
				t.Fatalf("mismatch reports the frame as %+v", me.Got)
			}
		})
	}

	corrupt := []struct {
		name string
		edit func(line []byte)
	}{
		{"length 8", func(l []byte) { binary.LittleEndian.PutUint32(l[shortLenOff:], 8) }},
		{"length beyond the line", func(l []byte) { binary.LittleEndian.PutUint32(l[shortLenOff:], shortMax+1) }},
		{"lent", func(l []byte) { l[flagsOff] |= flagLent }},
		{"skip", func(l []byte) { l[flagsOff] |= flagSkip }},
		{"kind", func(l []byte) { l[3] = 0 }},
		{"magic", func(l []byte) { l[0]++ }},
		{"reserved word", func(l []byte) { l[32] = 1 }},
	}
	for _, tc := range corrupt {
		t.Run(tc.name, func(t *testing.T) {
			a, b, ctx := connPair(t, MinCapacity)
			if err := a.Send(ctx, fuzzWant, make([]byte, 16)); err != nil {
				t.Fatal(err)
			}
			tc.edit(a.out.data[:frameAlign])
			err := b.Recv(ctx, fuzzWant, make([]byte, 16))
			var fe *transport.FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("Recv of a corrupt short frame = %v, want a FrameError", err)
			}
		})
	}
}

// Headers that differ in a field the digest covers get different digests.
func TestDigest(t *testing.T) {
	base := fuzzWant
	seen := map[uint64]string{digest(&base): "the header"}
	add := func(name string, bit int, edit func(h *transport.Header)) {
		h := base
		edit(&h)
		d := digest(&h)
		if prev, ok := seen[d]; ok {
			t.Fatalf("%s with bit %d flipped has the digest of %s", name, bit, prev)
		}
		seen[d] = fmt.Sprintf("%s with bit %d flipped", name, bit)
	}
	for i := range 64 {
		add("comm", i, func(h *transport.Header) { h.Comm ^= 1 << i })
		add("count", i, func(h *transport.Header) { h.Count ^= 1 << i })
		if i < 32 {
			add("epoch", i, func(h *transport.Header) { h.Epoch ^= 1 << i })
			add("root", i, func(h *transport.Header) { h.Root ^= 1 << i })
		}
	}
}
