package tcp

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/occl/occl/transport"
)

// rawPair returns a Conn and the raw socket at its other end, so a test can
// write arbitrary bytes at it.
func rawPair(t testing.TB) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConn([]*net.TCPConn{s.(*net.TCPConn)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, raw
}

// FuzzConnRecv writes arbitrary bytes into a connection and reads them as
// a data frame (by Recv, and by SendRecv while it sends one) and as a
// control frame. None may panic, allocate from the declared length, or
// accept a frame that does not match what was expected.
func FuzzConnRecv(f *testing.F) {
	var good [transport.HeaderSize + 4]byte
	want := transport.Header{Kind: transport.KindCollective, Comm: 1, Seq: 2, Len: 4}
	want.Encode(good[:])
	f.Add(good[:], false)
	f.Add(good[:transport.HeaderSize], true)
	huge := want
	huge.Len = transport.MaxLen
	var hb [transport.HeaderSize]byte
	huge.Encode(hb[:])
	f.Add(hb[:], true)
	f.Fuzz(func(t *testing.T, in []byte, control bool) {
		c, raw := rawPair(t)
		defer c.Close()
		raw.Write(in)
		raw.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if control {
			h, msg, err := c.RecvMessage(ctx, 1024, nil)
			if err == nil && (len(msg) != int(h.Len) || len(msg) > 1024) {
				t.Fatalf("accepted %d bytes for a %d-byte header", len(msg), h.Len)
			}
			return
		}
		buf := make([]byte, 4)
		err := c.Recv(ctx, want, buf)
		if err == nil {
			var h transport.Header
			if h.Decode(in) != nil || h != want {
				t.Fatalf("accepted a frame that does not match: %x", in)
			}
		}
		d, raw2 := rawPair(t)
		defer d.Close()
		defer raw2.Close()
		raw2.Write(in)
		raw2.(*net.TCPConn).CloseWrite() // and takes what d sends
		err = d.SendRecv(ctx, want, make([]byte, 4), want, buf)
		if err == nil {
			var h transport.Header
			if h.Decode(in) != nil || h != want {
				t.Fatalf("SendRecv accepted a frame that does not match: %x", in)
			}
		}
	})
}

// FuzzDecodeHello checks that the handshake's hello decoder, which reads
// bytes from any client before it has authenticated, never panics, accepts
// only hellos that make sense (known purpose, ranks not negative, stream
// index below the stream count) and that what it accepts survives a round
// trip.
func FuzzDecodeHello(f *testing.F) {
	for _, h := range []Hello{
		{Purpose: PurposeRendezvous, Comm: 0x10ca1, From: 3, To: 0, NStreams: 1},
		{Purpose: PurposeData, Comm: 1 << 63, Epoch: 7, From: 1, To: 5, Stream: 3, NStreams: 4},
		{Purpose: PurposeRecovery, Comm: 0xfeed, From: 6, To: 1, NStreams: 1},
		{Purpose: PurposeProbe, Comm: 0xfeed, From: 2, To: 7, NStreams: 1},
	} {
		b := make([]byte, helloSize)
		h.encode(b, bytes.Repeat([]byte{0xa5}, nonceSize))
		f.Add(b)
	}
	f.Add([]byte(helloMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHello(data)
		if err != nil {
			return
		}
		if h.Purpose != PurposeRendezvous && h.Purpose != PurposeData && h.Purpose != PurposeRecovery && h.Purpose != PurposeProbe {
			t.Fatalf("accepted purpose %d", h.Purpose)
		}
		if h.From < 0 || h.To < 0 || h.NStreams < 1 || h.Stream < 0 || h.Stream >= h.NStreams {
			t.Fatalf("accepted %+v", h)
		}
		b := make([]byte, helloSize)
		h.encode(b, data[helloSize-nonceSize:helloSize])
		if !bytes.Equal(b, data[:helloSize]) {
			t.Fatalf("round trip of %+v: %x became %x", h, data[:helloSize], b)
		}
		h2, err := decodeHello(b)
		if err != nil || h2 != h {
			t.Fatalf("re-encoded hello: %+v, %v; want %+v", h2, err, h)
		}
	})
}
