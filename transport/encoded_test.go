package transport_test

import (
	"testing"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/transporttest"
)

// FuzzIsEncodedIn holds IsEncodedIn to DecodeReserved and a comparison of
// what it decodes: it must accept exactly the bytes that decode without an
// error into a header equal to h. The bytes are h's encoding, or that of
// h with one field off, with one byte possibly overwritten (the reserved
// flags byte and word included, which it must ignore), and possibly cut
// short.
func FuzzIsEncodedIn(f *testing.F) {
	f.Add(byte(1), byte(2), byte(7), byte(0), uint64(0xC0FFEE), uint64(5), uint32(3), uint32(1), uint32(2), uint64(99), uint64(8), uint8(0), byte(0), uint8(0), false)
	f.Add(byte(9), byte(0), byte(0), byte(0), uint64(1), uint64(1), uint32(0), uint32(0), uint32(0), uint64(0), uint64(0), uint8(7), byte(1), uint8(0), false)
	f.Add(byte(1), byte(0), byte(0), byte(0), uint64(1), uint64(1), uint32(0), uint32(0), uint32(0), uint64(0), uint64(1)<<41, uint8(0), byte(0), uint8(0), false)
	f.Add(byte(2), byte(1), byte(1), byte(1), uint64(7), uint64(9), uint32(1), uint32(4), uint32(0), uint64(3), uint64(12), uint8(37), byte(40), uint8(3), false)
	f.Add(byte(3), byte(0), byte(0), byte(0), uint64(0), uint64(0), uint32(0), uint32(0), uint32(0), uint64(0), uint64(0), uint8(0), byte(0), uint8(0), true)
	f.Fuzz(func(t *testing.T, kind, op, dtype, redop byte, comm, seq uint64, epoch, step, root uint32, count, n uint64, at uint8, val byte, off uint8, cut bool) {
		h := transport.Header{Kind: transport.Kind(kind), Op: op, DType: dtype, RedOp: redop, Comm: comm, Epoch: epoch, Step: step, Seq: seq, Root: root, Count: count, Len: n}
		sent := transporttest.OneFieldOff(h, off, at)
		b := make([]byte, transport.HeaderSize)
		sent.Encode(b)
		if int(at) < transport.HeaderSize {
			b[at] = val
		}
		if cut {
			b = b[:int(at)%transport.HeaderSize]
		}
		var got transport.Header
		_, _, err := got.DecodeReserved(b)
		want := err == nil && got == h
		if is := h.IsEncodedIn(b); is != want {
			t.Fatalf("IsEncodedIn = %v, DecodeReserved says %v (%v): bytes %x, header %+v", is, want, err, b, h)
		}
	})
}
