package shm

import (
	"encoding/binary"
	"testing"

	"github.com/occl/occl/transport"
	"github.com/occl/occl/transport/transporttest"
)

// FuzzShortChecks checks the receiver's in-place check of a short frame
// (isShortOf, and decodeShort, which falls back on decoding) against a
// decoding of the line (shortHeader, an independent reading of a short
// frame's layout) and a comparison of what it decodes with the wanted
// header: they must accept exactly the lines whose decoding is valid and
// equal to it. The line is the short frame of the wanted header, or of one
// with a field off, with one byte of it possibly overwritten. (The check
// of a full header, transport.Header.IsEncodedIn, has the transport
// package's FuzzIsEncodedIn.)
func FuzzShortChecks(f *testing.F) {
	f.Add(byte(1), byte(2), byte(7), byte(0), uint64(0xC0FFEE), uint64(5), uint32(3), uint32(1), uint32(2), uint64(99), uint64(16), uint8(0), byte(0), uint8(0))
	f.Add(byte(3), byte(0), byte(0), byte(0), uint64(0), uint64(0), uint32(0), uint32(0), uint32(0), uint64(0), uint64(24), uint8(25), byte(1), uint8(1))
	f.Add(byte(2), byte(1), byte(1), byte(1), uint64(7), uint64(9), uint32(1), uint32(4), uint32(0), uint64(3), uint64(12), uint8(12), byte(40), uint8(7))
	f.Fuzz(func(t *testing.T, kind, op, dtype, redop byte, comm, seq uint64, epoch, step, root uint32, count, n uint64, at uint8, val byte, off uint8) {
		want := transport.Header{Kind: transport.Kind(kind), Op: op, DType: dtype, RedOp: redop, Comm: comm, Epoch: epoch,
			Step: step, Seq: seq, Root: root, Count: count, Len: n % (shortMax + 1)}
		sent := transporttest.OneFieldOff(want, off, at)
		line := make([]byte, frameAlign)
		encodeShort(line, &sent, make([]byte, min(sent.Len, shortMax)))
		binary.LittleEndian.PutUint32(line[shortLenOff:], uint32(sent.Len))
		if at < frameAlign && (at != flagsOff || val&flagShort == 0) {
			line[at] = val
		}
		d := digest(&want)
		ref := shortValid(line, &want)
		if got := isShortOf(line, &want, d); got != ref {
			t.Fatalf("isShortOf = %v, decoding says %v: line %x, want %+v", got, ref, line, want)
		}
		if got := decodeShort(line, &want) == nil; got != ref {
			t.Fatalf("decodeShort accepts: %v, decoding says %v: line %x, want %+v", got, ref, line, want)
		}
	})
}

// shortValid reports whether the short frame in line decodes (magic,
// version, kind, length and zero word) to want, its digest included.
func shortValid(line []byte, want *transport.Header) bool {
	le := binary.LittleEndian
	n := le.Uint32(line[shortLenOff:])
	return le.Uint16(line[0:]) == transport.Magic && line[2] == transport.Version && transport.Kind(line[3]).Valid() &&
		shortFits(int(n)) && le.Uint32(line[shortZeroOff:]) == 0 && le.Uint64(line[shortDigestOff:]) == digest(want) &&
		shortHeader(line, want) == *want
}
