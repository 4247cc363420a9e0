package shm

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/occl/occl/transport"
)

// wireSized returns data as the fixed-size message size bytes long that
// the setup exchange delivers: truncated or zero-padded.
func wireSized(data []byte, size int) []byte {
	b := make([]byte, size)
	copy(b, data)
	return b
}

// FuzzDecodeOffer checks that the offer decoder never panics on a message
// from a peer, that what it accepts is something this side can take up (a
// descriptor offer only with a sane threshold, offered payloads only with
// it) and that it survives a round trip.
func FuzzDecodeOffer(f *testing.F) {
	seeds := []offer{
		{status: statusOK, pid: 1234, capacity: 4 << 20, nonce: [nonceSize]byte{1, 2, 3}, text: "/dev/shm/occl-ring-1"},
		{status: statusError, text: "no /dev/shm"},
		{status: statusOK, pid: 7, capacity: 1 << 16, text: "/dev/shm/x", flags: flagCMA, probeAddr: 0x7f0000001000, threshold: 4 << 20,
			pattern: [probeSize]byte{9, 8, 7}},
		{status: statusOK, pid: 8, capacity: 4 << 20, text: "/dev/shm/y", flags: flagCMA, probeAddr: 0x7f0000002000, threshold: 1 << 20,
			pattern: [probeSize]byte{1}, offerMin: 32 << 10},
	}
	for _, o := range seeds {
		b := make([]byte, offerSize)
		o.encode(b)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := wireSized(data, offerSize)
		var o offer
		if err := o.decode(b); err != nil {
			return
		}
		if o.flags&flagCMA != 0 && (o.threshold == 0 || o.threshold > transport.MaxLen) {
			t.Fatalf("descriptor offer accepted with threshold %d", o.threshold)
		}
		if o.offerMin != 0 && (o.flags&flagCMA == 0 || o.offerMin > transport.MaxLen) {
			t.Fatalf("offers from %d bytes accepted without a sane descriptor offer (flags %#x)", o.offerMin, o.flags)
		}
		if len(o.text) > offerSize-offerText {
			t.Fatalf("text of %d bytes from a %d-byte offer", len(o.text), offerSize)
		}
		again := make([]byte, offerSize)
		o.encode(again)
		var o2 offer
		if err := o2.decode(again); err != nil {
			t.Fatalf("re-encoded offer rejected: %v", err)
		}
		if !reflect.DeepEqual(o, o2) {
			t.Fatalf("round trip: %+v became %+v", o, o2)
		}
	})
}

// FuzzDecodeAck checks that the ack decoder never panics, keeps its text
// inside the message and survives a round trip.
func FuzzDecodeAck(f *testing.F) {
	for _, a := range []struct {
		status uint32
		flags  uint16
		text   string
	}{{statusOK, 0, ""}, {statusOK, flagCMA, ""}, {statusError, 0, "cannot open the ring file"}} {
		b := make([]byte, ackSize)
		encodeAck(b, a.status, a.flags, a.text)
		f.Add(b)
	}
	f.Add(bytes.Repeat([]byte{0xff}, ackSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		b := wireSized(data, ackSize)
		status, flags, text := decodeAck(b)
		if len(text) > ackSize-ackText {
			t.Fatalf("text of %d bytes from a %d-byte ack", len(text), ackSize)
		}
		again := make([]byte, ackSize)
		encodeAck(again, status, flags, text)
		s2, f2, t2 := decodeAck(again)
		if s2 != status || f2 != flags || t2 != text {
			t.Fatalf("round trip: (%d %d %q) became (%d %d %q)", status, flags, text, s2, f2, t2)
		}
	})
}
