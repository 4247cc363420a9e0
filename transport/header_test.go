package transport

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Kind: KindP2P, Op: 11, DType: 9, RedOp: 4, Comm: 1 << 60, Epoch: 7, Step: 1 << 31, Seq: 1<<64 - 1, Root: 5, Count: 12345, Len: MaxLen}
	var b [HeaderSize]byte
	h.Encode(b[:])
	var g Header
	if err := g.Decode(b[:]); err != nil {
		t.Fatal(err)
	}
	if g != h {
		t.Fatalf("round trip: got %+v want %+v", g, h)
	}
}

func TestHeaderRejects(t *testing.T) {
	good := Header{Kind: KindCollective, Len: 10}
	var b [HeaderSize]byte
	good.Encode(b[:])
	cases := map[string]func(b []byte) []byte{
		"short":    func(b []byte) []byte { return b[:HeaderSize-1] },
		"magic":    func(b []byte) []byte { b[0] ^= 1; return b },
		"version":  func(b []byte) []byte { b[2] = 9; return b },
		"kind0":    func(b []byte) []byte { b[3] = 0; return b },
		"kind":     func(b []byte) []byte { b[3] = 200; return b },
		"flags":    func(b []byte) []byte { b[7] = 1; return b },
		"reserved": func(b []byte) []byte { b[37] = 1; return b },
		"length":   func(b []byte) []byte { b[55] = 0xff; return b },
	}
	for name, edit := range cases {
		c := append([]byte(nil), b[:]...)
		var h Header
		err := h.Decode(edit(c))
		var fe *FrameError
		if !errors.As(err, &fe) {
			t.Errorf("%s: Decode = %v, want FrameError", name, err)
		}
	}
}

func TestCheck(t *testing.T) {
	a := Header{Kind: KindCollective, Seq: 3, Len: 8}
	b := a
	if err := Check(&a, &b); err != nil {
		t.Fatal(err)
	}
	b.Seq = 4
	var me *MismatchError
	if err := Check(&a, &b); !errors.As(err, &me) || me.Got.Seq != 3 || me.Want.Seq != 4 {
		t.Fatalf("Check = %v", err)
	}
}

// A mismatch found through a digest names what the frame carried and what
// the receiver expected of the fields the digest stands for, never the
// unknown (zero) fields of Got as the frame's.
func TestDigestedMismatch(t *testing.T) {
	want := Header{Kind: KindCollective, Comm: 0xabc, Epoch: 2, Seq: 7, Step: 1, Root: 3, Count: 4, Len: 16}
	cases := []struct {
		got      Header
		contains string
	}{
		{Header{Kind: KindCollective, Seq: 7, Step: 1, Len: 16}, "another communicator, epoch, root or count than communicator 0xabc epoch 2 root 3 count 4"},
		{Header{Kind: KindCollective, Seq: 8, Step: 1, Len: 16}, "collective frame (seq 8), expected a collective frame (seq 7) of communicator 0xabc"},
		{Header{Kind: KindP2P, Seq: 7, Step: 1, Len: 16}, "p2p frame (seq 7), expected a collective frame (seq 7)"},
	}
	for _, tc := range cases {
		msg := (&MismatchError{Got: tc.got, Want: want, Digested: true}).Error()
		if !strings.Contains(msg, tc.contains) || strings.Contains(msg, "communicator 0x0") {
			t.Errorf("mismatch of %+v: %q, want it to say %q", tc.got, msg, tc.contains)
		}
	}
}

// FuzzHeaderDecode feeds arbitrary bytes to the frame header decoder: it
// must never panic, and whatever it accepts must re-encode to the same bytes.
// DecodeReserved returns what Decode rejects in the reserved fields, and
// rejects all else that Decode does.
func TestDecodeReserved(t *testing.T) {
	h := Header{Kind: KindCollective, Seq: 3, Len: 10}
	var b [HeaderSize]byte
	h.Encode(b[:])
	b[7], b[36], b[39] = 0x5a, 0x01, 0x80
	var g Header
	flags, word, err := g.DecodeReserved(b[:])
	if err != nil || flags != 0x5a || word != 0x80000001 || g != h {
		t.Fatalf("DecodeReserved = %+v, %#x, %#x, %v; want %+v, 0x5a, 0x80000001", g, flags, word, err, h)
	}
	if err := g.Decode(b[:]); err == nil {
		t.Fatal("Decode accepted set reserved fields")
	}
	b[0] ^= 1
	var fe *FrameError
	if _, _, err := g.DecodeReserved(b[:]); !errors.As(err, &fe) {
		t.Fatalf("DecodeReserved of a bad magic = %v, want FrameError", err)
	}
}

func FuzzHeaderDecode(f *testing.F) {
	var b [HeaderSize]byte
	(&Header{Kind: KindCollective, Seq: 1, Len: 4}).Encode(b[:])
	f.Add(b[:])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, HeaderSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		var h Header
		if err := h.Decode(in); err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("Decode error %T is not a FrameError", err)
			}
			return
		}
		if h.Len > MaxLen {
			t.Fatalf("accepted length %d", h.Len)
		}
		var out [HeaderSize]byte
		h.Encode(out[:])
		if !bytes.Equal(out[:], in[:HeaderSize]) {
			t.Fatalf("re-encoding changed the header:\n in %x\nout %x", in[:HeaderSize], out)
		}
	})
}
